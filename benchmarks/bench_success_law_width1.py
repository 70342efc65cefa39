"""The law over GD runs of the finite-d threshold in the CLI's default setting (width-1 quadratic student):
which criterion GD's "success" measures, and whether the Gumbel law of ``spectral.finite_n_success_law``
holds outside the width-4 family it was checked on (issue #4 item 3; THEORY §2; docs/thresholds.md).

Why. ``finite_n_success_law`` was built and checked on one setting (phase retrieval, quadratic student
m = 4, η = 0.2, t·η = 2.4 / 4.8). ``deltann delta-nn --law-d`` now reports it for any setting; its default
is m = 1, η = 0.02, 20 steps, where δ*_n(d) is not even monotone at small d (it falls from d = 10 to 40).
This benchmark measures, in that setting, the theory's finite-n thresholds at d = 160–2560 and GD seeds at
d = 320–2560, with two theory criteria for a run's success:

- **outlier**: δ*_n(d), an outlier below the edge (the margin's sign change; what ``delta_star`` and
  the CLI report);
- **cosine cut c**: δ_c,n(d), where the outlier's squared cosine with the hard direction reaches c (the
  quantity GD's criterion "hard weight below the edge > c" measures; for m = 1 the cosine rises slowly
  from 0 at δ*_n, unlike a criterion met as soon as the outlier exists).

For each criterion, the law over runs (a run at (δ, d) succeeds iff δ > δ_x,n(d/Γ₁), Γ₁ ~ Exp(1), the tail
mass of its most extreme sample): P = exp(−exp(−(δ − δ_x,n(d))/b_x)), b_x = dδ_x,n/d ln d from the
weighted line through the theory roots at d ≥ ``fit_dmin`` (nothing fitted to GD).

- theory: ``dmft.solve_sweep`` on ``grid`` (common random numbers across δ), ``keys`` independent keys,
  ``paths`` ≥ 20 n at every (δ, d) of the fit; per d, ``margins_from_sweep`` (finite-n, n = δd): margin and
  cos²; key-mean roots (linear interpolation on the grid), s.e. over keys.
- simulation: GD on the first-phase manifold (``freeze_hard``; key ``fold_in(key(sim_key), d)``, common to
  every δ), ``seeds`` seeds, hard weight of the W-Hessian eigenvectors below the constrained edge
  (``spectral.hard_outlier_at_state``, dense float64).
- rows per d: width and location of GD's success curve (maximum-likelihood Gumbel CDF on the seeds'
  indicators at cut c; bootstrap over whole seeds) against the cosine-cut law, a χ² of the success fractions
  against it, and the location against the outlier law (reported, not an agreement test: a different
  criterion); GD's seed-mean hard weight against the theory's cos² averaged over the run's Γ₁ (the
  same law over runs, applied to the cosine itself).

Measured (standard, 2026-12-06, CPU, 3913 s, 2639 s of it GD at d = 2560): the cosine grows slowly from 0 at
δ*_n, and GD's weight cut is met 0.6–1.1 above the outlier threshold (GD locations 5.38 / 5.78 / 5.96 / 6.91 at
d = 320 / 640 / 1280 / 2560 against δ*_n 4.32 / 4.83 / 5.33 / 5.84); against the cosine-cut law (δ_c,n 5.60 /
5.95 / 6.30 / 6.64, b_c = 0.50 ± 0.03) the locations and the means over runs agree at every d, but GD's width is
larger at every d (0.85 / 0.68 / 0.61 / 1.05; χ² of the fractions p < 1e-18): the law's width is a lower bound
here. At d = 2560 GD's mean weight is 0.05–0.15 below the theory's cos² over runs at δ ≥ 6.5 (session 44: the law's random-matrix model has the same gap and width, bench_matrix_model; not the
theory's paths; a second GD key gives 0.06 ± 0.03 below: docs/thresholds.md).
"""

from __future__ import annotations

import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

import dmft
import spectral
from spectral.thresholds import _root_on_grid, margins_from_sweep

from .bench_finite_n import _row, gd_first_phase_spectra
from .bench_finite_n_success_law import _indicators, bootstrap_fits, fit_group, gumbel_fit, mean_over_runs

NAME = "success_law_width1"


