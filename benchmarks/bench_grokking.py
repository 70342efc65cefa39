"""Grokking and escape times (issue #4 item 5; THEORY §2–§3).

Phase retrieval y = z², quadratic student m = 4, a = 1/4 frozen, Q0 = I, square loss, η = 0.2
(the setting whose first phase has a hard outlier at δ ≳ 3.5, benchmarks/results/first_phase.json).

- Test error against physical time t·η: DMFT (the first phase: the hard overlap stays 0, the
  test error plateaus) and GD from a random init at several d (plateau, then a drop when the
  hard overlap escapes), for δ below and above the threshold.
- Escape time (first step with hard cos > 1/2) against log d. Along an outlier at distance κ(t)
  below the bulk edge the hard overlap grows from O(d^{-1/2}) like exp ∫κ d(t·η), so (THEORY §3)
  ∫_0^{t_esc} κ = ½ log d + c. κ(t) is measured independently on the first phase at finite d
  (GD with the hard rows frozen, ``dmft.simulate(freeze_hard=True)``, then
  ``spectral.hard_outlier_at_state``) at checkpoints; the test without a free constant is
  I(t_esc(d2)) − I(t_esc(d1)) = ½ log(d2/d1) (``benchmarks/escape_integral.py``), and the
  slope of t_esc against log d is compared with 1/(2κ(t_esc)). Three forms of κ: edge − outlier
  (THEORY §3), −outlier, and the tangent growth of a hard perturbation under the linearized
  first phase; plus a direct reading of the GD growth rate against each (``growth_rate_rows``).
  Standard (16 seeds, 2026-12-03): only the tangent form agrees (docs/thresholds.md).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft import activations
from dmft.success import success_curve

from .bench_delta_star_trend import problem
from .escape_integral import accuracy_from_pairs, combined_rows, escape_pairs, growth_rate_rows, kappa_curve, tangent_growth

NAME = "grokking"


def score_escape(row: dict, S: dict) -> list:
    """THEORY §3's escape test for one δ row (escape-time medians and s.e. per d, κ(t) on the first
    phase): stores ``escape_integral_pairs`` in the row and returns its accuracy rows (none where not
    every seed escaped at every d). A pure function of the stored row: ``rescore`` reruns it on a
    committed JSON."""
    if "kappa_first_phase" not in row:
        return []
    se_t = np.array([e if e is not None else np.nan for e in row["escape_time_median_stderr"]], float)
    row["escape_integral_pairs"] = [p for kc in (row["kappa_first_phase"], row.get("kappa_tangent")) if kc
                                    for p in escape_pairs(S["ds"], np.asarray(row["escape_time_median"], float), se_t, kc,
                                                          S["lr"])]
    return accuracy_from_pairs(row["escape_integral_pairs"], row["delta"], S["seeds"])


def escape_statistics(per_d, lr, ds, boot: int = 2000, seed: int = 0) -> dict:
    """Escape-time statistics from per-seed escape steps (−1: not escaped within the horizon), per d:
    the median over ALL seeds with the unescaped ones beyond the horizon — ``None`` (censored) when at least half
    did not escape; before session 49 the median of the escaped seeds only was reported (e.g. δ = 2.5, d = 800:
    282.6 from 3 of 16 seeds, the true median being beyond t·η = 500) — and, where every seed escaped at every d,
    the slope of the median against log d with a bootstrap s.e. over seeds (a user audit measured a 25% s.e.)."""
    med, cens, only, sem = [], [], [], []
    for e in per_d:
        e = np.asarray(e)
        full = np.where(e >= 0, e, np.inf)
        m = float(np.median(full))
        cens.append(not np.isfinite(m))
        med.append(float(m * lr) if np.isfinite(m) else None)
        only.append(float(np.median(e[e >= 0]) * lr) if np.any(e >= 0) else None)
        sem.append(float(1.2533 * np.std(e[e >= 0] * lr, ddof=1) / np.sqrt(np.sum(e >= 0))) if np.sum(e >= 0) > 1 else None)
    out = dict(escape_time_median=med, escape_time_median_censored=cens, escape_time_median_escaped_only=only,
               escape_time_median_stderr=sem)
    if all(np.all(np.asarray(e) >= 0) for e in per_d):
        x = np.log(np.asarray(ds, float))
        rng = np.random.default_rng(seed)
        slopes = [np.polyfit(x, [np.median(rng.choice(np.asarray(e), len(e))) * lr for e in per_d], 1)[0]
                  for _ in range(boot)]
        out.update(slope_vs_log_d=float(np.polyfit(x, np.asarray(med), 1)[0]),
                   slope_vs_log_d_stderr=float(np.std(slopes, ddof=1)),
                   slope_stderr_method=f"bootstrap over seeds ({boot} resamples, numpy default_rng({seed}))")
    return out


def restat(res: dict) -> dict:
    """:func:`escape_statistics` applied to a stored result's per-seed escape steps (no simulation)."""
    S = res["setting"]
    for i, row in enumerate(res["data"]["escape"]):
        per_d = [res["data"]["gd"][str(d)]["escape_step"][i] for d in S["ds"]]
        row.update(escape_statistics(per_d, S["lr"], S["ds"]))
    return res


