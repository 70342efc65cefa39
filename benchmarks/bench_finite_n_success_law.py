"""Which GD runs succeed at finite d: ``spectral.finite_n_success_law`` (the law over runs of the
finite-d threshold, δ_run = δ*_n(d) + b·G, G standard Gumbel, b = dδ*_n/d ln d) against GD seeds
(issue #4 item 3; THEORY §2; docs/thresholds.md "Which runs succeed at finite d").

Why. ``finite_n_edge_law`` showed that a run's edge is a random extreme, e(Γ₁) with Γ₁ ~ Exp(1). If the
outlier must clear the run's own edge, a run succeeds at δ iff δ > δ*_n(d/Γ₁), and the finite-d
success curve is a Gumbel CDF in δ with location δ*_n(d) (its 1/e point) and scale b, the log n slope
of the finite-n threshold: **its width does not shrink with d**. Both come from the theory alone (the
finite-n roots δ*_n already committed by the ``finite_n_threshold`` family); nothing is fitted to GD.

- theory: :func:`spectral.finite_n_success_law` through the committed δ*_n (key-mean roots with their
  s.e.) of ``finite_n_threshold``, ``_late``, ``_d250``, ``_d500`` and ``_d1000``, one law per time
  (t·η = 2.4 and 4.8; d = 250–1000). No DMFT is run here.
- simulation, committed: the per-seed hard weight below the constrained edge and the constrained edge
  that those five runs stored (GD on the first-phase manifold, 16–64 seeds per cell, 46 (t, d, δ) cells).
- simulation, **new seeds** (a GD key not used before): t·η = 2.4, d = 1000 and 2000, δ = 3.5–6.5 (to
  the law's upper tail), ``seeds`` seeds, the same observables (dense W-Hessian for d·m ≤ 6000,
  Lanczos with ``max_iters`` above; checked against dense at d = 1000 to 1e-11 in the weights).
- success of a seed at δ: hard weight below its constrained edge > ``cut`` = 0.25 (the convention of
  ``first_phase`` and the threshold family; the fits at 0.15 and 0.5 are in ``data.summary``).

Rows, per (t, d) group (seeds are common to every δ within a run, so bootstrap s.e. resample seeds):
the width of GD's success curve (maximum-likelihood Gumbel CDF fit to the seeds' indicators) against
b; its location against δ*_n(d) (the known finite-d offset at d ≤ 500, docs/thresholds.md, shows
here); per time, the slope of GD's width in ln d against 0; for the new seeds, a χ² test of the success
fractions against the law; over all cells, the rank correlation of a seed's weight with its own edge
(the law says: the runs that succeed are those whose most extreme sample is least extreme).
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import jax
import numpy as np
from scipy import optimize, stats

import spectral
from dmft import activations

from .bench_delta_star_trend import problem
from .bench_finite_n import _row, gd_first_phase_spectra
from .bench_finite_n_threshold import records

NAME = "finite_n_success_law"
HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ("finite_n_threshold", "finite_n_threshold_late", "finite_n_threshold_d250", "finite_n_threshold_d500",
           "finite_n_threshold_d1000")
CUTS = (0.15, 0.25, 0.5)


def settings(mode: str) -> dict:
    S = dict(lr=0.2, steps=12, grid=[3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5], ds=[1000, 2000], seeds=16, sim_key=14, k=6,
             max_iters=400, hessian="lanczos", cut=0.25, cuts=list(CUTS), bootstrap=400, sources=list(SOURCES),
             problem="phase retrieval y=z^2, quadratic student, m=4, a=1/4 frozen, Q0=I, M0=0, square loss, ridge 0",
             convention="finite-n at n = δd; a run succeeds iff δ > δ*_n(d/Γ₁), Γ₁ ~ Exp(1): P = exp(−exp(−(δ − δ*_n(d))/b))",
             success="hard weight of the eigenvectors below the constrained edge > cut",
             simulation="dmft.simulate freeze_hard=True; bottom of the float64 W-Hessian by spectral.hard_outlier_at_state "
                        "(method = hessian, Lanczos with max_iters matvecs; equal to dense to 1e-11 in the weights at d = 1000)",
             keys_note="new GD at d: fold_in(key(sim_key), d) for every δ (sim_key 14 not used by any earlier benchmark); "
                       "committed cells: the five sources' own keys")
    if mode == "quick":
        S.update(grid=[2.5, 3.5, 5.0], ds=[200], seeds=6, bootstrap=50)
    return S


# ---------------------------------------------------------------------------------------------- inputs
def committed(results: pathlib.Path = HERE / "results", sources=SOURCES) -> dict:
    """The committed finite-n roots (theory) and per-seed GD observables of the threshold family, per
    time label ``t<steps>``: roots [(d, δ*_n, s.e., source)], cells [(d, source, grid, weight, edge)]."""
    out = {}
    for name in sources:
        for S, v in records(json.loads((results / f"{name}.json").read_text())):
            o = out.setdefault(f"t{S['steps']}", dict(roots=[], cells=[]))
            W = np.asarray(v["simulation"]["hard_weight_below_edge"], float)
            E = np.asarray(v["simulation"]["constrained_edge"], float)
            for i, d in enumerate(S["ds"]):
                sm = v["summary"][str(d)]
                o["roots"].append(dict(d=int(d), delta_star_n=sm["delta_star_n"], stderr=sm["delta_star_n_stderr"],
                                       delta_star_d=sm["delta_star_d"], source=name))
                o["cells"].append(dict(d=int(d), source=name, grid=list(S["grid"]), weight=W[i].tolist(),
                                       edge=E[i].tolist()))
    return out


def law_of(roots) -> spectral.SuccessLaw:
    return spectral.finite_n_success_law([r["d"] for r in roots], [r["delta_star_n"] for r in roots],
                                         [r["stderr"] for r in roots])


def gd_new(P, S, perf) -> dict:
    """New GD seeds at t = steps: per d, arrays (grid, seeds) of constrained edge, bottom eigenvalue and
    hard weight below the edge."""
    out = {}
    for d in S["ds"]:
        t0 = time.perf_counter()
        cols = []
        for delta in S["grid"]:
            cols.append(gd_first_phase_spectra(P, S, d, delta, [S["steps"]], max_iters=S["max_iters"],
                                               method=S["hessian"])[:, 0])
            # the committed run's hard_outlier_at_state compiled new Lanczos programs on every call (fixed after it:
            # spectral.finite_state._lanczos_bottom); its first attempt died at d = 2000 with "LLVM compilation
            # error: Cannot allocate memory" (vm.max_map_count). Clearing per δ stays as a guard.
            jax.clear_caches()
        arr = np.stack(cols, axis=1)                                                       # (3, grid, seeds)
        out[str(d)] = dict(edge=arr[0].tolist(), bottom=arr[1].tolist(), weight=arr[2].tolist())
        print(f"   GD d={d} data: {json.dumps(out[str(d)])}", flush=True)                 # salvageable from the log
        perf.append(dict(what=f"GD d={d}: {len(S['grid'])} δ × {S['seeds']} seeds, {S['steps']} steps + W-Hessian bottom "
                              f"({S['hessian']}, max_iters {S['max_iters']})", value=time.perf_counter() - t0, unit="s",
                         ratio=None, note=""))
        print(f"   GD d={d}: success fractions {np.round((arr[2] > S['cut']).mean(1), 2).tolist()} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


# ---------------------------------------------------------------------------------------------- fits
def gumbel_fit(delta, success):
    """Maximum-likelihood (location, scale) of P(success | δ) = exp(−exp(−(δ − loc)/scale)); nan when
    the indicators do not contain both outcomes."""
    x, y = np.asarray(delta, float), np.asarray(success, float)
    if y.min() == y.max():
        return float("nan"), float("nan")

    def nll(p):
        P = np.clip(np.exp(-np.exp(-(x - p[0]) / np.exp(p[1]))), 1e-12, 1 - 1e-12)
        return -np.sum(y * np.log(P) + (1 - y) * np.log1p(-P))

    r = optimize.minimize(nll, [float(np.median(x)), math.log(0.5)], method="Nelder-Mead",
                          options=dict(xatol=1e-7, fatol=1e-10, maxiter=4000))
    return float(r.x[0]), float(np.exp(r.x[1]))


def _indicators(groups, cut, idx=None):
    """Stack (δ, success) over groups [(grid, weight (grid, seeds))]; ``idx``: resampled seeds per group."""
    xs, ys = [], []
    for g, (grid, W) in enumerate(groups):
        W = np.asarray(W, float)
        cols = np.arange(W.shape[1]) if idx is None else idx[g]
        xs.append(np.repeat(np.asarray(grid, float), cols.size))
        ys.append((W[:, cols] > cut).ravel())
    return np.concatenate(xs), np.concatenate(ys)



def mean_over_runs(values, theory_ds, d, nodes: int) -> float:
    """E over a run's Γ₁ ~ Exp(1) of a theory quantity at the run's effective size d/Γ₁: ``values`` at
    ``theory_ds``, linear in ln d between them and constant beyond; ``nodes`` midpoint quantiles of Γ₁."""
    u = (np.arange(nodes) + 0.5) / nodes                     # Γ₁ quantiles: Γ = −ln(1 − u)
    lg = np.log(-np.log1p(-u))
    return float(np.mean(np.interp(math.log(d) - lg, np.log(np.asarray(theory_ds, float)), values)))


def bootstrap_fits(groups, cut, draws: int, seed: int = 0) -> np.ndarray:
    """(draws, 2) Gumbel fits (loc, scale) of bootstrap resamples: seeds drawn with replacement within each group,
    every δ of a seed kept together (nan rows where a resample has one outcome only)."""
    rng = np.random.default_rng(seed)
    bs = []
    for _ in range(draws):
        idx = [rng.integers(0, np.asarray(W).shape[1], np.asarray(W).shape[1]) for _, W in groups]
        bs.append(gumbel_fit(*_indicators(groups, cut, idx)))
    return np.asarray(bs, float).reshape(-1, 2)


def fit_group(groups, cut, draws: int, seed: int = 0) -> dict:
    """Gumbel fit of the seeds' success indicators with bootstrap s.e. (seeds resampled within each
    group, every δ of a seed kept together: the seeds are common to every δ of a run)."""
    loc, sc = gumbel_fit(*_indicators(groups, cut))
    seeds = int(sum(np.asarray(W).shape[1] for _, W in groups))
    if not np.isfinite(loc):
        return dict(loc=loc, scale=sc, loc_se=float("nan"), scale_se=float("nan"), bootstrap_ok=0, seeds=seeds)
    bs = bootstrap_fits(groups, cut, draws, seed)
    ok = np.isfinite(bs).all(1)
    return dict(loc=loc, scale=sc, loc_se=float(np.std(bs[ok, 0], ddof=1)), scale_se=float(np.std(bs[ok, 1], ddof=1)),
                bootstrap_ok=int(ok.sum()), seeds=seeds)


def _stouffer(rhos, ns):
    z = np.arctanh(np.clip(rhos, -0.999999, 0.999999)) * np.sqrt(np.maximum(np.asarray(ns) - 3, 1))
    return float(np.sum(z) / np.sqrt(z.size))


# ---------------------------------------------------------------------------------------------- analysis
def analysis(data, S) -> dict:
    rows, summary = [], dict(groups=[], width_in_d={}, edge_weight={}, new_fractions={})
    cut, draws = S["cut"], S["bootstrap"]
    com = data["committed"]
    laws = {t: law_of(v["roots"]) for t, v in com.items()}
    summary["laws"] = {t: dict(intercept=L.intercept, slope=L.slope, slope_se=L.scale_stderr, d_ref=L.d_ref, chi2=L.chi2,
                               dof=L.dof, fit_pvalue=L.fit_pvalue) for t, L in laws.items()}
    groups = []                                           # (t, d, label, [(grid, W)], [(grid, W, E)])
    for t, v in sorted(com.items()):
        for d in sorted({c["d"] for c in v["cells"]}):
            cs = [c for c in v["cells"] if c["d"] == d]
            groups.append((t, d, "committed", [(c["grid"], c["weight"]) for c in cs],
                           [(c["grid"], c["weight"], c["edge"]) for c in cs]))
    tnew = f"t{S['steps']}"
    for d, g in data["new"].items():
        groups.append((tnew, int(d), "new seeds", [(S["grid"], g["weight"])], [(S["grid"], g["weight"], g["edge"])]))
    for t, d, label, gw, _ in groups:
        L = laws[t]
        tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * int(t[1:]):g}, d={d} ({label})"
        f = {str(c): fit_group(gw, c, draws if c == cut else max(draws // 4, 20)) for c in S["cuts"]}
        F = f[str(cut)]
        summary["groups"].append(dict(t=t, d=d, label=label, fits=f, theory_loc=float(L.loc(d)),
                                      theory_loc_se=float(L.loc_stderr(d)), theory_scale=L.slope,
                                      theory_scale_se=L.scale_stderr))
        rows.append(_row(f"{tag}: width of GD's success curve (Gumbel fit to seeds with hard weight > {cut:g}) vs "
                         "b = dδ*_n/d ln d from the committed finite-n roots", L.slope, L.scale_stderr, F["scale"],
                         F["scale_se"], d, F["seeds"]))
        rows.append(_row(f"{tag}: location (1/e point) of GD's success curve vs δ*_n(d) on the fitted line",
                         float(L.loc(d)), float(L.loc_stderr(d)), F["loc"], F["loc_se"], d, F["seeds"]))
    # the width does not shrink with d: GD's fitted scale against ln d, per time
    for t in sorted({g[0] for g in groups}):
        gs = [s for s in summary["groups"] if s["t"] == t and np.isfinite(s["fits"][str(cut)]["scale_se"])]
        x = np.log([s["d"] for s in gs])
        y = np.array([s["fits"][str(cut)]["scale"] for s in gs])
        se = np.array([s["fits"][str(cut)]["scale_se"] for s in gs])
        if np.unique(x).size < 2:
            continue
        X = np.stack([np.ones_like(x), x - x.mean()], 1)
        w = 1 / se**2
        cov = np.linalg.inv(X.T @ (w[:, None] * X))
        beta = cov @ (X.T @ (w * y))
        summary["width_in_d"][t] = dict(slope=float(beta[1]), slope_se=float(math.sqrt(cov[1, 1])),
                                        mean=float(beta[0]), mean_se=float(math.sqrt(cov[0, 0])),
                                        chi2_constant=float(np.sum(w * (y - np.sum(w * y) / w.sum()) ** 2)))
        rows.append(_row(f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * int(t[1:]):g}: slope of GD's success-curve width "
                         f"in ln d over {len(gs)} groups (d = {sorted({s['d'] for s in gs})}) vs 0 (the law's width b does "
                         "not depend on d)", 0.0, 0.0, float(beta[1]), float(math.sqrt(cov[1, 1])), max(s["d"] for s in gs),
                         sum(s["fits"][str(cut)]["seeds"] for s in gs)))
    # new seeds: success fractions against the law, per d (χ² with binomial variance at the law's P)
    L = laws[tnew]
    for d, g in data["new"].items():
        W = np.asarray(g["weight"], float)
        frac = (W > cut).mean(1)
        P = L.prob_success(S["grid"], int(d))
        var = np.maximum(P * (1 - P), 1.0 / W.shape[1] ** 2) / W.shape[1]
        chi2 = float(np.sum((frac - P) ** 2 / var))
        p = float(stats.chi2.sf(chi2, len(S["grid"])))
        summary["new_fractions"][d] = dict(fraction=frac.tolist(), law=P.tolist(), chi2=chi2, dof=len(S["grid"]), pvalue=p)
        rows.append(dict(quantity=f"PR quadratic m=4, t·η={S['lr'] * S['steps']:g}, d={d} (new seeds): χ² of the success "
                                  f"fractions at δ = {S['grid']} against the law (dof {len(S['grid'])}; χ² {chi2:.1f}; "
                                  "binomial variance at the law's P; seeds common across δ)",
                         theory=None, simulation=p, d=int(d), seeds=int(W.shape[1]), tolerance="p > 0.01",
                         agree=bool(p > 0.01)))
    # the runs that succeed are those with the least extreme edge: rank correlation per (run, δ) cell
    rhos, ns, aucs = [], [], []
    for t, d, label, _, gwe in groups:
        for grid, W, E in gwe:
            W, E = np.asarray(W, float), np.asarray(E, float)
            for j in range(len(grid)):
                ok = np.isfinite(W[j]) & np.isfinite(E[j])
                if ok.sum() < 4 or np.ptp(W[j, ok]) == 0:
                    continue
                rhos.append(stats.spearmanr(E[j, ok], W[j, ok])[0])
                ns.append(int(ok.sum()))
                s = W[j, ok] > cut
                if 0 < s.sum() < s.size:
                    aucs.append(stats.mannwhitneyu(E[j, ok][s], E[j, ok][~s]).statistic / (s.sum() * (~s).sum()))
    z = _stouffer(np.array(rhos), ns)
    summary["edge_weight"] = dict(cells=len(rhos), positive=int(np.sum(np.array(rhos) > 0)), mean_rho=float(np.mean(rhos)),
                                  stouffer_z=z, auc_cells=len(aucs), mean_auc=float(np.mean(aucs)) if aucs else float("nan"),
                                  auc_above_half=int(np.sum(np.array(aucs) > 0.5)))
    rows.append(dict(quantity=f"PR quadratic m=4, all groups: Spearman ρ of a seed's hard weight with its own constrained edge "
                              f"over {len(rhos)} (run, d, δ) cells ({summary['edge_weight']['positive']} positive, mean ρ "
                              f"{np.mean(rhos):.2f}; mean AUC of the edge for success {summary['edge_weight']['mean_auc']:.2f}): "
                              "Stouffer z (the law: ρ > 0)",
                     theory=None, simulation=z, d=int(max(g[1] for g in groups)), seeds=int(sum(ns)), tolerance="z > 3",
                     agree=bool(z > 3)))
    return dict(rows=rows, summary=summary)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S = settings(mode)
    P = problem(activations.get("quadratic"))
    perf = []
    data = dict(committed=committed(), new=gd_new(P, S, perf))
    an = analysis(data, S)
    data["summary"] = an["summary"]
    res = dict(setting=S, accuracy=an["rows"], performance=perf, data=data, figure=f"{NAME}.png")
    replot(res, outdir)
    return res


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, data = res["setting"], res["data"]
    laws = {t: law_of(v["roots"]) for t, v in data["committed"].items()}
    ts = sorted(laws)
    fig, axes = plt.subplots(1, len(ts), figsize=(5 * len(ts), 4), squeeze=False)
    cut = S["cut"]
    for ax, t in zip(axes[0], ts):
        L = laws[t]
        ds = sorted({c["d"] for c in data["committed"][t]["cells"]} | ({int(d) for d in data["new"]} if t == f"t{S['steps']}"
                                                                     else set()))
        xx = np.linspace(2.3, 7.0, 200)
        for i, d in enumerate(ds):
            ax.plot(xx, L.prob_success(xx, d), "-", color=f"C{i}", lw=1, label=f"law d={d}")
            for c in data["committed"][t]["cells"]:
                if c["d"] == d:
                    W = np.asarray(c["weight"], float)
                    ax.errorbar(c["grid"], (W > cut).mean(1), np.sqrt(0.25 / W.shape[1]), fmt="o", ms=3, color=f"C{i}",
                                alpha=0.7)
            if t == f"t{S['steps']}" and str(d) in data["new"]:
                W = np.asarray(data["new"][str(d)]["weight"], float)
                ax.errorbar(S["grid"], (W > cut).mean(1), np.sqrt(0.25 / W.shape[1]), fmt="s", ms=5, mfc="none",
                            color=f"C{i}", label=f"GD d={d}, new seeds")
        ax.set_xlabel("δ")
        ax.set_ylabel(f"fraction of seeds with hard weight > {cut:g}")
        ax.set_title(f"t·η = {S['lr'] * int(t[1:]):g}: law b = {L.slope:.2f} ± {L.scale_stderr:.2f} (circles: committed seeds)",
                     fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("PR quadratic m=4: GD success at finite d against the law over runs of δ*_n(d/Γ₁)", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