def settings(mode: str) -> dict:
    S = dict(lr=0.02, steps=20, t=20, grid=[round(x, 2) for x in np.arange(3.0, 9.01, 0.5)],
             theory_ds=[160, 320, 640, 1280, 2560], fit_dmin=320, paths=524288, keys=4, key=40,
             gd_ds=[320, 640, 1280, 2560], gd_grid=[round(x, 2) for x in np.arange(4.0, 8.51, 0.5)], seeds=32,
             sim_key=15, k=6, cut=0.25, cuts=[0.15, 0.25], bootstrap=400, gamma_nodes=4000,
             problem="the CLI default: phase retrieval y=z^2, quadratic student, m=1, a=1 frozen, Q0=1, M0=0, "
                     "square loss, ridge 0 (dmft.cli.make_problem)",
             convention="finite-n at n = δd; a run succeeds iff δ > δ_x,n(d/Γ₁), Γ₁ ~ Exp(1): "
                        "P = exp(−exp(−(δ − δ_x,n(d))/b_x)); x = outlier (margin < 0) or cosine cut (cos² ≥ c)",
             success="GD: hard weight of the eigenvectors below the constrained edge > cut",
             keys_note="DMFT keys fold_in(key(key), k); GD fold_in(key(sim_key), d) for every δ (sim_key 15, DMFT key 40 "
                       "not used by any earlier benchmark)")
    if mode == "quick":
        S.update(grid=[3.0, 4.0, 5.0, 6.0, 7.0], theory_ds=[80, 160], fit_dmin=80, paths=16384, keys=2, gd_ds=[160],
                 gd_grid=[4.0, 5.5, 7.0], seeds=6, bootstrap=40, gamma_nodes=400)
    return S


def problem():
    from dmft.cli import make_problem
    return make_problem("phase-retrieval", "quadratic", 1, "square", 1.0, False, 2.0, ridge=0.0)


# ---------------------------------------------------------------------------------------------- theory
def _cut_root(grid, cos2, c):
    """First δ where cos² (0 where there is no outlier) reaches c from below; linear interpolation."""
    y = np.nan_to_num(np.asarray(cos2, float), nan=0.0) - c
    for i in range(1, len(grid)):
        if y[i - 1] < 0 <= y[i]:
            return float(grid[i - 1] + (grid[i] - grid[i - 1]) * (-y[i - 1]) / (y[i] - y[i - 1]))
    return float("nan")


