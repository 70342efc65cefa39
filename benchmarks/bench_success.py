"""GD success curves against δ at several d (issue #4 item 4; THEORY §3).

Phase retrieval y = z², quadratic student m = 4, a = 1/4 frozen, Q0 = I, square loss, η = 0.2,
random initialization (hard overlap O(d^{-1/2})), success = hard cos > 1/2 after the horizon.
The 50% point per d (binomial s.e.) is set next to the engine's threshold quantities for the
same setting: the DMFT δ*(t) at the latest committed time (``seed_claim.json``) and the
finite-d end-of-first-phase crossing δ*_d (``first_phase.json``), read from the committed
results (None when absent).
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import numpy as np

from dmft import activations
from dmft.success import success_curve

from .bench_delta_star_trend import problem

NAME = "success"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _committed_thresholds():
    out = {}
    try:
        sc = json.loads((RESULTS / "seed_claim.json").read_text())
        row = next(r for r in sc["data"]["table"] if r["activation"] == "quadratic" and r["setting"].startswith("m=4, a=1/4 frozen, Q0=I"))
        out["dmft_delta_star_t"] = dict(value=row["delta_star"][-1], physical_time=row["physical_times"][-1],
                                        source="benchmarks/results/seed_claim.json")
    except (OSError, StopIteration, KeyError):
        pass
    try:
        fp = json.loads((RESULTS / "first_phase.json").read_text())
        out["first_phase_delta_star_d"] = [dict(d=s["d"], value=s["delta_star_d"]) for s in fp["data"]["summary"]
                                           if s["setting"].startswith("quadratic")]
    except (OSError, KeyError):
        pass
    return out


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S = dict(lr=0.2, steps=3000, ds=[500, 1000], grid=[2.0, 2.5, 3.0, 3.5, 4.0], seeds=8, key=0)
    if tiny:
        S.update(steps=1500, ds=[100, 200], grid=[2.0, 3.0, 4.0], seeds=4)
    if not quick:
        S.update(ds=[500, 1000, 2000, 4000], seeds=16, steps=4000)
    P = problem(activations.get("quadratic"))
    rows, perf = [], []
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for d in S["ds"]:
        t0 = time.perf_counter()
        sc = success_curve(P, d, S["grid"], lr=S["lr"], steps=S["steps"], seeds=S["seeds"],
                           key=jax.random.fold_in(jax.random.key(S["key"]), d))
        wall = time.perf_counter() - t0
        perf.append(dict(what=f"GD success curve d={d} ({len(S['grid'])} δ x {S['seeds']} seeds x {S['steps']} steps, float32)",
                         value=wall, unit="s", ratio=None, note=jax.default_backend()))
        esc = [float(np.median(e[e >= 0]) * S["lr"]) if np.any(e >= 0) else None for e in sc.escape_step]
        rows.append(dict(d=d, success=sc.success.tolist(), delta_50=sc.delta_50, delta_50_stderr=sc.delta_50_stderr,
                         cos_final=sc.cos_final.tolist(), median_escape_time=esc))
        print(f"   d={d}: success {sc.success.tolist()} -> 50% point {sc.delta_50:.3f} ± {sc.delta_50_stderr:.3f} ({wall:.0f} s)",
              flush=True)
        ax[0].plot(S["grid"], sc.success, "o-", label=f"d={d}")
    ax[0].axhline(0.5, color="k", lw=0.5)
    ax[0].set_xlabel("δ")
    ax[0].set_ylabel(f"success fraction ({S['seeds']} seeds)")
    ax[0].legend(fontsize=7)
    x = np.log([r["d"] for r in rows])
    y = np.array([r["delta_50"] for r in rows])
    e = np.array([r["delta_50_stderr"] for r in rows])
    ax[1].errorbar(x, y, e, fmt="s-", label="GD 50% point")
    ref = _committed_thresholds()
    if "dmft_delta_star_t" in ref:
        ax[1].axhline(ref["dmft_delta_star_t"]["value"], color="C1", ls="--",
                      label=f"DMFT δ*(t·η={ref['dmft_delta_star_t']['physical_time']:g})")
    for r in ref.get("first_phase_delta_star_d", []):
        ax[1].plot(np.log(r["d"]), r["value"], "C2^", label=f"end of first phase, d={r['d']}")
    ax[1].set_xlabel("log d")
    ax[1].set_ylabel("δ")
    ax[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "success.png", dpi=110)
    plt.close(fig)
    trend = None
    ok = np.isfinite(y)
    if ok.sum() >= 2:
        slope, icpt = np.polyfit(x[ok], y[ok], 1)
        trend = dict(slope_per_log_d=float(slope), note="least-squares line of the 50% point against log d")
    return dict(setting=dict(S, problem="phase retrieval y=z^2, quadratic m=4, a=1/4 frozen, Q0=I, square loss, ridge 0",
                             init="random (hard overlap O(d^-1/2))", success="final hard cos > 1/2"),
                accuracy=[], performance=perf, data=dict(rows=rows, trend=trend, engine_thresholds=ref),
                figure="success.png")
