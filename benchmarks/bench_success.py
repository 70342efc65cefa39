"""GD success curves for phase retrieval against δ at several d, quadratic and GeLU students
(issue #4 item 4 and acceptance 2; THEORY §2, §3).

What. Phase retrieval y = z², width m = 4, a = 1/4 frozen, Q0 = I, square loss, ridge 0 (the
``deltann delta-nn`` default setting), full-batch GD from a random initialization (hard overlap
O(d^{-1/2})), ``dmft.success_curve`` on a δ grid at each d; success = final hard cos > 1/2.
Quadratic: η = 0.2, 3000 steps (t·η = 600); GeLU: η = 0.5, 1200 steps (t·η = 600). Standard:
d = 500, 1000, 2000, 8 seeds. The key at dimension d is ``fold_in(key(k), d)`` with k = 0
(quadratic; the rows written before GeLU was added are reproduced) and k = 1 (GeLU).

The engine's side, read from committed results (``engine``):
- δ*(t) of the dynamic DMFT, three independent keys (``delta_star_trend.json``: 1024 paths, T = 96,
  finite-n convention n = δ·1000; with paths < n the truncation removes nothing, so this is the law
  truncated at ~1/paths, as that benchmark's caveat says), mean ± s.e. at each time;
- whether the first phase converged (``seed_claim.json``): it does not in either setting, so the
  engine returns no δ_NN here — the strict-limit δ_NN does not exist either: with square loss on
  y = z², D = ∇F∇Fᵀ + (F − y)∇²F is unbounded below for both students (measured on the problem by
  ``spectral.unbounded_through_labels``), no bottom edge, no outlier at any (δ, t) in the strict
  convention;
- (quadratic) the finite-d end-of-first-phase crossing δ*_d (``first_phase.json``).

Readings (``accuracy_rows``, recomputed from the stored per-seed cos):
(a) per d, the 50% point (linear interpolation of the success fraction, binomial s.e. at p = 1/2);
the comparison with δ*(t) at the last DMFT time is one-sided: at finite d the hard overlap only has
to grow from d^{-1/2}, which an outlier present for part of the first phase can do, so the 50% point
should lie *below* the δ*(t) of the longest time (within 3 combined s.e.), and approach it from
below as d grows;
(b) the trend of (a) in log d: weighted linear fit (weights 1/s.e.²), slope per unit log d with s.e.
(approach means a positive slope).

Measured (standard, 2026-12-02, CPU, 4008 s with the test suite running alongside part of the time):
quadratic 2.33 ± 0.12, 2.63 ± 0.18, 2.80 ± 0.14 at d = 500, 1000, 2000 (slope 0.34 ± 0.13 per log d;
the d = 500/1000 rows equal the earlier quadratic-only run bit for bit); GeLU 3.67 ± 0.24,
4.75 ± 0.35, 5.40 ± 0.28 (slope 1.26 ± 0.26). All below the DMFT δ*(t) of the longest horizon
(3.97 ± 0.19 at t·η = 9.6; 9.86 ± 1.47 at t·η = 48), near δ*(t) at early times. Median escape
t·η grows faster than log d (GeLU δ = 5: 141, 235, 374), so at d = 2000 the t·η = 600 horizon
may cut some GeLU successes near δ = 4.5–5.

Probit rows (session 51; ``python -m benchmarks reanalyze success``: the stored fractions, no GD rerun): the
maximum-likelihood probit 50% point with its 95% profile interval, quadratic 2.470 [2.228, 2.541], 2.631
[2.417, 2.837], 2.811 [2.613, 3.011] (slope 0.245 ± 0.092 per log d); GeLU 4.089 [3.535, 4.494], 4.779
[4.512, 5.108], 5.325 [4.984, 5.738] (slope 0.879 ± 0.221). The same one-sided readings hold (all below the
last δ*(t), slopes > 2 s.e.).
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import spectral
from dmft import activations
from dmft.success import success_curve

from .bench_delta_star_trend import problem
from .bench_success_bounded import plot_probit, probit_note, probit_points, trend_fit

NAME = "success"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
THRESHOLD = 0.5
ACTS = dict(quadratic=dict(lr=0.2, steps=3000, grid=[2.0, 2.5, 3.0, 3.5, 4.0], key=0),
            gelu=dict(lr=0.5, steps=1200, grid=[3.0, 4.0, 4.5, 5.0, 6.0, 7.0], key=1))


def settings(mode: str) -> dict:
    S = dict(ds=[500, 1000, 2000], seeds=8, acts={a: dict(v) for a, v in ACTS.items()}, threshold=THRESHOLD)
    if mode == "quick":
        S.update(ds=[100, 200], seeds=4)
        S["acts"]["quadratic"].update(steps=1500, grid=[1.5, 2.5, 4.0])
        S["acts"]["gelu"].update(steps=600, grid=[2.0, 4.0, 6.0])
    if mode == "full":
        S.update(ds=[500, 1000, 2000, 4000], seeds=16)
    return S


def _engine():
    """The engine's threshold quantities for this setting from the committed results (empty
    entries when a file is absent)."""
    out = {a: {} for a in ACTS}
    try:
        tr = json.loads((RESULTS / "delta_star_trend.json").read_text())
        for a in ACTS:
            r = tr["data"][a]["d=1000"]
            out[a]["delta_star_t"] = dict(physical_time=r["physical_time"], value=r["delta_star"],
                                          stderr=r["delta_star_stderr"], keys=len(r["delta_star_per_key"]),
                                          convention=tr["setting"]["convention"] + "; " + tr["setting"]["caveat"],
                                          source="benchmarks/results/delta_star_trend.json")
    except (OSError, KeyError):
        pass
    try:
        sc = json.loads((RESULTS / "seed_claim.json").read_text())
        for a in ACTS:
            row = next(r for r in sc["data"]["table"] if r["activation"] == a and r["setting"].startswith("m=4, a=1/4 frozen, Q0=I"))
            out[a]["first_phase_converged"] = bool(row["first_phase_converged"])
            out[a]["first_phase_source"] = "benchmarks/results/seed_claim.json"
    except (OSError, StopIteration, KeyError):
        pass
    try:
        fp = json.loads((RESULTS / "first_phase.json").read_text())
        out["quadratic"]["first_phase_delta_star_d"] = [dict(d=s["d"], value=s["delta_star_d"]) for s in fp["data"]["summary"]
                                                        if s["setting"].startswith("quadratic")]
    except (OSError, KeyError):
        pass
    for a in ACTS:  # strict limit: measured on the problem (label rays), at the initial state's pre-activations
        P = problem(activations.get(a))
        r = jax.random.normal(jax.random.key(0), (1024, P.m), dtype=jnp.float64)
        sides = spectral.unbounded_through_labels(P, r, P.student.second_layer)
        out[a]["strict_limit"] = dict(
            unbounded_sides=list(sides), source="spectral.unbounded_through_labels (r ~ N(0, Q0) at M=0)",
            statement=("no threshold: D is unbounded below (label y = z^2 under square loss), no bottom edge, no outlier "
                       "in the strict limit at any δ, t" if "bottom" in sides else "D bounded below through the labels"))
    return out


def log_d_trend(rows):
    """The 50% point against log d: ``bench_success_bounded.trend_fit`` with x = log d."""
    return trend_fit(rows, x="log d")


def accuracy_rows(S, data, eng):
    """Per activation: each d's 50% point against the DMFT δ*(t) at the last committed time (one-sided:
    below it within 3 combined s.e.), and the log-d trend of the 50% point (approach from below
    = positive slope; reported, agreement = slope > 0 by 2 s.e.)."""
    acc = []
    for act, rows in data.items():
        A = S["acts"][act]
        ref = eng.get(act, {}).get("delta_star_t")
        conv = eng.get(act, {}).get("first_phase_converged")
        status = "first phase not converged: no δ_NN" if conv is False else "first-phase status unknown"
        th = float(ref["value"][-1]) if ref else None
        th_se = float(ref["stderr"][-1]) if ref else None
        below = f" below DMFT δ*(t·η={ref['physical_time'][-1]:g}) ({status})" if ref else ""
        cut = f"final hard cos > {S['threshold']}, t·η={A['steps'] * A['lr']:g}"

        def one_sided(quantity, r, note):
            """A 50% point (interpolated or probit) below the DMFT δ*(t): sim < theory + 3 combined s.e."""
            ok = np.isfinite(r["delta_50"]) and np.isfinite(r["delta_50_stderr"])
            agree = bool(ok and th is not None and r["delta_50"] < th + 3 * np.hypot(th_se, r["delta_50_stderr"]))
            return dict(quantity=quantity, theory=th, theory_stderr=th_se, simulation=r["delta_50"],
                        sim_stderr=r["delta_50_stderr"], d=r["d"], seeds=S["seeds"],
                        tolerance="one-sided: sim < theory + 3 combined s.e." + note, agree=agree if th is not None else None)

        for r in rows:
            ok = np.isfinite(r["delta_50"]) and np.isfinite(r["delta_50_stderr"])
            acc.append(one_sided(f"PR {act}: GD 50% point ({cut}){below}" if ref else f"PR {act}: GD 50% point", r,
                                 "" if ok else "; the grid does not bracket 50% success"))
        pr = probit_points(A["grid"], rows, S["seeds"])
        for f in pr:
            acc.append(one_sided(f"PR {act}: GD 50% point, probit maximum-likelihood fit Φ((δ − μ)/s) to every grid "
                                 f"point ({cut}){below}", f, probit_note(f)))
        for t, what in ((log_d_trend(rows), "GD 50% point"), (log_d_trend(pr), "GD probit 50% point")):
            if t["slope"] is not None:
                acc.append(dict(quantity=f"PR {act}: slope of the {what} per unit log d (approach from below: > 0)",
                                theory=None, simulation=t["slope"], sim_stderr=t["slope_stderr"],
                                d=", ".join(map(str, t["ds"])), seeds=S["seeds"], tolerance="slope > 2 s.e.",
                                agree=bool(t["slope"] > 2 * t["slope_stderr"])))
    return acc


def probit_data(S, data) -> dict:
    """Per activation, the probit 50% points per d and their log-d trend (``data["probit"]``,
    ``data["trend_probit"]``)."""
    pr = {a: probit_points(S["acts"][a]["grid"], rows, S["seeds"]) for a, rows in data.items()}
    return dict(probit=pr, trend_probit={a: log_d_trend(p) for a, p in pr.items()})


def reanalyze(res: dict) -> dict:
    """The accuracy rows and the probit records again from the stored success fractions and engine record
    (``python -m benchmarks reanalyze success``): no GD is rerun."""
    S, data = res["setting"], res["data"]
    return dict(res, accuracy=accuracy_rows(S, data["rows"], data["engine"]), data=dict(data, **probit_data(S, data["rows"])))


def figure(S, data, eng, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(19, 4))
    for j, (act, rows) in enumerate(data.items()):
        for r in rows:
            ax[j].plot(S["acts"][act]["grid"], r["success"], "o-", label=f"GD d={r['d']}: 50% at {r['delta_50']:.2f}")
        ref = eng.get(act, {}).get("delta_star_t")
        if ref:
            ax[j].axvline(ref["value"][-1], color="k", ls="--", lw=1, label=f"DMFT δ*(t·η={ref['physical_time'][-1]:g})")
        ax[j].axhline(0.5, color="grey", lw=0.5)
        ax[j].set_title(f"PR, {act} m=4, a=1/4 frozen: GD success ({S['seeds']} seeds)", fontsize=9)
        ax[j].set_xlabel("δ")
        ax[j].legend(fontsize=7)
        x = np.log([r["d"] for r in rows])
        ax[2].errorbar(x, [r["delta_50"] for r in rows], [r["delta_50_stderr"] for r in rows], fmt="s-", color=f"C{j}",
                       label=f"{act}: GD 50% point")
        plot_probit(ax[2], x + 0.03, probit_points(S["acts"][act]["grid"], rows, S["seeds"]), color=f"C{j}",
                    label=f"{act}: GD probit 50% point (95% interval)")
        if ref:
            ax[2].axhline(ref["value"][-1], color=f"C{j}", ls="--", lw=1,
                          label=f"{act}: DMFT δ*(t·η={ref['physical_time'][-1]:g}) ± {ref['stderr'][-1]:.2f} (not converged)")
    fp = eng.get("quadratic", {}).get("first_phase_delta_star_d", [])
    for i, r in enumerate(fp):
        ax[2].plot(np.log(r["d"]), r["value"], "C2^", ms=5,
                   label=None if i else "quadratic: finite-d first-phase δ*_d (hard weight below the edge = 1/4, first_phase.json)")
    ax[2].set_xlabel("log d")
    ax[2].set_ylabel("δ")
    ax[2].set_title("50% point against log d (strict limit: no threshold)", fontsize=9)
    ax[2].legend(fontsize=6)
    for j, (act, rows) in enumerate(data.items()):  # DMFT δ*(t) against time, GD 50% points as levels
        ref = eng.get(act, {}).get("delta_star_t")
        if ref:
            ax[3].errorbar(ref["physical_time"], ref["value"], ref["stderr"], fmt="o-", color=f"C{j}",
                           label=f"{act}: DMFT δ*(t) ({ref['keys']} keys)")
        for r in rows:
            ax[3].axhline(r["delta_50"], color=f"C{j}", ls=":", lw=0.8)
    ax[3].set_xscale("log")
    ax[3].set_xlabel("t·η")
    ax[3].set_title("DMFT δ*(t); dotted: GD 50% points (all d)", fontsize=9)
    ax[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)


def curve_record(sc, lr) -> dict:
    """What the JSON keeps of a ``dmft.success_curve``: success fractions, the 50% point, per-seed final
    hard cos (δ, seeds) and its mean, the median escape time t·η per δ (None where no seed escaped) and
    the final test error per δ."""
    cf = np.asarray(sc.cos_final)
    esc = [float(np.median(e[e >= 0]) * lr) if np.any(e >= 0) else None for e in np.asarray(sc.escape_step)]
    return dict(success=sc.success.tolist(), delta_50=sc.delta_50, delta_50_stderr=sc.delta_50_stderr,
                cos_final=cf.tolist(), cos_final_mean=cf.mean(1).tolist(), median_escape_time=esc,
                test_error_final=np.asarray(sc.test_curves)[:, -1].tolist())


def replot(res: dict, outdir: pathlib.Path):
    """The figure again from a result JSON of this benchmark (no simulation)."""
    figure(res["setting"], res["data"]["rows"], res["data"]["engine"], outdir)


def run(mode: str, outdir: pathlib.Path) -> dict:
    S = settings(mode)
    data, perf = {}, []
    for act, A in S["acts"].items():
        P = problem(activations.get(act))
        data[act] = []
        for d in S["ds"]:
            t0 = time.perf_counter()
            sc = success_curve(P, d, A["grid"], lr=A["lr"], steps=A["steps"], seeds=S["seeds"], threshold=S["threshold"],
                               key=jax.random.fold_in(jax.random.key(A["key"]), d))
            wall = time.perf_counter() - t0
            perf.append(dict(what=f"PR {act}: GD success curve d={d} ({len(A['grid'])} δ x {S['seeds']} seeds x {A['steps']} steps, float32)",
                             value=wall, unit="s", ratio=None, note=f"{jax.default_backend()}; incl. compilation"))
            data[act].append(dict(d=d, **curve_record(sc, A["lr"])))
            print(f"   {act} d={d}: success {sc.success.tolist()} -> 50% point {sc.delta_50:.3f} ± {sc.delta_50_stderr:.3f} "
                  f"({wall:.0f} s)", flush=True)
    eng = _engine()
    acc = accuracy_rows(S, data, eng)
    figure(S, data, eng, outdir)
    return dict(setting=dict(S, problem="phase retrieval y=z^2, m=4, a=1/4 frozen, Q0=I, square loss, ridge 0",
                             init="random (hard overlap O(d^-1/2))", success=f"final hard cos > {THRESHOLD}",
                             key_per_d="jax.random.fold_in(jax.random.key(acts[act]['key']), d)"),
                accuracy=acc, performance=perf,
                data=dict(rows=data, trend={a: log_d_trend(r) for a, r in data.items()}, engine=eng, **probit_data(S, data)),
                figure=f"{NAME}.png")
