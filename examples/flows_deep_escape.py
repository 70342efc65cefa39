"""Deep network (L > 2): escape time ∝ δ^{−(L−2)}. Deep linear (3 layers, L = 3) and a 3-layer
square net (L = 7). Writes examples/figures/flows_deep_escape.png."""
import pathlib

import jax
import matplotlib
import numpy as np

import flows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

X = jax.random.normal(jax.random.PRNGKey(0), (30, 6))
y = X[:, 0] * X[:, 1] + 0.5 * X[:, 2] ** 2 + X[:, 3]
fig, ax = plt.subplots(figsize=(5.5, 4))
for m, deltas, name in ((flows.deep_linear(3, 3), np.geomspace(1e-1, 1e-4, 5), "deep linear, 3 layers"),
                        (flows.feedforward((3, 2), "square"), np.geomspace(2e-1, 5e-2, 4), "square, 3 layers")):
    L = flows.check_degree(m, X)
    k = flows.kkt_points(m, X, y, starts=32, key=jax.random.PRNGKey(1))[0]
    hits = [flows.escape_time(m, k.direction, X, y, float(dl), L, k.value) for dl in deltas]
    slope = np.polyfit(np.log(deltas), np.log(hits), 1)[0]
    print(f"{name}: L={L}, N={k.value:.4f}, slope d ln t_hit/d ln δ = {slope:.3f} (theory {-(L - 2)})")
    ax.loglog(deltas, hits, "o-", label=f"{name} (L={L:g}): slope {slope:.2f}")
    ax.loglog(deltas, flows.time_shift(L, k.value, deltas), "k:", lw=0.8)
ax.set(xlabel="δ", ylabel="escape time (‖w‖ = 0.5)", title="escape ∝ δ^{−(L−2)}; dotted: T_δ")
ax.legend(fontsize=7)
out = pathlib.Path(__file__).parent / "figures"
out.mkdir(exist_ok=True)
fig.savefig(out / "flows_deep_escape.png", dpi=110)
