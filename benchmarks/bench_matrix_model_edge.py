"""The law of GD's finite-d edge against the random-matrix model of the DMFT law: is GD's seed-to-seed edge sd,
0–0.02 above the Gumbel law's, a finite-d property of the law's own spectrum (issue #4 item 3; THEORY §2;
docs/spectral.md "The law of the finite-n edge")?

Why. ``finite_n_edge_law`` measured GD's constrained bottom edge over 48 new seeds per d (phase retrieval,
quadratic student m = 4, a = 1/4 frozen, η = 0.2, t·η = 2.4, δ = 3; d = 250–2000). The Gumbel law over runs
(the most extreme sample's tail mass ~ Exp(1), ``spectral.finite_n_edge_law``) has GD's median and the
fractions below e(c), but its sd is below GD's at three of four d (0.072 / 0.069 / 0.063 / 0.060 against
0.093 / 0.069 / 0.075 / 0.076): the Gumbel law leaves out the bulk's own n^−2/3 fluctuation and every other
finite-d effect of the spectrum. ``spectral.matrix_model`` samples H = (1/n) Σ x_i x_iᵀ ⊗ D_i with (ζ_i, D_i)
iid from the DMFT law at (δ, d) and has them all; many draws (hundreds per d, where GD has 48 seeds) give its
edge law to a fraction of GD's error bars.

- theory side: the DMFT law of ``finite_n_edge_law``'s problem, δ, η and steps, with its key construction
  ``fold_in(fold_in(key(11), paths), j)``, j < ``keys``, at ``paths`` = 2^20 (one key; finite_n_edge_law's own
  Gumbel sds came from two keys of 131 072 paths); per (d, key) ``draws_per_key`` draws of
  ``spectral.matrix_model`` (key ``fold_in(fold_in(key(mm_key), d), j)``), the constrained edge (smallest
  eigenvalue on the non-hard rows: GD's quantity), dense for d·m ≤ 3000, else Lanczos (``max_iters``, as GD's).
- simulation side: ``finite_n_edge_law``'s committed GD edges (``seeds`` per d, read, not rerun) and its
  committed Gumbel and spike laws.
- rows per d: the model's sd, mean and median of the edge against GD's (3 combined s.e.; bootstrap over draws
  and over seeds), a two-sample Kolmogorov–Smirnov test (model draws against GD seeds, p > 0.01); the model's
  sd against the Gumbel law's (informational: what the Gumbel law leaves out). Pooled over d: the mean excess
  of the sd over the Gumbel law's, model against GD.
- the Gumbel law from the large pool (session 46): ``spectral.finite_n_edge_law(model='gumbel')`` on the DMFT law
  of keys j < ``gumbel_keys`` of 2^20 paths (key 0 is the model's pool), stratified by ``spectral.stratify`` (the
  tail mass 0.01 whole, 262 144 of the other paths by systematic sampling along the tail order: ~4× fewer samples
  for the edge solves; at 1/8 (131 072, session 46) the check below measured subsampling noise 0.0014–0.0023 over
  6 seeds, at its 0.0020 tolerance; at 1/4, session 51: max |Δ e(c)| 0.0008, |Δ sd| 0.0005, and the Gumbel sds
  0.0671 / 0.0685 / 0.0733 / 0.0737 at d = 250–2000 moved by ≤ 0.0002 from the 1/8 run; 3809 s on one core); rows per d: its sd, median e(ln 2) and mean
  against GD's seeds, its sd against finite_n_edge_law's from 131 072 paths (informational); pooled: the fraction
  of seeds below e(c) per level, the KS test of the probability integral transform, GD's mean sd excess over it.
  The stratification is checked in the same run: finite_n_edge_law's own two keys of 131 072 paths, stratified at
  the same ratio (32 768 others), against its committed e(c) and Gumbel sd from all their paths (the largest
  differences against a fifth of GD's smallest s.e.).

Finding (session 45). A first run drew from finite_n_edge_law's two keys of 131 072 paths: means, medians and KS
agreed at every d, but the model's sd fell with d (0.074 / 0.064 / 0.056 / 0.049) while GD's did not (0.093 /
0.069 / 0.075 / 0.076), outside 3 s.e. at d = 2000 and pooled. ``edge_tail`` located it in the pool: antithetic
paths share D (±z), so 131 072 paths hold 65 536 distinct blocks, 11–22 per sample at d = 1000–2000, too few for
the extreme sample's law. The committed run draws from one key of 2^20 paths (≥ 87 distinct blocks a sample;
~0.7 s more a draw: ``jax.random.choice`` permutes the pool) and agrees with GD in every row.
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import jax
import numpy as np
from scipy import stats

NAME = "matrix_model_edge"
HERE = pathlib.Path(__file__).resolve().parent


def settings(mode: str) -> dict:
    src = HERE / "results" / ("quick" if mode == "quick" else "") / "finite_n_edge_law.json"
    G = json.loads(src.read_text())["setting"]
    S = dict(source=str(src.relative_to(HERE.parent)), delta=G["delta"], lr=G["lr"], steps=G["steps"], paths=1_048_576,
             keys=1, gumbel_keys=2, levels=G["levels"], dmft_key=G["key"], ds=G["ds"], gd_seeds=G["seeds"], k=G["k"],
             draws_per_key=60,
             draws_per_key_at={"2000": 30}, mm_key=46, max_iters=400, bootstrap=2000, problem=G["problem"],
             pool="2^20 paths (524 288 distinct blocks, ≥ 87 a sample); the first run (session 45) drew 400 / 120 draws "
                  "a d from finite_n_edge_law's two keys of 131 072 paths (65 536 distinct blocks each) and found the "
                  "model's sd 0.074 / 0.064 / 0.056 / 0.049 (d = 250–2000), outside GD's at d = 2000",
             method="spectral.matrix_model method='auto' (dense eigh for d·m ≤ 3000, else Lanczos with max_iters)",
             model="H = (1/n) Σ x_i x_iᵀ ⊗ D_i, n = round(δ d), (ζ_i, D_i) drawn without replacement from the DMFT paths "
                   "at t, x_i = (ζ_i, g_i) (spectral.matrix_model)",
             quantity="constrained edge: smallest eigenvalue of H on the non-hard rows (GD: of the float64 W-Hessian "
                      "after GD on the first-phase manifold, freeze_hard=True)",
             gumbel="spectral.finite_n_edge_law(model='gumbel') at n = δd on the DMFT law of keys j < gumbel_keys (key 0: "
                    "the model's pool), stratified (spectral.stratify: the tail mass tail_mass whole, bulk of the other "
                    "paths, numpy seed j): e(c) at the levels, the Gumbel line's median e(ln 2), mean and sd π|s|/√6",
             stratify=dict(tail_mass=0.01, bulk=262_144),
             stratify_check=dict(paths=G["paths"], keys=G["keys"], bulk=32_768,
                                 what="the same stratification (tail_mass, bulk/paths 1/4) of finite_n_edge_law's own DMFT "
                                      "keys against its committed e(c) and Gumbel sd from all their paths"))
    if mode == "quick":    # Gumbel levels c = ln 2, 1 only (two edge solves a d)
        S.update(paths=16_384, draws_per_key=24, draws_per_key_at={}, bootstrap=200, levels=[1.0],
                 stratify=dict(tail_mass=0.01, bulk=4096), stratify_check=dict(S["stratify_check"], bulk=1024))   # 1/4, as standard
    return S


def _levels(S) -> list:
    """The Gumbel law's tail levels c: the setting's, with ln 2 and 1 (``spectral.finite_n_edge_law`` adds them)."""
    return sorted({float(c) for c in S["levels"]} | {math.log(2.0), 1.0})


def _dpk(S, d) -> int:
    return int(S["draws_per_key_at"].get(str(d), S["draws_per_key"]))


def problem():
    from dmft import activations

    from .bench_delta_star_trend import problem as p
    return p(activations.get("quadratic"))


GUMBEL_FIELDS = ("edges", "slope", "intercept", "fit_residual", "tail_samples", "adequate", "gumbel_median", "gumbel_mean",
                 "gumbel_sd")


def gumbel_law(law, S, d, bulk, seed) -> dict:
    """``GUMBEL_FIELDS`` of ``spectral.finite_n_edge_law(model='gumbel')`` at n = δd on ``law`` stratified to its
    tail mass ``S["stratify"]["tail_mass"]`` plus ``bulk`` other paths (numpy ``seed``)."""
    import spectral

    tm = S["stratify"]["tail_mass"]
    if max(_levels(S)) / (S["delta"] * d) > tm:
        raise ValueError(f"stratify tail_mass {tm} is below the deepest level's tail mass c/n = "
                         f"{max(_levels(S)) / (S['delta'] * d):.4g} at d = {d}: raise it.")
    el = spectral.finite_n_edge_law(spectral.stratify(law, "bottom", tail_mass=tm, bulk=int(bulk), seed=seed), S["delta"],
                                    "bottom", n=S["delta"] * d, levels=S["levels"], model="gumbel")
    if not el.converged:
        raise RuntimeError(f"finite-n edge law did not converge (d {d}, seed {seed}): edges {el.edges}")
    if list(el.levels) != _levels(S):
        raise RuntimeError(f"levels {el.levels} are not the setting's {_levels(S)}")
    return {k: (list(v) if isinstance(v, tuple) else v) for k in GUMBEL_FIELDS for v in [getattr(el, k)]}


def stratify_check(P, S, perf) -> dict:
    """The stratification against the full pool: finite_n_edge_law's own DMFT keys (its paths), stratified at the
    ratio bulk/paths of ``stratify_check``, per (key, d) the Gumbel fields, next to its committed ones."""
    import dmft
    import spectral

    C = S["stratify_check"]
    t0 = time.perf_counter()
    out = {str(d): [] for d in S["ds"]}
    for j in range(C["keys"]):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["dmft_key"]), C["paths"]), j)
        tr = dmft.solve(P, S["delta"], S["lr"], S["steps"], C["paths"], key, save_samples_at=(S["steps"],))
        law = spectral.law_from_dmft(P, tr, S["steps"])
        for d in S["ds"]:
            out[str(d)].append(gumbel_law(law, S, d, C["bulk"], seed=j))
    perf.append(dict(what=f"stratification check: {C['keys']} DMFT keys × {C['paths']} paths, Gumbel law at "
                          f"{len(S['ds'])} n", value=time.perf_counter() - t0, unit="s", ratio=None,
                     note=f"bulk {C['bulk']}; {jax.default_backend()}"))
    return out


def draws(P, S, perf) -> dict:
    """Per d: constrained edge and bottom eigenvalue of each draw, shape (keys, draws), the pool size over n, and
    the Gumbel law of the same DMFT law per key (``gumbel``: ``GUMBEL_FIELDS`` per key j < ``gumbel_keys``; key 0
    is the model's pool)."""
    import dmft
    import spectral

    out = {str(d): dict(edge=[], bottom=[], gumbel=[]) for d in S["ds"]}
    for j in range(max(S["keys"], S["gumbel_keys"])):
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["dmft_key"]), S["paths"]), j)
        tr = dmft.solve(P, S["delta"], S["lr"], S["steps"], S["paths"], key, save_samples_at=(S["steps"],))
        law = spectral.law_from_dmft(P, tr, S["steps"])
        jax.block_until_ready(law.D)
        perf.append(dict(what=f"DMFT solve (T={S['steps']}, m=4, {S['paths']} paths), key {j}",
                         value=time.perf_counter() - t0, unit="s", ratio=None,
                         note=f"{jax.default_backend()}; incl. compilation on the first key"))
        if j < S["gumbel_keys"]:
            t1 = time.perf_counter()
            for d in S["ds"]:
                out[str(d)]["gumbel"].append(gumbel_law(law, S, d, S["stratify"]["bulk"], seed=j))
            dt = time.perf_counter() - t1
            perf.append(dict(what=f"Gumbel law ({len(_levels(S))} levels) at {len(S['ds'])} n, key {j}", value=dt,
                             unit="s", ratio=None, note=f"stratified {S['paths']} paths; {jax.default_backend()}"))
            print(f"   key {j}: Gumbel sd {[round(out[str(d)]['gumbel'][j]['gumbel_sd'], 4) for d in S['ds']]} "
                  f"({dt:.0f} s)", flush=True)
        if j >= S["keys"]:
            continue
        for d in S["ds"]:
            t1 = time.perf_counter()
            r = spectral.matrix_model(law, S["delta"], d, draws=_dpk(S, d), k=S["k"], max_iters=S["max_iters"],
                                      key=jax.random.fold_in(jax.random.fold_in(jax.random.key(S["mm_key"]), d), j))
            o = out[str(d)]
            o["edge"].append(r.constrained_edge.tolist())
            o["bottom"].append(r.eigenvalues[:, 0].tolist())
            o["method"], o["pool_over_n"] = r.setting["method"], r.setting["pool_over_n"]
            o["pool_distinct_over_n"] = r.setting["pool_distinct_over_n"]
            dt = time.perf_counter() - t1
            perf.append(dict(what=f"matrix model d={d}: {_dpk(S, d)} draws ({o['method']}), key {j}", value=dt, unit="s",
                             ratio=None, note=f"{dt / _dpk(S, d):.2f} s a draw; {jax.default_backend()}"))
            print(f"   key {j} d={d}: edge sd {np.std(r.constrained_edge, ddof=1):.4f}, mean "
                  f"{np.mean(r.constrained_edge):.4f} ({dt:.0f} s)", flush=True)
            jax.clear_caches()
    out["stratify_check"] = stratify_check(P, S, perf)
    return out


