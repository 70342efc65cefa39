"""Activation design by gradient descent on δ_NN (issue #7), re-evaluated on fresh keys.

Setting: the staircase target (y = z1 + z2² − 1, m = 2, a = (1, 1/2) frozen, Q0 = I, M0 = 0),
pseudo-Huber loss (width 1), ridge 0.3, the separation criterion of the stationary route
(where the two routes agree: bench_two_route). Family: Combination(c, normalize=True) =
(c1 r + c2 softplus(r) + c3 tanh(r) + c4 GeLU(r)) / √E[(…)(Z)²], started at softplus (c = (0, 1, 0, 0)).
The normalization removes the scale: with the second layer frozen, shrinking σ lowers δ_NN through
the output scale alone (bench_threshold_gradient: at c = (0, 1, 0, 0) every dδ_NN/dc_i > 0). ``spectral.design`` runs
adam on the mean over ``design_keys`` of the per-key δ_NN with its implicit gradient; the
start, the designed activation and references (GeLU = (0, 0, 0, 1), SiLU-like) are then
evaluated on ``eval_keys`` independent keys (paired: the same keys for every activation),
so an improvement is claimed only when the paired difference exceeds 3 standard errors.

Not shown here: GD success curves of the designed network. Under this criterion (ridge 0.3)
the separated outlier is positive (no escape: bench_two_route), so GD is not expected to
follow it. The GD check of a designed activation is bench_design_gd (negative-outlier
criterion, dynamic DMFT δ*(t), ridge 0.2, against GeLU).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dmft import families as fam
from dmft.stationary import Warmup
from spectral.design import design
from spectral.threshold_gradient import ThresholdGradientError, threshold_gradient

NAME = "design"
FAMILY = "combination-normalized"
REFERENCES = {"gelu": [0.0, 0.0, 0.0, 1.0], "softplus (start)": [0.0, 1.0, 0.0, 0.0]}
DELTA0 = {"gelu": 2.2}   # GeLU: the stationary point is not converged near δ = 1.3 (quick run)


def _evaluate(fn, c, keys, paths, warmup, delta0):
    out = []
    for k in keys:
        try:
            r = threshold_gradient(fn, dict(c=jnp.asarray(c), width=jnp.asarray(1.0), ridge=jnp.asarray(0.3)), delta0=delta0,
                                   key=k, paths=paths, warmup=warmup, level="edge")
            out.append(dict(delta_nn=r.delta_nn, ok=True, message=""))
        except ThresholdGradientError as e:
            out.append(dict(delta_nn=None, ok=False, message=str(e)))
    return out



def delta_alg() -> dict:
    """The algorithmic threshold the designed δ_NN is to be read against (issue #7 item 3): weak recovery of
    the hard direction z2 of y = z1 + z2² − 1 by quadrature (bench_design_gd.weak_recovery_staircase)."""
    from .bench_design_gd import weak_recovery_staircase
    from .bench_design_pr import delta_alg as phase_retrieval_alg

    # given y and z1, z2² = y − z1 + 1 is observed exactly: noiseless phase retrieval in z2
    return dict(y_only=weak_recovery_staircase(), given_y_and_easy_direction=phase_retrieval_alg()["value"],
                note="weak-recovery optimum 1/E[(E[z2^2|.]-1)^2] for the hard direction z2, by quadrature; given the "
                     "easy direction it is noiseless phase retrieval's 1/2")

def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quick = mode == "quick"
    S = dict(family=FAMILY, start=[0.0, 1.0, 0.0, 0.0], loss="pseudo-Huber 1", ridge=0.3, level="edge (separation)",
             paths=512 if quick else 1024, design_keys=2, eval_keys=2 if quick else 6, steps=2 if quick else 10,
             learning_rate=0.05, optimizer="adam", warmup=dict(lr=0.5, steps=80), delta0=1.3,
             key_design=100, key_eval=200, target="y = z1 + z2^2 - 1 (z2 hard)", student="m=2, a=(1, 1/2) frozen",
             claim="designed < start by > 3 s.e. of the paired difference over eval keys")
    fn = fam.staircase_family(FAMILY)
    warm = Warmup(S["warmup"]["lr"], S["warmup"]["steps"], S["paths"])
    t0 = time.perf_counter()
    res = design(fn, dict(c=S["start"], width=1.0, ridge=0.3), trainable=("c",), delta0=S["delta0"],
                 keys=[jax.random.fold_in(jax.random.key(S["key_design"]), i) for i in range(S["design_keys"])],
                 paths=S["paths"], warmup=warm, level="edge", steps=S["steps"], optimizer=optax.adam(S["learning_rate"]))
    t_design = time.perf_counter() - t0
    c_opt = np.asarray(res.params["c"]).tolist()
    eval_keys = [jax.random.fold_in(jax.random.key(S["key_eval"]), i) for i in range(S["eval_keys"])]
    # quick: no GeLU reference (its separation threshold does not converge at these sizes, in the
    # standard run either: it never gave a row, and each failed solve runs to max_iters)
    refs = {k: v for k, v in REFERENCES.items() if not (quick and k == "gelu")}
    cands = dict(refs, designed=c_opt)
    evals = {name: _evaluate(fn, c, eval_keys, S["paths"], warm,
                             res.delta_nn if name == "designed" else DELTA0.get(name, S["delta0"]))
             for name, c in cands.items()}

    def stats(name):
        v = [e["delta_nn"] for e in evals[name] if e["ok"]]
        return (float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))) if len(v) >= 2 else (None, None)

    acc, diag = [], dict(design=dict(history=res.history, status=res.status, message=res.message, setting=res.setting,
                                     wall_s=t_design, params=c_opt), evaluation=evals)
    start_v = np.array([e["delta_nn"] if e["ok"] else np.nan for e in evals["softplus (start)"]])
    opt_v = np.array([e["delta_nn"] if e["ok"] else np.nan for e in evals["designed"]])
    diff = opt_v - start_v
    good = np.isfinite(diff)
    if good.sum() >= 2:
        dm, dse = float(diff[good].mean()), float(diff[good].std(ddof=1) / np.sqrt(good.sum()))
    else:
        dm, dse = None, None
    ms, ss = stats("softplus (start)")
    mo, so = stats("designed")
    acc.append(dict(quantity=f"δ_NN designed {FAMILY} (theory) vs softplus start (simulation column), fresh keys, "
                             "separation criterion", theory=mo, theory_stderr=so, simulation=ms, sim_stderr=ss,
                    d="inf (stationary DMFT)", seeds=int(good.sum()), paired_difference=dm, paired_stderr=dse,
                    tolerance="improvement if paired difference < -3 s.e.",
                    agree=bool(dm is not None and dm < -3 * dse)))
    mg, sg = stats("gelu") if "gelu" in evals else (None, None)
    if "gelu" not in evals:
        diag["gelu_note"] = ("quick: GeLU reference not evaluated (no converged separation threshold at these sizes; "
                             "see the standard run)")
    elif mg is not None and mo is not None:
        acc.append(dict(quantity=f"δ_NN designed {FAMILY} (theory) vs GeLU (simulation column), fresh keys, separation",
                        theory=mo, theory_stderr=so, simulation=mg, sim_stderr=sg, d="inf (stationary DMFT)",
                        seeds=len(eval_keys), tolerance="lower than GeLU by > 3 combined s.e.",
                        agree=bool(mo < mg - 3 * np.hypot(so, sg))))
    else:
        diag["gelu_note"] = ("GeLU: no differentiable separation threshold on some eval keys: "
                             + "; ".join(sorted({e["message"][:160] for e in evals["gelu"] if not e["ok"]})))
    diag["delta_alg"] = delta_alg()
    perf = [dict(what=f"design loop: {len(res.history) - 1} adam steps × {S['design_keys']} keys ({S['paths']} paths)",
                 value=t_design, unit="s", ratio=None, note="incl. compilation")]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].errorbar([h["step"] for h in res.history], [h["delta_nn"] for h in res.history],
                   yerr=[h["delta_nn_stderr"] or 0 for h in res.history], fmt="o-")
    ax[0].set_xlabel("design step")
    ax[0].set_ylabel(f"δ_NN (mean of {S['design_keys']} design keys)")
    r = jnp.linspace(-4, 4, 200)
    for name, c in cands.items():
        m, s = stats(name)
        lab = f"{name}: δ_NN={m:.3f}±{s:.3f}" if m is not None else f"{name}: no threshold"
        ax[1].plot(r, fam.Combination(c, normalize=True)(r), label=lab)
    ax[1].set_xlabel("r")
    ax[1].set_ylabel("σ(r)")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    return dict(setting=S, accuracy=acc, performance=perf, diagnostics=diag, figure=f"{NAME}.png")
