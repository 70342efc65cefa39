"""Two-layer square-activation net (L = 3) on a synthetic teacher: sparse KKT direction before
escape, the same sparsity along p(t) and at the first saddle. Writes examples/figures/flows_square_sparsity.png."""
import pathlib

import jax
import matplotlib
import numpy as np

import flows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d, n, width = 10, 40, 6
X = jax.random.normal(jax.random.PRNGKey(0), (n, d))
y = X[:, 0] * X[:, 1] + 0.5 * X[:, 2] ** 2
m = flows.two_layer("square", width=width)
kk = flows.kkt_points(m, X, y, starts=128, key=jax.random.PRNGKey(1))
for k in kk[:3]:
    print(f"KKT N={k.value:.4f} Δ={k.gap:.4f} active units={k.active_units[0].astype(int)} fraction={k.fraction:.2f}")
w0 = m.init(jax.random.PRNGKey(2), d)
delta = 1e-3
res = flows.limiting_trajectory(m, w0, X, y, deltas=(1e-2, 1e-3), ts=np.linspace(-0.05, 0.05, 41), saddle=True)
zp = flows.zero_preserving_subset(m, res.kkt.direction, X, y)
T = float(res.shifts[1])
sd = res.saddle
t_sad = sd.time - float(flows.time_shift(3, res.kkt.value, res.eps))
fr = flows.gradient_flow(m, w0, X, y, t1=T + 1.2 * t_sad, delta=delta, n_save=400, mask=zp.mask)
print(f"first saddle of p: loss {sd.loss:.4f}, ‖∇𝓛‖ {sd.grad_norm:.2e}, residual NCF {sd.residual_ncf:.3f}, saddle={sd.is_saddle}")
print(f"reached KKT: active units {res.kkt.active_units[0].astype(int)}; zero-preserving |Z| = {zp.n_zero}")
fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
for j in range(width):
    ax[0].loglog(fr.ts[1:], fr.unit_norms[0][1:, j], label=f"unit {j}")
ax[0].axvline(T, color="k", ls=":", label="T̃_δ")
ax[0].set(xlabel="t", ylabel="unit norm", title=f"square net, δ={delta:g}: per-unit norms")
ax[0].legend(fontsize=7)
ax[1].semilogx(fr.ts[1:], fr.loss[1:])
ax[1].set(xlabel="t", ylabel="loss", title="loss: plateau, escape, first saddle")
fig.tight_layout()
out = pathlib.Path(__file__).parent / "figures"
out.mkdir(exist_ok=True)
fig.savefig(out / "flows_square_sparsity.png", dpi=110)