def _boot(x, stat, S, seed=0) -> float:
    from .bench_finite_n_edge import _bootstrap_se
    return _bootstrap_se(x, stat, draws=S["bootstrap"], seed=seed)


def _gd(S) -> tuple:
    r = json.loads((HERE.parent / S["source"]).read_text())
    th = r["data"]["theory"]
    return (np.asarray(r["data"]["simulation"], float), np.asarray(th["gumbel_sd"], float), np.asarray(th["sd"], float),
            np.asarray(th["gumbel_median"], float))


def analysis(data, S) -> dict:
    from .bench_finite_n import _row, _se

    gd, gsd, ssd, gmed = _gd(S)                  # gd (d, seeds); the laws' (keys, d)
    tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * S['steps']:g}, δ={S['delta']:g}"
    rows, groups = [], []
    sd_of = lambda r: np.std(r, axis=1, ddof=1)
    med_of = lambda r: np.median(r, axis=1)
    for i, d in enumerate(S["ds"]):
        E = np.asarray(data["model"][str(d)]["edge"], float)      # (keys, draws)
        e, g = E.ravel(), gd[i]
        n_m, n_g = e.size, g.size
        msd, msd_se = float(e.std(ddof=1)), _boot(e, sd_of, S)
        gsd_i, gsd_se = float(g.std(ddof=1)), _boot(g, sd_of, S)
        rows.append(_row(f"{tag}, d={d}: sd of the constrained edge, random-matrix model of the DMFT law ({n_m} draws) vs "
                         "GD seeds (bootstrap s.e.)", msd, msd_se, gsd_i, gsd_se, d, n_g))
        rows.append(_row(f"{tag}, d={d}: mean of the constrained edge, random-matrix model vs GD", e.mean(), _se(e), g.mean(),
                         _se(g), d, n_g))
        rows.append(_row(f"{tag}, d={d}: median of the constrained edge, random-matrix model vs GD (bootstrap s.e.)",
                         float(np.median(e)), _boot(e, med_of, S), float(np.median(g)), _boot(g, med_of, S), d, n_g))
        ks = stats.ks_2samp(e, g)
        rows.append(dict(quantity=f"{tag}, d={d}: two-sample Kolmogorov–Smirnov test, model draws ({n_m}) vs GD seeds "
                                  f"({n_g}) (statistic {ks.statistic:.3f})", theory=None, simulation=float(ks.pvalue), d=d,
                         seeds=n_g, tolerance="p > 0.01", agree=bool(ks.pvalue > 0.01)))
        gum, gum_se = float(gsd[:, i].mean()), _se(gsd[:, i])
        rows.append(dict(quantity=f"{tag}, d={d}: sd of the edge, Gumbel law over runs (finite_n_edge_law, key mean) vs "
                                  "the random-matrix model (informational: what the Gumbel law leaves out)",
                         theory=gum, theory_stderr=gum_se, simulation=msd, sim_stderr=msd_se, d=d, seeds=n_m,
                         tolerance="informational", agree=None))
        groups.append(dict(d=d, model_sd=msd, model_sd_se=msd_se, gd_sd=gsd_i, gd_sd_se=gsd_se,
                           model_sd_per_key=sd_of(E).tolist(), gumbel_sd=gum, gumbel_sd_per_key=gsd[:, i].tolist(),
                           spike_sd=float(ssd[:, i].mean()), model_mean=float(e.mean()), gd_mean=float(g.mean()),
                           model_median=float(np.median(e)), gd_median=float(np.median(g)),
                           gumbel_median=float(gmed[:, i].mean()), model_mean_per_key=E.mean(1).tolist(),
                           ks_statistic=float(ks.statistic), ks_pvalue=float(ks.pvalue),
                           method=data["model"][str(d)]["method"], pool_over_n=data["model"][str(d)]["pool_over_n"],
                           pool_distinct_over_n=data["model"][str(d)]["pool_distinct_over_n"]))
    # pooled over d: the mean excess of the sd over the Gumbel law's (the Gumbel sds' key spread is their s.e.)
    ex_m = np.array([x["model_sd"] - x["gumbel_sd"] for x in groups])
    ex_g = np.array([x["gd_sd"] - x["gumbel_sd"] for x in groups])
    se_m = math.sqrt(sum(x["model_sd_se"] ** 2 for x in groups)) / len(groups)
    se_g = math.sqrt(sum(x["gd_sd_se"] ** 2 for x in groups)) / len(groups)
    se_gum = math.sqrt(sum(_se(gsd[:, i]) ** 2 for i in range(len(S["ds"])))) / len(groups)
    rows.append(_row(f"{tag}, d = {S['ds'][0]}–{S['ds'][-1]} pooled: mean excess of the edge sd over the Gumbel law's, "
                     "random-matrix model vs GD", ex_m.mean(), se_m, ex_g.mean(), se_g, S["ds"][-1], S["gd_seeds"]))
    summary = dict(groups=groups, model_sd_excess=ex_m.tolist(), gd_sd_excess=ex_g.tolist(),
                   model_sd_excess_mean=float(ex_m.mean()), model_sd_excess_se=float(math.hypot(se_m, se_gum)),
                   gd_sd_excess_mean=float(ex_g.mean()), gd_sd_excess_se=float(math.hypot(se_g, se_gum)))
    g_rows, g_summary = gumbel_rows(data, S, gd, gsd, tag)
    summary["gumbel_pool"] = g_summary
    return dict(rows=rows + g_rows, summary=summary)


