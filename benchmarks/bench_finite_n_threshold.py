"""The finite-n spectral threshold δ*_n(t) with paths ≫ n against GD's δ*_d(t) at d = 500 and 1000
(issue #4 item 3; THEORY §2).

Why. ``finite_n`` (16 384 paths, 2 keys, GD 4 seeds) compares δ*_n(t) with δ*_d(t) in six cells; one,
d = 1000 at t·η = 2.4, is 3.9 combined s.e. off (3.93 ± 0.07 vs 4.23 ± 0.05). There paths/n is only
3.3–4.7 on δ = 3.5–5, so the 1/n tail that the finite-n convention removes is itself a few samples,
and four seeds understate GD's spread (as ``finite_n_edge`` showed for the edge's log n slope). This
benchmark measures that cell and its neighbour d = 500 with both errors resolved:

- theory: ``dmft.solve_sweep`` over the δ grid (the ``finite_n`` setting: phase retrieval y = z²,
  quadratic student m = 4, a = 1/4 frozen, Q0 = I, M0 = 0, square loss, η = 0.2, t·η = 2.4; common
  random numbers across δ) with ``paths`` ≥ 20 n at every (δ, d), ``keys`` independent keys; at each
  (δ, d) the finite-n outlier margin (``spectral.thresholds.margins_from_sweep``, the code path of
  ``finite_n`` and of ``deltann delta-nn``: law of D truncated at its 1 − 1/n quantile, n = δd;
  criterion: a negative outlier). δ*_n = the first sign change of the **key-mean** margin (linear
  interpolation), s.e. by jackknife over keys. (Per-key roots are also stored; a key whose margin
  does not change sign on the grid has none, so their mean is biased and is not the row.)
- simulation: GD at d on the first-phase manifold (``freeze_hard=True``), same η and t, ``seeds``
  seeds with common random numbers across δ (key ``fold_in(key(sim_key), d)``); the hard weight of
  the eigenvectors below the edge of the Hessian restricted to the non-hard rows
  (``spectral.hard_outlier_at_state``, float64, dense); δ*_d = where the seed-mean weight crosses 0.25
  (the ``first_phase`` / ``finite_n`` convention), s.e. by bootstrap over seeds.

Rows: δ*_n vs δ*_d per d (3 combined s.e.; the δ*_d s.e. omits the linear interpolation on a grid of
spacing 0.5, so the tolerance is not widened for it).

Measured (standard, 2026-12-05, CPU, 4604 s: 4 keys × 131 072 paths, paths/n = 26–75; 16 GD seeds):
δ*_n = 4.10 ± 0.07 / 4.57 ± 0.09 at d = 500 / 1000 against δ*_d = 3.78 ± 0.14 / 4.44 ± 0.12 (2.0 / 0.9
combined s.e.; both rows agree). ``finite_n``'s 16 384-path values in the same cells were 3.79 ± 0.01 and
3.93 ± 0.07: at paths/n = 3–9 the truncated law's threshold is biased low by 0.3–0.6, not only noisy.
Both theory values lie above GD's (jointly +0.22 ± 0.11); GD's constrained edge also lies 0.00–0.04
below the truncated law's (``finite_n_edge``: the convention predicts the median seed, not the mean).
``finite_n_threshold_late`` runs this code at t·η = 4.8: both cells agree again and the tendency is absent.
``finite_n_threshold_d250`` runs it at d = 250 for both times (``times``): 1.6 / 4.0 s.e., and over the six
cells the theory lies above GD by +0.22 ± 0.05; ``finite_n_threshold_d500`` repeats d = 500 with other keys:
+0.17 ± 0.04 over eight cells, shrinking with d (0.31 ± 0.07 at d = 250, 0.11 ± 0.05 at 500);
``finite_n_threshold_d1000`` repeats d = 1000: +0.14 ± 0.04 over ten cells, 0.03 ± 0.07 at d = 1000.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft import activations
from spectral.thresholds import _root_on_grid, margins_from_sweep

from .bench_delta_star_trend import problem
from .bench_finite_n import OUTLIER_OPTIONS, _bootstrap_crossing, _row, _se, gd_first_phase_spectra
from .bench_first_phase import LEVEL, _crossing

NAME = "finite_n_threshold"


def settings(mode: str) -> dict:
    S = dict(grid=[3.5, 4.0, 4.5, 5.0], lr=0.2, steps=12, paths=131_072, keys=4, key=13, ds=[500, 1000], seeds=16,
             sim_key=8, k=6, outlier_options=OUTLIER_OPTIONS,
             problem="phase retrieval y=z^2, quadratic student, m=4, a=1/4 frozen, Q0=I, M0=0, square loss, ridge 0",
             convention="finite-n: law of D truncated at its 1-1/n quantile, n=δd (the strict limit has no threshold)",
             criterion="negative outlier below min(bulk edge, 0); δ*_n = first sign change of the key-mean margin",
             simulation=f"dmft.simulate freeze_hard=True; hard weight of the eigenvectors below the constrained edge "
                        f"(float64, dense); δ*_d = seed-mean weight crosses {LEVEL}",
             keys_note="DMFT key j: fold_in(key(key), j), one δ sweep per key; GD at d: fold_in(key(sim_key), d) for every δ")
    if mode == "quick":
        S.update(grid=[3.0, 4.0, 5.0], paths=2048, keys=2, ds=[200], seeds=2)
    if mode == "full":
        S.update(grid=[3.0, 3.5, 4.0, 4.5, 5.0], paths=524_288, keys=8, ds=[500, 1000, 2000], seeds=32)
    return S


def two_times(mode: str, standard: dict, full: dict) -> dict:
    """Setting of a variant that measures t·η = 2.4 and 4.8 from one run (``times``): ``standard`` and
    ``full`` override :func:`settings`; the quick sizes are common (d = 100, 2 keys, 2 seeds, steps 6, 12)."""
    S = settings(mode)
    S.update(steps=24, times=[12, 24], **standard)
    if mode == "quick":
        S.update(steps=12, times=[6, 12], grid=[3.0, 4.0, 5.0], paths=2048, keys=2, ds=[100], seeds=2)
    if mode == "full":
        S.update(full)
    return S


def _times(S) -> tuple:
    """The steps at which thresholds are measured: ``S["times"]`` if given (a variant measuring several
    times from one DMFT solve and one GD run per δ), else ``(S["steps"],)``."""
    return tuple(S.get("times", (S["steps"],)))


def key_sweep(P, S, j: int):
    """DMFT key j's δ sweep (``dmft.solve_sweep`` on ``S["grid"]``, key ``fold_in(key(S["key"]), j)``, samples at
    the steps of :func:`_times`), and its seconds (compilation included on the first key)."""
    t0 = time.perf_counter()
    traj = dmft.solve_sweep(P, jnp.asarray(S["grid"]), lr=S["lr"], steps=S["steps"], paths=S["paths"],
                            key=jax.random.fold_in(jax.random.key(S["key"]), j), save_samples_at=_times(S), throw=False)
    jax.block_until_ready(traj.train_error)
    return traj, time.perf_counter() - t0


def theory_margins(P, S, perf) -> list:
    """Per key: the DMFT δ sweep and the finite-n margin, edge, outlier and cos² at every (d, δ); one
    dict per time of :func:`_times` (one DMFT solve to ``S["steps"]`` serves them all)."""
    times = _times(S)
    outs = [dict(margin=[], edge=[], outlier=[], cosine2=[], notes=[]) for _ in times]
    for j in range(S["keys"]):
        t0 = time.perf_counter()
        traj, t_dmft = key_sweep(P, S, j)
        per = [margins_from_sweep(P, traj, S["grid"], times, convention="finite-n", d=d,
                                  outlier_options=S["outlier_options"]) for d in S["ds"]]
        for b, out in enumerate(outs):
            for name, i in (("margin", 0), ("outlier", 1), ("edge", 2), ("cosine2", 3)):
                out[name].append([np.asarray(p[i])[:, b].tolist() for p in per])      # (d, δ)
            out["notes"].append([[n for n in p[4] if len(times) == 1 or f", t={times[b]}:" in n][:5] for p in per])
        perf.append(dict(what=f"key {j}: DMFT δ sweep ({len(S['grid'])} δ, T={S['steps']}, m=4, {S['paths']} paths) + "
                              f"finite-n outlier solves at {len(S['ds'])} d × {len(S['grid'])} δ × {len(times)} t",
                         value=time.perf_counter() - t0, unit="s", ratio=None,
                         note=f"DMFT {t_dmft:.1f} s (incl. compilation on the first key)"))
        print(f"   key {j}: margins {[np.round(o['margin'][-1], 4).tolist() for o in outs]} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return outs


def gd_weights(P, S, perf) -> list:
    """Hard weight below the constrained edge and the constrained edge per (d, δ, seed); one dict per
    time of :func:`_times` (one GD run per (d, δ) serves them all)."""
    times = _times(S)
    hw = np.full((len(times), len(S["ds"]), len(S["grid"]), S["seeds"]), np.nan)
    ce = hw.copy()
    for a, d in enumerate(S["ds"]):
        for i, dv in enumerate(S["grid"]):
            t0 = time.perf_counter()
            out = gd_first_phase_spectra(P, S, d, dv, times)
            ce[:, a, i], hw[:, a, i] = out[0], out[2]
            perf.append(dict(what=f"GD d={d} δ={dv:g}: {S['steps']} steps × {S['seeds']} seeds + dense Hessians at "
                                  f"{len(times)} t", value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
            print(f"   GD d={d} δ={dv:g}: hard weight {np.round(hw[:, a, i].mean(-1), 3).tolist()} ± "
                  f"{[round(_se(h), 3) for h in hw[:, a, i]]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return [dict(hard_weight_below_edge=hw[b].tolist(), constrained_edge=ce[b].tolist()) for b in range(len(times))]


def threshold_from_margins(grid, margins) -> tuple:
    """δ*_n of the key-mean margin curve (first sign change, linear interpolation) and its jackknife
    s.e. over keys (nan if a leave-one-out curve has no sign change); margins: (keys, δ)."""
    m = np.asarray(margins, float)
    root = _root_on_grid(np.asarray(grid), m.mean(0))[0]
    K = m.shape[0]
    if K < 2:
        return root, float("nan")
    loo = np.array([_root_on_grid(np.asarray(grid), np.delete(m, j, 0).mean(0))[0] for j in range(K)])
    se = float(np.sqrt((K - 1) / K * np.sum((loo - loo.mean()) ** 2))) if np.all(np.isfinite(loo)) else float("nan")
    return float(root), se


def summary(data, S) -> dict:
    """Per d: δ*_n (key-mean margin, jackknife s.e.), the per-key roots, δ*_d (bootstrap s.e.). A
    threshold below the grid is nan on both sides (no sign change / weight above the level at the first δ)."""
    out = {}
    margin = np.asarray(data["theory"]["margin"])                 # (keys, d, δ)
    hw = np.asarray(data["simulation"]["hard_weight_below_edge"])  # (d, δ, seeds)
    for a, d in enumerate(S["ds"]):
        root, se = threshold_from_margins(S["grid"], margin[:, a])
        per_key = [_root_on_grid(np.asarray(S["grid"]), margin[j, a])[0] for j in range(margin.shape[0])]
        cr = _crossing(S["grid"], hw[a].mean(-1))
        cse, lost = _bootstrap_crossing(S["grid"], hw[a])
        out[str(d)] = dict(delta_star_n=root, delta_star_n_stderr=se, per_key_roots=per_key,
                           key_mean_margin=margin[:, a].mean(0).tolist(),
                           key_margin_stderr=[_se(c) for c in margin[:, a].T],
                           paths_over_n=[S["paths"] / (dv * d) for dv in S["grid"]],
                           delta_star_d=cr, delta_star_d_stderr=cse, bootstrap_no_crossing=lost,
                           gd_hard_weight=hw[a].mean(-1).tolist(), gd_hard_weight_stderr=[_se(r) for r in hw[a]])
    return out


def accuracy_rows(data, S) -> list:
    tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * S['steps']:g}"
    rows = []
    for d in S["ds"]:
        s = data["summary"][str(d)]
        rows.append(_row(f"{tag}: δ*_n(t) finite-n, key-mean margin ({S['paths']} paths, paths/n ≥ "
                         f"{min(s['paths_over_n']):.0f}, {S['keys']} keys, jackknife s.e.) vs finite-d δ*_d(t) (hard weight "
                         f"below edge crosses {LEVEL}, bootstrap s.e.)", s["delta_star_n"], s["delta_star_n_stderr"],
                         s["delta_star_d"], s["delta_star_d_stderr"], d, S["seeds"]))
    return rows


def run(mode: str, outdir: pathlib.Path) -> dict:
    return run_setting(settings(mode), NAME, outdir)


def run_setting(S: dict, name: str, outdir: pathlib.Path) -> dict:
    """The benchmark for a setting ``S`` (of ``settings`` or a variant's), JSON and figure named ``name``.
    With ``S["times"]``, ``data`` holds one record per time, keyed ``"t<steps>"``, each laid out as the
    single-time ``data`` and summarized with ``S`` at ``steps`` = that time (:func:`at_time`)."""
    jax.config.update("jax_enable_x64", True)
    P = problem(activations.get("quadratic"))
    perf = []
    theory = theory_margins(P, S, perf)
    sim = gd_weights(P, S, perf)
    per_time, rows = {}, []
    for b, t in enumerate(_times(S)):
        St = at_time(S, t)
        data = dict(theory=theory[b], simulation=sim[b])
        data["summary"] = summary(data, St)
        per_time[f"t{t}"] = data
        rows += accuracy_rows(data, St)
    data = per_time if "times" in S else per_time[f"t{S['steps']}"]
    res = dict(setting=S, accuracy=rows, performance=perf, data=data, figure=f"{name}.png")
    replot(res, outdir)
    return res


def at_time(S: dict, t: int) -> dict:
    """The setting as seen by :func:`summary` / :func:`accuracy_rows` for the record at step ``t``."""
    return {**S, "steps": t}


def records(res) -> list:
    """(setting at the time, data record) pairs of a result, one per time."""
    S = res["setting"]
    if "times" not in S:
        return [(S, res["data"])]
    return [(at_time(S, t), res["data"][f"t{t}"]) for t in S["times"]]


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = records(res)
    fig, axes = plt.subplots(len(recs), 2, figsize=(11, 4 * len(recs)), squeeze=False)
    for ax, (S, data) in zip(axes, recs):
        _draw(ax, S, data)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / res["figure"], dpi=110)
    plt.close(fig)


def _draw(ax, S, data):
    """Left: key-mean finite-n margins (keys dotted); right: GD's seed-mean hard weight; one time."""
    margin = np.asarray(data["theory"]["margin"])
    hw = np.asarray(data["simulation"]["hard_weight_below_edge"])
    for a, d in enumerate(S["ds"]):
        s = data["summary"][str(d)]
        l, = ax[0].plot(S["grid"], s["key_mean_margin"], "s-", label=f"d={d}: key-mean finite-n margin ({S['keys']} keys)")
        for j in range(margin.shape[0]):
            ax[0].plot(S["grid"], margin[j, a], ":", color=l.get_color(), lw=0.8)
        ax[1].errorbar(S["grid"], s["gd_hard_weight"], s["gd_hard_weight_stderr"], fmt="o-", color=l.get_color(),
                       label=f"GD d={d}: hard weight below edge ({S['seeds']} seeds)")
        for k, (v, e) in enumerate(((s["delta_star_n"], s["delta_star_n_stderr"]), (s["delta_star_d"], s["delta_star_d_stderr"]))):
            if np.isfinite(v):
                ax[k].axvline(v, color=l.get_color(), ls="--", lw=0.8)
                ax[k].axvspan(v - np.nan_to_num(e), v + np.nan_to_num(e), color=l.get_color(), alpha=0.12)
    ax[0].axhline(0, color="k", lw=0.6)
    ax[0].set_xlabel("δ")
    ax[0].set_ylabel("outlier margin (< 0: negative outlier)")
    ax[0].set_title(f"finite-n DMFT, {S['paths']} paths, t·η={S['lr'] * S['steps']:g}", fontsize=9)
    ax[0].legend(fontsize=7)
    ax[1].axhline(LEVEL, color="k", lw=0.6)
    ax[1].set_xlabel("δ")
    ax[1].set_ylabel("hard weight below the constrained edge")
    ax[1].set_title(f"GD on the first-phase manifold, t·η={S['lr'] * S['steps']:g} (δ*_n dashed left, δ*_d right)",
                    fontsize=9)
    ax[1].legend(fontsize=7)
