"""Early-time finite-n thresholds δ*_n(t) against the GD success 50% points (issue #4).

Phase retrieval y = z² (quadratic student, m = 4, a = 1/4 frozen, Q0 = I, square loss, η = 0.2:
the setting of ``success.json``). The strict limit has no bottom edge (D unbounded below), so
the engine's threshold is the finite-n one: the law of D truncated at its 1 − 1/n quantile,
n = δd (THEORY §2). ``finite_n`` checks that convention against finite-d GD Hessians at the same
t (t·η = 2.4, 4.8) and finds δ*_n(t) rising in t; GD *succeeds* (learns the hard direction from
a random init, t·η = 600) below those values. THEORY §3 says escapes at finite d happen during
the transient, while the time-t Hessian still has a negative outlier. This benchmark measures
δ*_n(t) at the earliest times, t·η = 0, 0.2, 0.6 (t = 0: the Hessian at initialization; ``--full``
also 1.2),
at the dimensions of success.json, and compares each with the GD 50% point at the same d
(committed, success.json; not rerun here).

- theory: DMFT δ sweep (``dmft.solve_sweep``, common random numbers, M0 = 0), ``paths`` ≫ n so
  the 1/n quantile is resolved, independent keys (fold_in(key(7), k): keys 0, 1 are those of
  the 2-key probe of 2026-12-02 (docs/thresholds.md), whose t·η = 0.6 values this reproduces to the last
  digit);
  per key and d, the finite-n outlier margin (negative outlier below min(edge, 0)) on the grid and
  δ*_n(t) by linear interpolation of the first sign change; mean and s.e. over keys.
- simulation: the GD success 50% point per d (8 seeds, success = final hard cos > 0.5) and its
  binomial s.e. from success.json.

Rows: δ*_n(t) vs the 50% point at each (t, d) (3 combined s.e.; which time matches is the
finding, so a "no" row is a measurement, not a failure), and the slope per unit log d of δ*_n at
the earliest time with a threshold at every d against that of the 50% points.
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np

from dmft import activations

from .bench_delta_star_trend import problem
from .bench_finite_n import OUTLIER_OPTIONS, _row, _se, _slope, finite_n_key

NAME = "finite_n_early"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def gd_fifty_percent_points(path=RESULTS / "success.json"):
    """{d: (50% point, s.e.)} of the quadratic student from the committed success curves."""
    res = json.loads(pathlib.Path(path).read_text())
    return {int(r["d"]): (float(r["delta_50"]), float(r["delta_50_stderr"])) for r in res["data"]["rows"]["quadratic"]}


def summary(per_key, S):
    """Per d and time: δ*_n(t) mean over keys (nan-aware), s.e., and the number of keys with a root."""
    out = {}
    for d in S["ds"]:
        r = np.array([k[str(d)]["delta_star"] for k in per_key], float)       # (keys, times)
        out[str(d)] = dict(mean=[float(np.nanmean(c)) if np.isfinite(c).any() else float("nan") for c in r.T],
                           stderr=[_se(c) for c in r.T], keys_with_root=[int(np.isfinite(c).sum()) for c in r.T])
    return out


def accuracy_rows(summ, gd, S) -> list:
    rows = []
    tag = f"PR quadratic m=4, η={S['lr']}"
    for j, t in enumerate(S["times"]):
        for d in S["ds"]:
            s = summ[str(d)]
            g, gse = gd.get(d, (np.nan, np.nan))
            rows.append(_row(f"{tag}, t·η={t * S['lr']:g}: finite-n δ*_n(t) (n=δd, {s['keys_with_root'][j]} of "
                             f"{len(S['keys'])} keys with a root) vs GD success 50% point (t·η=600, success.json)",
                             s["mean"][j], s["stderr"][j], g, gse, d, S["gd_seeds"]))
    # the d-trend at the earliest time that has a threshold at every d
    j0 = next((j for j in range(len(S["times"])) if all(np.isfinite(summ[str(d)]["mean"][j]) for d in S["ds"])), None)
    if j0 is not None and all(d in gd for d in S["ds"]):
        x = np.log(S["ds"])
        th = _slope(x, [summ[str(d)]["mean"][j0] for d in S["ds"]],
                    np.maximum([summ[str(d)]["stderr"][j0] for d in S["ds"]], 1e-4))
        sim = _slope(x, [gd[d][0] for d in S["ds"]], [gd[d][1] for d in S["ds"]])
        rows.append(_row(f"{tag}, t·η={S['times'][j0] * S['lr']:g}: slope per unit log d of δ*_n(t) vs of the GD 50% "
                         f"point (d={S['ds'][0]}..{S['ds'][-1]})", th[0], th[1], sim[0], sim[1], S["ds"][-1],
                         S["gd_seeds"]))
    return rows


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jax.config.update("jax_enable_x64", True)
    S = dict(paths=16384, keys=[0, 1, 2, 3], key=7, grid=[1.5, 2.0, 2.5, 3.0, 3.5], lr=0.2, steps=3,
             times=[0, 1, 3], ds=[500, 1000, 2000])
    if mode == "quick":
        S.update(paths=2048, keys=[0, 1], grid=[1.5, 2.5, 4.0], times=[0, 3], ds=[500, 1000])
    if mode == "full":
        S.update(paths=65536, keys=list(range(8)), grid=[1.5, 2.0, 2.5, 3.0, 3.5, 4.0], steps=6, times=[0, 1, 3, 6])
    suc = json.loads((RESULTS / "success.json").read_text())
    S["gd_seeds"] = int(suc["setting"]["seeds"])
    gd = gd_fifty_percent_points()
    P = problem(activations.get("quadratic"))
    times = tuple(S["times"])
    perf, per_key = [], []
    for kk in S["keys"]:
        _, out = finite_n_key(P, S, kk, perf)
        per_key.append(out)
    summ = summary(per_key, S)
    data = dict(theory=dict(per_key=per_key, summary=summ),
                simulation=dict(source="success.json (quadratic rows)", fifty_percent_point={str(d): list(v) for d, v in gd.items()}))

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for j, t in enumerate(times):
        ax[0].errorbar(S["ds"], [summ[str(d)]["mean"][j] for d in S["ds"]], [summ[str(d)]["stderr"][j] for d in S["ds"]],
                       fmt="o-", capsize=2, label=f"finite-n δ*_n(t), t·η={t * S['lr']:g}")
    gds = sorted(gd)
    ax[0].errorbar(gds, [gd[d][0] for d in gds], [gd[d][1] for d in gds], fmt="k^--", capsize=2,
                   label="GD success 50% point (t·η=600)")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("d (n = δd)")
    ax[0].set_ylabel("δ")
    ax[0].legend(fontsize=7)
    d_show = S["ds"][-1]
    for j, t in enumerate(times):
        m = np.mean([k[str(d_show)]["margin"] for k in per_key], axis=0)
        ax[1].plot(S["grid"], m[:, j], "o-", label=f"t·η={t * S['lr']:g}")
    ax[1].axhline(0, color="k", lw=0.6)
    ax[1].set_xlabel("δ")
    ax[1].set_ylabel(f"finite-n margin, d={d_show} (<0: negative outlier)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
    return dict(setting=dict(S, problem="phase retrieval y=z^2, quadratic student, m=4, a=1/4 frozen, Q0=I, M0=0, square loss, ridge 0",
                             convention="finite-n: law of D truncated at its 1-1/n quantile, n=δd; the strict limit has no edge",
                             criterion="negative outlier below min(bulk edge, 0)", outlier_options=OUTLIER_OPTIONS,
                             simulation="GD success 50% points of success.json (random init, 3000 steps, 8 seeds, hard cos > 0.5)"),
                accuracy=accuracy_rows(summ, gd, S), performance=perf, data=data, figure=f"{NAME}.png")