def gumbel_rows(data, S, gd, gsd_small, tag) -> tuple:
    """The Gumbel law of the large pool (``gumbel_keys`` keys of ``paths`` paths) against GD's seeds: per d its sd,
    median and mean (theory s.e. over keys), its sd against finite_n_edge_law's from 131 072 paths
    (informational); pooled over d, the fraction of seeds below e(c) per level against 1 − e^(−c), the KS test of
    the probability integral transform under the Gumbel line, and GD's mean sd excess over it."""
    from .bench_finite_n import _row, _se
    from spectral.edge_law import gumbel_prob_beyond

    G = lambda d, k: np.asarray([g[k] for g in data["model"][str(d)]["gumbel"]], float)     # (gumbel_keys, ...)
    K, lv, N = S["gumbel_keys"], _levels(S), gd.size
    small_paths = json.loads((HERE.parent / S["source"]).read_text())["setting"]["paths"]
    law = f"the Gumbel law from {K} × {S['paths']} DMFT paths"
    rows, per_d = [], []
    sd_of = lambda r: np.std(r, axis=1, ddof=1)
    med_of = lambda r: np.median(r, axis=1)
    for i, d in enumerate(S["ds"]):
        g = gd[i]
        sd, med, mean = G(d, "gumbel_sd"), G(d, "gumbel_median"), G(d, "gumbel_mean")
        gsd_i, gsd_se = float(g.std(ddof=1)), _boot(g, sd_of, S)
        rows.append(_row(f"{tag}, d={d}: sd of the constrained edge, {law} (key s.e.) vs GD seeds (bootstrap s.e.)",
                         sd.mean(), _se(sd), gsd_i, gsd_se, d, g.size))
        rows.append(_row(f"{tag}, d={d}: median of the constrained edge, {law} (e(ln 2)) vs GD seeds (bootstrap s.e.)",
                         med.mean(), _se(med), float(np.median(g)), _boot(g, med_of, S), d, g.size))
        rows.append(_row(f"{tag}, d={d}: mean of the constrained edge, {law} vs GD seeds", mean.mean(), _se(mean),
                         g.mean(), _se(g), d, g.size))
        small = gsd_small[:, i]
        rows.append(dict(quantity=f"{tag}, d={d}: sd of the Gumbel law, finite_n_edge_law's {small.size} × {small_paths} paths "
                                  f"vs {law} (informational: the pool's effect on the Gumbel sd)",
                         theory=float(small.mean()), theory_stderr=_se(small), simulation=float(sd.mean()),
                         sim_stderr=_se(sd), d=d, seeds=g.size, tolerance="informational", agree=None))
        per_d.append(dict(d=d, sd=float(sd.mean()), sd_se=_se(sd), sd_per_key=sd.tolist(), median=float(med.mean()),
                          mean=float(mean.mean()), edges=G(d, "edges").mean(0).tolist(), slope=float(G(d, "slope").mean()),
                          intercept=float(G(d, "intercept").mean()), gd_sd=gsd_i, gd_sd_se=gsd_se,
                          small_pool_sd=float(small.mean()), min_tail_samples=int(G(d, "tail_samples").min()),
                          adequate=bool(G(d, "adequate").all()), max_fit_residual=float(G(d, "fit_residual").max())))
    fractions = []
    for c_i, c in enumerate(lv):
        f = float(np.mean([gd[i] < per_d[i]["edges"][c_i] for i in range(len(S["ds"]))]))
        fractions.append(f)
        rows.append(_row(f"{tag}: fraction of GD seeds (all d pooled) below e(c), c = {c:.3f}, {law}, vs 1 − e^(−c) "
                         "(binomial s.e. at that probability)", 1.0 - math.exp(-c), 0.0, f,
                         math.sqrt((1.0 - math.exp(-c)) * math.exp(-c) / N), S["ds"][-1], S["gd_seeds"]))
    u = np.concatenate([gumbel_prob_beyond(gd[i], p["slope"], p["intercept"]) for i, p in enumerate(per_d)])
    ks = stats.kstest(u, "uniform")
    rows.append(dict(quantity=f"{tag}: Kolmogorov–Smirnov test of the probability integral transform of all GD seeds "
                              f"under {law} (N = {N}; statistic {ks.statistic:.3f})", theory=None,
                     simulation=float(ks.pvalue), d=int(S["ds"][-1]), seeds=int(S["gd_seeds"]), tolerance="p > 0.01",
                     agree=bool(ks.pvalue > 0.01)))
    ex = np.array([p["gd_sd"] - p["sd"] for p in per_d])
    ex_se = math.sqrt(sum(p["gd_sd_se"] ** 2 + p["sd_se"] ** 2 for p in per_d)) / len(per_d)
    rows.append(_row(f"{tag}, d = {S['ds'][0]}–{S['ds'][-1]} pooled: mean excess of GD's edge sd over the sd of {law} "
                     "vs 0", 0.0, 0.0, ex.mean(), ex_se, S["ds"][-1], S["gd_seeds"]))
    c_rows, check = stratify_rows(data, S, gd, tag)
    return rows + c_rows, dict(per_d=per_d, fractions_below=fractions, ks_statistic=float(ks.statistic),
                               ks_pvalue=float(ks.pvalue), gd_sd_excess=ex.tolist(), gd_sd_excess_mean=float(ex.mean()),
                               gd_sd_excess_se=float(ex_se), stratify_check=check)