def theory(P, S, perf) -> dict:
    """Per key and d: margin and cos² on the grid, the outlier root and the cosine-cut roots."""
    grid = np.asarray(S["grid"], float)
    per_key = []
    for kk in range(S["keys"]):
        t0 = time.perf_counter()
        traj = dmft.solve_sweep(P, jnp.asarray(grid), lr=S["lr"], steps=S["steps"], paths=S["paths"],
                                key=jax.random.fold_in(jax.random.key(S["key"]), kk), save_samples_at=(S["t"],), throw=False)
        jax.block_until_ready(traj.train_error)
        perf.append(dict(what=f"DMFT δ sweep ({len(grid)} δ, T={S['steps']}, {S['paths']} paths), key {kk}",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
        rec = {}
        for d in S["theory_ds"]:
            t1 = time.perf_counter()
            m, ev, edge, c2, notes = margins_from_sweep(P, traj, grid, (S["t"],), convention="finite-n", d=d)
            m, ev, edge, c2 = m[:, 0], ev[:, 0], edge[:, 0], c2[:, 0]
            rec[str(d)] = dict(margin=m.tolist(), edge=edge.tolist(), outlier=ev.tolist(),
                               cosine2=np.nan_to_num(c2, nan=0.0).tolist(),
                               root_outlier=_root_on_grid(grid, m)[0],
                               root_cut={str(c): _cut_root(grid, c2, c) for c in S["cuts"]},
                               paths_over_n=[S["paths"] / (dv * d) for dv in grid], notes=notes[:3])
            perf.append(dict(what=f"finite-n margins d={d} ({len(grid)} solves, {S['paths']} samples), key {kk}",
                             value=time.perf_counter() - t1, unit="s", ratio=None, note=jax.default_backend()))
            print(f"   key {kk} d={d}: δ*_n {rec[str(d)]['root_outlier']:.3f}, cut roots "
                  f"{ {c: round(v, 3) for c, v in rec[str(d)]['root_cut'].items()} }", flush=True)
        per_key.append(rec)
        del traj
    return dict(per_key=per_key)


def root_table(th, S, which: str) -> dict:
    """Key-mean root per d (``which`` = "outlier" or a cut as str) with its s.e. over keys."""
    out = {}
    for d in S["theory_ds"]:
        v = np.array([k[str(d)]["root_outlier"] if which == "outlier" else k[str(d)]["root_cut"][which]
                      for k in th["per_key"]], float)
        ok = np.isfinite(v)
        out[str(d)] = dict(mean=float(v[ok].mean()) if ok.any() else float("nan"),
                           stderr=float(v[ok].std(ddof=1) / math.sqrt(ok.sum())) if ok.sum() > 1 else float("nan"),
                           keys_with_root=int(ok.sum()))
    return out


def law_from_table(tab, S):
    ds = [int(d) for d in tab if int(d) >= S["fit_dmin"] and np.isfinite(tab[d]["mean"]) and tab[d]["stderr"] > 0]
    return spectral.finite_n_success_law(ds, [tab[str(d)]["mean"] for d in ds], [tab[str(d)]["stderr"] for d in ds])


def cos2_over_runs(th, S, d, deltas, nodes):
    """E over Γ₁ of the theory's key-mean cos²(δ, d/Γ₁): the law over runs applied to the cosine (cos² linear in
    δ on the grid and in ln d between the theory's d, constant beyond them)."""
    grid = np.asarray(S["grid"], float)
    C = np.mean([[k[str(dd)]["cosine2"] for dd in S["theory_ds"]] for k in th["per_key"]], axis=0)   # (ds, grid)
    return np.array([mean_over_runs([np.interp(dv, grid, c) for c in C], S["theory_ds"], d, nodes) for dv in deltas])


# ---------------------------------------------------------------------------------------------- simulation
def gd(P, S, perf) -> dict:
    out = {}
    for d in S["gd_ds"]:
        t0 = time.perf_counter()
        arr = np.stack([gd_first_phase_spectra(P, S, d, dv, [S["t"]])[:, 0] for dv in S["gd_grid"]], axis=1)
        out[str(d)] = dict(edge=arr[0].tolist(), bottom=arr[1].tolist(), weight=arr[2].tolist())
        perf.append(dict(what=f"GD d={d}: {len(S['gd_grid'])} δ × {S['seeds']} seeds, {S['steps']} steps + dense W-Hessian",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
        print(f"   GD d={d}: fractions at cut {S['cut']}: {np.round((arr[2] > S['cut']).mean(1), 2).tolist()}, "
              f"mean weight {np.round(arr[2].mean(1), 3).tolist()} ({time.perf_counter() - t0:.0f} s)", flush=True)
        jax.clear_caches()
    return out


# ---------------------------------------------------------------------------------------------- analysis
EULER_GAMMA = float(np.euler_gamma)


def fit_with_draws(grid, W, cut, draws, seed=0):
    """Gumbel fit of the seeds' indicators (weight > cut) and bootstrap draws over whole seeds:
    (loc, scale, (draws, 2) array; non-finite draws dropped)."""
    loc, sc = gumbel_fit(*_indicators([(grid, W)], cut))
    bs = bootstrap_fits([(grid, W)], cut, draws, seed)
    return loc, sc, bs[np.isfinite(bs).all(1)]


def analysis(data, S) -> dict:
    th, sim = data["theory"], data["simulation"]
    tabs = {"outlier": root_table(th, S, "outlier"), **{str(c): root_table(th, S, str(c)) for c in S["cuts"]}}
    laws, summary, rows = {}, dict(roots=tabs, laws={}, groups=[]), []
    for name, tab in tabs.items():
        try:
            L = law_from_table(tab, S)
        except spectral.SpectralError as exc:
            summary["laws"][name] = dict(error=str(exc))
            continue
        laws[name] = L
        summary["laws"][name] = dict(intercept=L.intercept, slope=L.slope, slope_se=L.scale_stderr, d_ref=L.d_ref,
                                     chi2=L.chi2, dof=L.dof, fit_pvalue=L.fit_pvalue)
    tag = f"PR quadratic m=1 (CLI default), η={S['lr']:g}, t={S['t']}"
    cutname = str(S["cut"])
    for d, g in sim.items():
        d = int(d)
        W = np.asarray(g["weight"], float)
        fits = {str(c): fit_group([(S["gd_grid"], W)], c, S["bootstrap"] if c == S["cut"] else max(S["bootstrap"] // 4, 20))
                for c in S["cuts"]}
        F = fits[cutname]
        grp = dict(d=d, fits=fits, fractions={str(c): (W > c).mean(1).tolist() for c in S["cuts"]},
                   mean_weight=W.mean(1).tolist(), mean_weight_se=(W.std(1, ddof=1) / math.sqrt(W.shape[1])).tolist())
        if cutname in laws:
            L = laws[cutname]
            rows.append(_row(f"{tag}, d={d}: width of GD's success curve (hard weight > {S['cut']:g}) vs b_c of the "
                             f"cosine-cut law (cos² ≥ {S['cut']:g}; theory roots at d ≥ {S['fit_dmin']})",
                             L.slope, L.scale_stderr, F["scale"], F["scale_se"], d, F["seeds"]))
            rows.append(_row(f"{tag}, d={d}: location (1/e point) of GD's success curve vs δ_c,n(d) of the cosine-cut law",
                             float(L.loc(d)), float(L.loc_stderr(d)), F["loc"], F["loc_se"], d, F["seeds"]))
            Pm = L.prob_success(S["gd_grid"], d)
            frac = (W > S["cut"]).mean(1)
            var = np.maximum(Pm * (1 - Pm), 1.0 / W.shape[1] ** 2) / W.shape[1]
            chi2 = float(np.sum((frac - Pm) ** 2 / var))
            p = float(stats.chi2.sf(chi2, len(S["gd_grid"])))
            grp["cut_law"] = dict(prob=Pm.tolist(), chi2=chi2, dof=len(S["gd_grid"]), pvalue=p)
            rows.append(dict(quantity=f"{tag}, d={d}: χ² of GD's success fractions (weight > {S['cut']:g}) at δ = "
                                      f"{S['gd_grid'][0]:g}–{S['gd_grid'][-1]:g} against the cosine-cut law (dof "
                                      f"{len(S['gd_grid'])}; χ² {chi2:.1f}; binomial variance at the law's P; seeds "
                                      "common across δ)", theory=None, simulation=p, d=d, seeds=int(W.shape[1]),
                             tolerance="p > 0.01", agree=bool(p > 0.01)))
        if "outlier" in laws:
            L = laws["outlier"]
            grp["outlier_law_loc"] = float(L.loc(d))
            rows.append(dict(quantity=f"{tag}, d={d}: location of GD's success curve (weight > {S['cut']:g}) vs δ*_n(d) of "
                                      "the outlier law (reported: outlier existence is not what the weight cut measures)",
                             theory=float(L.loc(d)), theory_stderr=float(L.loc_stderr(d)), simulation=F["loc"],
                             sim_stderr=F["loc_se"], d=d, seeds=F["seeds"], tolerance="informational", agree=None))
        # the mean over runs (loc + γ·scale), which a zero-mean fluctuation added to each run's threshold leaves
        # unchanged, and the variance GD has beyond the law's (π²/6)·b²
        if cutname in laws:
            L = laws[cutname]
            loc, sc, bs = fit_with_draws(S["gd_grid"], W, S["cut"], S["bootstrap"], seed=1)
            mean_bs = bs[:, 0] + EULER_GAMMA * bs[:, 1]
            ex_bs = math.pi ** 2 / 6 * (bs[:, 1] ** 2 - L.slope ** 2)
            grp["run_mean"] = dict(value=loc + EULER_GAMMA * sc, stderr=float(np.std(mean_bs, ddof=1)))
            grp["excess_variance"] = dict(value=math.pi ** 2 / 6 * (sc ** 2 - L.slope ** 2), stderr=float(np.std(ex_bs, ddof=1)),
                                          law_variance=math.pi ** 2 / 6 * L.slope ** 2)
            law_mean_se = float(np.hypot(L.loc_stderr(d), EULER_GAMMA * L.scale_stderr))
            rows.append(_row(f"{tag}, d={d}: mean over runs of GD's threshold (loc + γ·scale of its Gumbel fit; unchanged "
                             "by a zero-mean fluctuation of each run) vs the cosine-cut law's mean δ_c,n(d) + γ b_c",
                             float(L.mean(d)), law_mean_se, grp["run_mean"]["value"], grp["run_mean"]["stderr"], d,
                             int(W.shape[1])))
        # the cosine itself over runs: GD's seed-mean weight against E_Γ₁ cos²(δ, d/Γ₁)
        c_runs = cos2_over_runs(th, S, d, S["gd_grid"], S["gamma_nodes"])
        grp["cos2_over_runs"] = c_runs.tolist()
        diff = np.asarray(grp["mean_weight"]) - c_runs
        grp["weight_minus_cos2"] = diff.tolist()
        summary["groups"].append(grp)
    # GD's excess variance against A/d (an O(n^−1/2) fluctuation of each run's threshold) and against a constant
    ex = [(g["d"], g["excess_variance"]["value"], g["excess_variance"]["stderr"]) for g in summary["groups"]
          if "excess_variance" in g and np.isfinite(g["excess_variance"]["stderr"]) and g["excess_variance"]["stderr"] > 0]
    if len(ex) >= 3:
        d_, v_, s_ = (np.array(x, float) for x in zip(*ex))
        w = 1 / s_ ** 2
        fits = {}
        for name, f in (("A/d", 1 / d_), ("constant", np.ones_like(d_))):
            A = float(np.sum(w * f * v_) / np.sum(w * f * f))
            chi2 = float(np.sum(w * (v_ - A * f) ** 2))
            fits[name] = dict(A=A, A_stderr=float(1 / math.sqrt(np.sum(w * f * f))), chi2=chi2, dof=len(d_) - 1,
                              pvalue=float(stats.chi2.sf(chi2, len(d_) - 1)))
        summary["excess_variance_fit"] = fits      # reported, not a row: formed after seeing d = 320–1280
    return dict(rows=rows, summary=summary)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S = settings(mode)
    P = problem()
    perf = []
    t0 = time.perf_counter()
    data = dict(theory=theory(P, S, perf))
    data["simulation"] = gd(P, S, perf)
    an = analysis(data, S)
    data["summary"] = an["summary"]
    perf.append(dict(what="whole benchmark", value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
    res = dict(setting=S, accuracy=an["rows"], performance=perf, data=data, figure=f"{NAME}.png")
    replot(res, outdir)
    return res


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, data = res["setting"], res["data"]
    sm = data["summary"]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name, tab in sm["roots"].items():
        ds = [int(d) for d in tab]
        ax[0].errorbar(ds, [tab[str(d)]["mean"] for d in ds], [tab[str(d)]["stderr"] for d in ds], fmt="o-",
                       label="outlier δ*_n" if name == "outlier" else f"cos² ≥ {name}")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("d")
    ax[0].set_ylabel("finite-n root (theory)")
    ax[0].legend(fontsize=7)
    laws = {}
    for name in ("outlier", str(S["cut"])):
        if "error" not in sm["laws"].get(name, {"error": 1}):
            laws[name] = law_from_table(sm["roots"][name], S)
    xx = np.linspace(min(S["gd_grid"]) - 0.5, max(S["gd_grid"]) + 0.5, 200)
    for i, g in enumerate(sm["groups"]):
        d = g["d"]
        fr = np.asarray(g["fractions"][str(S["cut"])])
        ax[1].errorbar(S["gd_grid"], fr, np.sqrt(np.maximum(fr * (1 - fr), 0.25 / S["seeds"]) / S["seeds"]), fmt="o",
                       color=f"C{i}", label=f"GD d={d}")
        if str(S["cut"]) in laws:
            ax[1].plot(xx, laws[str(S["cut"])].prob_success(xx, d), "-", color=f"C{i}", lw=1)
        if "outlier" in laws:
            ax[1].plot(xx, laws["outlier"].prob_success(xx, d), ":", color=f"C{i}", lw=1)
        ax[2].errorbar(S["gd_grid"], g["mean_weight"], g["mean_weight_se"], fmt="o", color=f"C{i}", label=f"GD d={d}")
        ax[2].plot(S["gd_grid"], g["cos2_over_runs"], "-", color=f"C{i}", lw=1)
    ax[1].set_xlabel("δ")
    ax[1].set_ylabel(f"fraction with hard weight > {S['cut']:g}")
    ax[1].set_title("solid: cosine-cut law; dotted: outlier law", fontsize=8)
    ax[1].legend(fontsize=7)
    ax[2].set_xlabel("δ")
    ax[2].set_ylabel("GD mean hard weight; line: E_Γ₁ cos²(δ, d/Γ₁)")
    fig.suptitle("CLI default setting (PR, quadratic m=1, η=0.02, t=20): the law over GD runs", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
