"""ReLU^p network (p = 2, L = 3): KKT directions and the limiting trajectory. Writes
examples/figures/flows_relu_p.png."""
import pathlib

import jax
import matplotlib
import numpy as np

import flows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d, n = 8, 40
X = jax.random.normal(jax.random.PRNGKey(0), (n, d))
y = jax.nn.relu(X[:, 0] + X[:, 1]) ** 2 - jax.nn.relu(X[:, 2]) ** 2
m = flows.two_layer("relu_p", width=5, p=2.0)
kk = flows.kkt_points(m, X, y, starts=128, key=jax.random.PRNGKey(1))
for k in kk[:3]:
    print(f"KKT N={k.value:.4f} Δ={k.gap:.4f} active={k.active_units[0].astype(int)} nnz={k.n_nonzero} fraction={k.fraction:.2f}")
w0 = m.init(jax.random.PRNGKey(3), d)
res = flows.limiting_trajectory(m, w0, X, y, deltas=(1e-2, 1e-3, 1e-4), ts=np.linspace(-0.1, 0.1, 41))
print("sup-errors", res.errors, "exponent", res.exponent, "support", res.exponent_support, "heuristic Δ/(LN)", res.exponent_heuristic)
fig, ax = plt.subplots(figsize=(5, 3.8))
for k, dl in enumerate(res.deltas):
    ax.plot(res.ts, res.norms[k], label=f"δ={dl:g}")
ax.plot(res.ts, res.p_norm, "k--", label="p(t)")
ax.set(xlabel="t − T̃_δ", ylabel="‖w‖", title="ReLU² net: shifted trajectories")
ax.legend()
out = pathlib.Path(__file__).parent / "figures"
out.mkdir(exist_ok=True)
fig.savefig(out / "flows_relu_p.png", dpi=110)