def stratify_rows(data, S, gd, tag) -> tuple:
    """The stratified Gumbel law of finite_n_edge_law's own keys against its committed full-pool one: the largest
    |Δ e(c)| over keys, d and levels, and (where the levels are finite_n_edge_law's) the largest |Δ sd|, each
    against a fifth of GD's smallest s.e. of the same quantity (so the stratification moves no comparison)."""
    from .bench_finite_n import _se

    C, src = S["stratify_check"], json.loads((HERE.parent / S["source"]).read_text())
    full = src["data"]["theory"]
    lv_full = sorted(src["setting"]["levels"])
    at = [lv_full.index(c) for c in _levels(S)]
    de, dsd = [], []
    for i, d in enumerate(S["ds"]):
        for j, g in enumerate(data["model"]["stratify_check"][str(d)]):
            de.append(np.max(np.abs(np.asarray(g["edges"]) - np.asarray(full["edges"][j][i])[at])))
            if _levels(S) == lv_full:
                dsd.append(abs(g["gumbel_sd"] - full["gumbel_sd"][j][i]))
    mean_se = min(_se(g) for g in gd)
    sd_se = min(_boot(g, lambda r: np.std(r, axis=1, ddof=1), S) for g in gd)
    what = (f"the Gumbel law stratified (tail mass {S['stratify']['tail_mass']:g} whole, {C['bulk']} of the others) vs "
            f"from all {C['paths']} paths (finite_n_edge_law's committed, its {C['keys']} keys)")
    rows = [dict(quantity=f"{tag}: {what}: largest |Δ e(c)| over keys, d = {S['ds'][0]}–{S['ds'][-1]} and levels, vs a "
                          f"fifth of GD's smallest s.e. of the mean ({mean_se:.4f})", theory=None,
                 simulation=float(max(de)), d=int(S["ds"][-1]), seeds=int(S["gd_seeds"]),
                 tolerance=float(0.2 * mean_se), agree=bool(max(de) <= 0.2 * mean_se))]
    if dsd:
        rows.append(dict(quantity=f"{tag}: {what}: largest |Δ sd| over keys and d, vs a fifth of GD's smallest "
                                  f"bootstrap s.e. of the sd ({sd_se:.4f})", theory=None, simulation=float(max(dsd)),
                         d=int(S["ds"][-1]), seeds=int(S["gd_seeds"]), tolerance=float(0.2 * sd_se),
                         agree=bool(max(dsd) <= 0.2 * sd_se)))
    return rows, dict(max_abs_edge_diff=float(max(de)), max_abs_sd_diff=float(max(dsd)) if dsd else None,
                      edge_diffs=[float(x) for x in de], sd_diffs=[float(x) for x in dsd])