def rescore(res: dict) -> dict:
    """The escape-test rows of a grokking result recomputed from its stored escape times and κ(t)
    (no simulation): for a change of the test's statistics, not of the measurement."""
    S, escape = res["setting"], res["data"]["escape"]
    acc = [r for row in escape for r in score_escape(row, S)]
    acc += combined_rows([(r["delta"], r["escape_integral_pairs"]) for r in escape if "escape_integral_pairs" in r], S["seeds"])
    res["accuracy"] = [r for r in res["accuracy"] if not r["quantity"].startswith(("escape", "growth rate"))] + acc
    res["accuracy"] += growth_rate_rows(res)
    for p in (p for row in escape for p in row.get("escape_integral_pairs", [])):
        print(f"   {p['kappa']} d{p['d1']}->{p['d2']}: ΔI={p['delta_integral']:.3f}±{p['stderr']:.3f} (pred {p['predicted']:.3f})")
    return res


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S = dict(lr=0.2, steps=2500, ds=[200, 400, 800], deltas=[2.5, 4.0, 5.0, 6.0], seeds=16, key=0,
             dmft=dict(steps=100, paths=4096), kappa_d=400, kappa_seeds=6, kappa_checkpoints=12)
    if tiny:
        S.update(steps=1200, ds=[100, 200], deltas=[2.5, 6.0], seeds=4, dmft=dict(steps=50, paths=1024), kappa_d=100,
                 kappa_seeds=2, kappa_checkpoints=6)
    if not quick:
        S.update(ds=[400, 800, 1600, 3200], seeds=32, dmft=dict(steps=200, paths=16384), kappa_d=800)
    P = problem(activations.get("quadratic"))
    lr = S["lr"]
    perf, curves, acc = [], {}, []
    t0 = time.perf_counter()
    traj = dmft.solve_sweep(P, jnp.asarray(S["deltas"]), lr=lr, steps=S["dmft"]["steps"], paths=S["dmft"]["paths"],
                            key=jax.random.key(S["key"]), throw=False)
    dm_test = np.asarray(traj.test_error)
    perf.append(dict(what=f"DMFT δ sweep ({len(S['deltas'])} δ, T={S['dmft']['steps']}, {S['dmft']['paths']} paths)",
                     value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
    for d in S["ds"]:
        t0 = time.perf_counter()
        sc = success_curve(P, d, S["deltas"], lr=lr, steps=S["steps"], seeds=S["seeds"],
                           key=jax.random.fold_in(jax.random.key(S["key"] + 1), d))
        perf.append(dict(what=f"GD success curve d={d} ({len(S['deltas'])} δ x {S['seeds']} seeds x {S['steps']} steps)",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
        curves[d] = sc
        print(f"   d={d}: success {sc.success.tolist()}, median escape step "
              f"{[float(np.median(np.where(e >= 0, e, np.nan))) if np.any(e >= 0) else None for e in sc.escape_step]}", flush=True)
    # escape time against log d, per δ where every seed escaped at every d
    escape = []
    for i, dv in enumerate(S["deltas"]):
        per_d = [curves[d].escape_step[i] for d in S["ds"]]
        all_esc = all(np.all(e >= 0) for e in per_d)
        st = escape_statistics(per_d, lr, S["ds"])
        med = st["escape_time_median"]
        row = dict(delta=dv, d=S["ds"], **st, fraction_escaped=[float(np.mean(e >= 0)) for e in per_d],
                   all_escaped=bool(all_esc))
        if all_esc:
            slope = st["slope_vs_log_d"]
            row.update(kappa_from_slope=float(1.0 / (2.0 * slope)) if slope > 0 else None)
            # κ(t) on the first phase at finite d (hard rows frozen), checkpoints up to past the latest escape
            tmax = max(2, int(1.3 * max(med) / lr))
            cps = sorted({int(c) for c in np.geomspace(1, tmax, S["kappa_checkpoints"])})
            t0 = time.perf_counter()
            kc = kappa_curve(P, S["kappa_d"], dv, lr, cps, S["kappa_seeds"], jax.random.key(S["key"] + 2))
            perf.append(dict(what=f"κ(t) on the first phase δ={dv}, d={S['kappa_d']}, {len(cps)} checkpoints",
                             value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
            t0 = time.perf_counter()
            ktan = tangent_growth(P, S["kappa_d"], dv, lr, tmax, S["kappa_seeds"], jax.random.key(S["key"] + 2))
            perf.append(dict(what=f"tangent growth on the first phase δ={dv}, d={S['kappa_d']}, {tmax} steps",
                             value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
            tt = np.array([c["steps"] * lr for c in kc])
            k_mid = float(np.interp(np.median(med), tt, [c["kappa_edge"] for c in kc]))
            row.update(kappa_first_phase=kc, kappa_tangent=ktan, kappa_at_median_escape=k_mid,
                       predicted_slope=float(1.0 / (2.0 * k_mid)) if k_mid > 0 else None,
                       kappa_note=(f"κ(t) = constrained edge − bottom eigenvalue of the W-Hessian on the first phase at "
                                   f"d={S['kappa_d']} (hard rows frozen), {S['kappa_seeds']} seeds; predicted slope "
                                   "= 1/(2κ(t_esc)) at the median escape time; units of t·η"))
        escape.append(row)
        print(f"   δ={dv}: escape t·η {med} (all escaped: {all_esc}); slope {row.get('slope_vs_log_d')}, "
              f"predicted {row.get('predicted_slope')}", flush=True)
    # figures
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    dmax = S["ds"][-1]
    sc = curves[dmax]
    for i, dv in enumerate(S["deltas"]):
        ax[0].plot(sc.record_steps * lr, sc.test_curves[i], f"C{i}-", label=f"GD d={dmax}, δ={dv}")
        ax[0].plot(np.arange(S["dmft"]["steps"] + 1) * lr, dm_test[i], f"C{i}--", lw=2, label=f"DMFT δ={dv} (first phase)")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("t·η")
    ax[0].set_ylabel("test error")
    ax[0].legend(fontsize=6)
    for i, dv in enumerate(S["deltas"]):
        ax[1].plot(sc.record_steps * lr, np.median(sc.cos_curves[i], axis=0), f"C{i}-", label=f"δ={dv}")
    ax[1].axhline(0.5, color="k", lw=0.5)
    ax[1].set_xscale("log")
    ax[1].set_xlabel("t·η")
    ax[1].set_ylabel(f"hard cos (median of {S['seeds']} seeds, d={dmax})")
    ax[1].legend(fontsize=7)
    for i, row in enumerate(escape):
        if row["all_escaped"]:
            x = np.log(S["ds"])
            ax[2].errorbar(x, row["escape_time_median"], [e or 0 for e in row["escape_time_median_stderr"]], fmt=f"C{i}o",
                           label=f"δ={row['delta']}: slope {row['slope_vs_log_d']:.3g}")
            if row.get("predicted_slope"):
                ax[2].plot(x, row["escape_time_median"][0] + row["predicted_slope"] * (x - x[0]), f"C{i}--",
                           label=f"1/(2κ) = {row['predicted_slope']:.3g}")
    ax[2].set_xlabel("log d")
    ax[2].set_ylabel("escape time t·η (median)")
    ax[2].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "grokking.png", dpi=110)
    plt.close(fig)
    data = dict(escape=escape, dmft_test=dict(deltas=S["deltas"], steps=S["dmft"]["steps"], test_error=dm_test.tolist()),
                gd={str(d): dict(record_steps=c.record_steps.tolist(), test=c.test_curves.tolist(), train=c.train_curves.tolist(),
                                 success=c.success.tolist(), escape_step=c.escape_step.tolist(),
                                 cos_median=np.median(c.cos_curves, axis=1).tolist()) for d, c in curves.items()})
    res = dict(setting=dict(S, problem="phase retrieval y=z^2, quadratic m=4, a=1/4 frozen, Q0=I, square loss, ridge 0",
                            init="GD: random init (hard overlap O(d^-1/2)); DMFT: M0=0 (the first phase)",
                            escape="first step with hard cos > 1/2; time in units of t·η"),
               accuracy=acc, performance=perf, data=data, figure="grokking.png")
    return rescore(res)   # the escape-test rows, from the stored escape times and κ curves
