"""ReLU network (p = 1; NOT covered by the theorems, experimental=True): approximate
sparsity preservation — small units stay small through escape. Writes
examples/figures/flows_relu_experimental.png."""
import pathlib

import jax
import matplotlib
import numpy as np

import flows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d, n, width = 6, 40, 6
X = jax.random.normal(jax.random.PRNGKey(0), (n, d))
y = jax.nn.relu(X[:, 0]) - jax.nn.relu(X[:, 1])
m = flows.two_layer("relu", width=width)
try:
    flows.kkt_points(m, X, y, starts=8)
except flows.FlowError as e:
    print("refused as expected:", str(e)[:100], "...")
w0 = m.init(jax.random.PRNGKey(2), d)
fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
for a, delta in zip(ax, (1e-2, 1e-4)):
    fr = flows.gradient_flow(m, w0, X, y, t1=40.0, delta=delta, n_save=300, experimental=True,
                             dt=2e-3)   # fixed step: adaptive PID stalls at ReLU kinks
    un = fr.unit_norms[0]
    for j in range(width):
        a.loglog(fr.ts[1:], un[1:, j])
    final = un[-1] / un[-1].max()
    print(f"δ={delta:g}: final relative unit norms {np.round(final, 4)}; loss {fr.loss[-1]:.4f}")
    print('  code:', fr.code, fr.message)
    a.set(xlabel="t", ylabel="unit norm", title=f"ReLU (experimental), δ={delta:g}")
fig.tight_layout()
out = pathlib.Path(__file__).parent / "figures"
out.mkdir(exist_ok=True)
fig.savefig(out / "flows_relu_experimental.png", dpi=110)