def run(mode: str, outdir: pathlib.Path) -> dict:
    from .bench_matrix_model import run_model
    return run_model(settings(mode), problem(), analysis, replot, NAME, outdir, draws_fn=draws)


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, sm = res["setting"], res["data"]["summary"]
    gd = _gd(S)[0]
    G = sm["groups"]
    ds = [g["d"] for g in G]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].errorbar(ds, [g["model_sd"] for g in G], [g["model_sd_se"] for g in G], fmt="s--", mfc="none", label="matrix model")
    ax[0].errorbar(ds, [g["gd_sd"] for g in G], [g["gd_sd_se"] for g in G], fmt="o-", label="GD seeds")
    ax[0].plot(ds, [g["gumbel_sd"] for g in G], "k:", label=f"Gumbel law ({S['stratify_check']['paths']} paths)")
    GP = sm["gumbel_pool"]["per_d"]
    ax[0].errorbar(ds, [g["sd"] for g in GP], [g["sd_se"] for g in GP], fmt="k^-", mfc="none", lw=0.8,
                   label=f"Gumbel law ({S['paths']} paths, stratified)")
    ax[0].plot(ds, [g["spike_sd"] for g in G], "k-.", lw=0.8, label="spike law")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("d")
    ax[0].set_ylabel("sd of the constrained edge")
    ax[0].legend(fontsize=7)
    for i, d in enumerate(ds):
        e = np.sort(np.ravel(res["data"]["model"][str(d)]["edge"]))
        g = np.sort(gd[i])
        ax[1].plot(e, np.arange(1, e.size + 1) / e.size, "--", color=f"C{i}", lw=1)
        ax[1].step(g, np.arange(1, g.size + 1) / g.size, where="post", color=f"C{i}", label=f"d={d}")
    ax[1].set_xlabel("constrained edge")
    ax[1].set_ylabel("CDF (dashed: model; steps: GD)")
    ax[1].legend(fontsize=7)
    fig.suptitle(f"PR quadratic m=4, δ={S['delta']:g}, t·η={S['lr'] * S['steps']:g}: GD's edge vs the DMFT law's "
                 "random-matrix model", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
