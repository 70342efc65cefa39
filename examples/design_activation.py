"""Notebook-style example: the threshold as a differentiable function of the activation.

    python examples/design_activation.py          # ~3 min on a 2-core CPU; writes examples/figures/design_activation.png

Setting (the one where the first phase converges, docs/thresholds.md): y = z1 + z2² − 1 (z2 hard),
m = 2, a = (1, 1/2) frozen, pseudo-Huber loss, ridge 0.3; δ_NN of the stationary route under the
separation criterion (the outlier leaves the bulk), per Monte Carlo key.
"""

# %% imports
import pathlib

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optax  # noqa: E402

from dmft import families as fam  # noqa: E402
from dmft.stationary import Warmup  # noqa: E402
from spectral import design, threshold_gradient  # noqa: E402

PATHS = 512
KEY = jax.random.key(3)
WARMUP = Warmup(0.5, 80, PATHS)

# %% 1. δ_NN and dδ_NN/dβ for softplus(βr)/β, checked against a central difference
family = fam.staircase_family("softplus-t")
params = dict(beta=1.0, width=1.0, ridge=0.3)
g = threshold_gradient(family, params, delta0=1.3, key=KEY, paths=PATHS, warmup=WARMUP, level="edge")
print(f"δ_NN = {g.delta_nn:.5f}; gradient: " + ", ".join(f"{k} {float(v):+.4f}" for k, v in g.gradient.items()))
h = 1e-4
up = threshold_gradient(family, dict(params, beta=1.0 + h), delta0=g.delta_nn, start=g.state, key=KEY, paths=PATHS,
                        level="edge").delta_nn
dn = threshold_gradient(family, dict(params, beta=1.0 - h), delta0=g.delta_nn, start=g.state, key=KEY, paths=PATHS,
                        level="edge").delta_nn
print(f"dδ_NN/dβ: implicit {float(g.gradient['beta']):+.6f}, central difference {(up - dn) / (2 * h):+.6f}")

# %% 2. a few design steps over c·(r, softplus, tanh, GeLU) / norm, starting from softplus
comb = fam.staircase_family("combination-normalized")   # unit Gaussian norm: the scale is not a design variable
keys = [jax.random.fold_in(KEY, i) for i in range(2)]
res = design(comb, dict(c=[0.0, 1.0, 0.0, 0.0], width=1.0, ridge=0.3), trainable=("c",), delta0=g.delta_nn, keys=keys,
             paths=PATHS, warmup=WARMUP, level="edge", steps=4, optimizer=optax.adam(0.05), progress=print)
print(res.status, res.message, "c =", [round(float(c), 4) for c in res.params["c"]])

# %% 3. figure: δ_NN along the design path and the activations
fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
ax[0].plot([s["step"] for s in res.history], [s["delta_nn"] for s in res.history], "o-")
ax[0].set_xlabel("design step")
ax[0].set_ylabel("δ_NN (mean of 2 keys)")
r = jnp.linspace(-4, 4, 200)
ax[1].plot(r, fam.Combination([0.0, 1.0, 0.0, 0.0], normalize=True)(r), label="softplus (start, normalized)")
ax[1].plot(r, fam.Combination(res.params["c"], normalize=True)(r), label="designed")
ax[1].set_xlabel("r")
ax[1].legend()
fig.tight_layout()
out = pathlib.Path(__file__).resolve().parent / "figures" / "design_activation.png"
out.parent.mkdir(exist_ok=True)
fig.savefig(out, dpi=100)
print("wrote", out)
