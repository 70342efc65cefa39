"""Where GD's wider edge law comes from: each seed's own blocks, and their far tail against the DMFT law's
(issue #4 item 3; THEORY §2; docs/spectral.md "The law of the finite-n edge").

Why. ``matrix_model_edge`` found the seed-to-seed sd of GD's constrained edge above that of the DMFT law's
random-matrix model at d = 1000 and 2000 (phase retrieval, quadratic student m = 4, a = 1/4 frozen, η = 0.2,
t·η = 2.4, δ = 3). A GD Hessian H = (1/n) Σ x_i x_iᵀ ⊗ D_i differs from a model draw in two ways: its blocks
D_i are the seed's own (not iid from the DMFT paths), and they depend on x_i (through r_i = Wᵀx_i) beyond the
hard coordinate. This benchmark separates the two on ``finite_n_edge_law``'s GD runs (same keys; each seed's
edge must reproduce the committed one):

- per seed: the GD edge; the edge of the same blocks D_i with fresh Gaussian x_i (hard coordinate kept;
  ``fresh_reps`` independent x per seed): if its sd is GD's, the seed's blocks set the spread and the x–D
  dependence does not; the smallest eigenvalue over the seed's blocks, min_i λ_min(D_i) (the extreme sample);
- pooled over seeds at each d, the far tail of λ_min(D_i), P(λ_min < c) at ``thresholds``, against the DMFT
  law's (Poisson s.e. on both sides); and the law of the sample minimum over n = δd blocks drawn without
  replacement from the DMFT paths against GD's seeds. Two pools: ``finite_n_edge_law``'s keys (``keys`` ×
  ``paths``: the pool of matrix_model_edge's first run; antithetic pairs share D, so half as many distinct
  blocks) and one key of ``large_paths`` (the pool matrix_model_edge now uses).

Rows per d: fresh-x edge sd vs GD's and fresh-x mean vs GD's (3 combined s.e., bootstrap for sds; the mean row
measures the x–D dependence's shift); the sd of the sample minimum, each pool vs GD; the tail fractions,
large pool vs GD; the correlations (informational).
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "edge_tail"
HERE = pathlib.Path(__file__).resolve().parent


def settings(mode: str) -> dict:
    src = HERE / "results" / ("quick" if mode == "quick" else "") / "finite_n_edge_law.json"
    G = json.loads(src.read_text())["setting"]
    S = dict(source=str(src.relative_to(HERE.parent)), delta=G["delta"], lr=G["lr"], steps=G["steps"], paths=G["paths"],
             keys=G["keys"], dmft_key=G["key"], ds=G["ds"], seeds=G["seeds"], sim_key=G["sim_key"], k=G["k"],
             fresh_reps=2, fresh_reps_at={"2000": 1}, fresh_key=78, max_iters=400, dense_max_dm=3000,
             thresholds=[-1.2, -1.5, -1.8, -2.0, -2.2], pool_min_draws=2000, bootstrap=2000, problem=G["problem"],
             large_paths=1_048_576, large_keys=1,
             fresh="x_i' = (ζ_i, g_i'), g_i' ~ N(0, I_{d−1}) fresh (key fold_in(fold_in(key(fresh_key), d), 100 s + r)), the "
                   "seed's own D_i kept",
             simulation=G["simulation"])
    if mode == "quick":
        S.update(thresholds=[-1.2, -1.5, -1.8], pool_min_draws=400, bootstrap=200, large_paths=16_384)
    return S


def _reps(S, d) -> int:
    return int(S["fresh_reps_at"].get(str(d), S["fresh_reps"]))


def problem():
    from .bench_matrix_model_edge import problem as p
    return p()


def gd_side(P, S, perf) -> dict:
    import dmft
    from dmft.simulate import simulation_data
    from spectral.finite_state import bottom_spectrum
    from spectral.hessian import finite_blocks

    committed = np.asarray(json.loads((HERE.parent / S["source"]).read_text())["data"]["simulation"], float)
    out = {}
    for i, d in enumerate(S["ds"]):
        t0 = time.perf_counter()
        sim = dmft.simulate(P, d=d, delta=S["delta"], lr=S["lr"], steps=S["steps"], seeds=S["seeds"],
                            key=jax.random.fold_in(jax.random.key(S["sim_key"]), d), freeze_hard=True, return_weights=True,
                            test_samples=256)
        method = "dense" if d * P.m <= S["dense_max_dm"] else "lanczos"
        hard = tuple(P.teacher.hard_coordinates())       # as spectral.hard_outlier_at_state (GD's committed edges)
        spec = lambda X, D, s: bottom_spectrum(X, D, float(P.ridge), hard, k=S["k"], method=method, key=jax.random.key(s),
                                               max_iters=S["max_iters"])[2]
        rec = dict(edge=[], fresh=[], sample_min=[], tail_counts=np.zeros(len(S["thresholds"]), int), blocks=0,
                   block_sum=0.0, block_sq=0.0, method=method)
        for s in range(S["seeds"]):
            X, y = simulation_data(P, sim, s)
            D = finite_blocks(P, X, y, sim.a[s], sim.W[s])
            rec["edge"].append(float(spec(X, D, s)))
            fr = []
            for r in range(_reps(S, d)):
                kx = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["fresh_key"]), d), 100 * s + r)
                Xf = jax.random.normal(kx, X.shape, X.dtype).at[:, list(hard)].set(X[:, list(hard)])
                fr.append(float(spec(Xf, D, s)))
            rec["fresh"].append(fr)
            lmin = np.asarray(jnp.linalg.eigvalsh(D)[:, 0])
            rec["sample_min"].append(float(lmin.min()))
            rec["tail_counts"] += np.array([(lmin < c).sum() for c in S["thresholds"]])
            rec["blocks"] += lmin.size
            rec["block_sum"] += float(lmin.sum())
            rec["block_sq"] += float((lmin ** 2).sum())
        rec["tail_counts"] = rec["tail_counts"].tolist()
        rec["max_abs_diff_committed"] = float(np.max(np.abs(np.asarray(rec["edge"]) - committed[i])))
        if rec["max_abs_diff_committed"] > 1e-8:
            raise RuntimeError(f"d={d}: GD edges do not reproduce finite_n_edge_law's ({rec['max_abs_diff_committed']:.2e})")
        out[str(d)] = rec
        dt = time.perf_counter() - t0
        perf.append(dict(what=f"GD d={d}: {S['seeds']} seeds, edge + {_reps(S, d)} fresh-x edges ({method})", value=dt,
                         unit="s", ratio=None, note=jax.default_backend()))
        e, f = np.asarray(rec["edge"]), np.asarray(rec["fresh"])
        print(f"   GD d={d}: edge sd {e.std(ddof=1):.4f}, fresh-x sd {f[:, 0].std(ddof=1):.4f}, corr "
              f"{np.corrcoef(e, f[:, 0])[0, 1]:.3f} ({dt:.0f} s)", flush=True)
    return out


def law_side(P, S, perf, paths=None, keys=None) -> dict:
    """Per DMFT key: tail counts of λ_min(D) over the paths, and the sample minimum of n = δd paths drawn without
    replacement (``pool_min_draws`` draws per d; numpy generator seeded by the key index). Default: the keys and
    paths of finite_n_edge_law (the pool of matrix_model_edge's first run)."""
    import dmft
    import spectral

    paths = S["paths"] if paths is None else paths
    keys = S["keys"] if keys is None else keys
    out = dict(tail_counts=[], paths=[], mean=[], sd=[], pool_min={str(d): [] for d in S["ds"]})
    for j in range(keys):
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["dmft_key"]), paths), j)
        tr = dmft.solve(P, S["delta"], S["lr"], S["steps"], paths, key, save_samples_at=(S["steps"],))
        law = spectral.law_from_dmft(P, tr, S["steps"])
        lmin = np.asarray(jnp.linalg.eigvalsh(law.D)[:, 0])
        out["tail_counts"].append([int((lmin < c).sum()) for c in S["thresholds"]])
        out["paths"].append(int(lmin.size))
        out["mean"].append(float(lmin.mean()))
        out["sd"].append(float(lmin.std()))
        rng = np.random.default_rng(j)
        for d in S["ds"]:
            n = int(round(S["delta"] * d))
            out["pool_min"][str(d)].append([float(lmin[rng.choice(lmin.size, n, replace=False)].min())
                                            for _ in range(S["pool_min_draws"])])
        del tr, law
        perf.append(dict(what=f"DMFT solve (T={S['steps']}, m=4, {paths} paths) + block tails, key {j}",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
    return out


def analysis(data, S) -> dict:
    from .bench_finite_n import _row, _se
    from .bench_finite_n_edge import _bootstrap_se

    gd, law, big = data["gd"], data["law"], data["large"]
    tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * S['steps']:g}, δ={S['delta']:g}"
    sd_of = lambda r: np.std(r, axis=1, ddof=1)
    boot = lambda x: _bootstrap_se(x, sd_of, draws=S["bootstrap"])
    Ns, cs = float(sum(law["paths"])), np.asarray(law["tail_counts"], float).sum(0)     # finite_n_edge_law's pool
    Nl, cl = float(sum(big["paths"])), np.asarray(big["tail_counts"], float).sum(0)     # the large pool
    rows, groups = [], []
    for d in S["ds"]:
        g = gd[str(d)]
        e, f = np.asarray(g["edge"], float), np.asarray(g["fresh"], float)
        f0, fm, smin = f[:, 0], f.mean(1), np.asarray(g["sample_min"], float)
        pm = np.concatenate(law["pool_min"][str(d)])
        pl = np.concatenate(big["pool_min"][str(d)])
        s = len(e)
        rows.append(_row(f"{tag}, d={d}: sd of the constrained edge, the seed's own blocks D_i with fresh x (first of "
                         f"{f.shape[1]}) vs GD (bootstrap s.e.)", f0.std(ddof=1), boot(f0), e.std(ddof=1), boot(e), d, s))
        rows.append(_row(f"{tag}, d={d}: mean of the constrained edge, the seed's own blocks with fresh x vs GD (the x–D "
                         "dependence's shift; s.e. of the paired difference)", fm.mean(), _se(fm - e), e.mean(), 0.0, d, s))
        for nm, x, N in (("", pm, Ns), (" (large pool)", pl, Nl)):
            rows.append(_row(f"{tag}, d={d}: sd over runs of the sample minimum min_i λ_min(D_i) over n = δd blocks, drawn "
                             f"from {int(N)} DMFT paths{nm} ({x.size} draws) vs GD's seeds (bootstrap s.e.)",
                             x.std(ddof=1), _bootstrap_se(x, sd_of, draws=200), smin.std(ddof=1), boot(smin), d, s))
        ng = float(g["blocks"])
        for c, kg, kl in zip(S["thresholds"], g["tail_counts"], cl):
            rows.append(_row(f"{tag}, d={d}: fraction of blocks with λ_min(D) < {c:g}, DMFT law (large pool: {int(Nl)} paths, "
                             f"{int(kl)} below) vs GD's blocks pooled over seeds ({int(ng)}, {int(kg)} below; Poisson s.e.)",
                             kl / Nl, math.sqrt(max(kl, 1.0)) / Nl, kg / ng, math.sqrt(max(kg, 1.0)) / ng, d, s))
        within = float(np.mean(f.std(1, ddof=1))) if f.shape[1] > 1 else float("nan")
        groups.append(dict(d=d, gd_sd=float(e.std(ddof=1)), fresh_sd=float(f0.std(ddof=1)), gd_mean=float(e.mean()),
                           fresh_mean=float(fm.mean()), corr_gd_fresh=float(np.corrcoef(e, f0)[0, 1]),
                           corr_gd_sample_min=float(np.corrcoef(e, smin)[0, 1]), fresh_within_seed_sd=within,
                           sd_gd_minus_fresh=float((e - fm).std(ddof=1)), gd_sample_min_mean=float(smin.mean()),
                           gd_sample_min_sd=float(smin.std(ddof=1)), pool_sample_min_mean=float(pm.mean()),
                           pool_sample_min_sd=float(pm.std(ddof=1)), large_pool_sample_min_mean=float(pl.mean()),
                           large_pool_sample_min_sd=float(pl.std(ddof=1)),
                           gd_tail=[k / ng for k in g["tail_counts"]], law_tail=(cl / Nl).tolist(),
                           gd_block_mean=g["block_sum"] / ng,
                           gd_block_sd=math.sqrt(max(g["block_sq"] / ng - (g["block_sum"] / ng) ** 2, 0.0)),
                           max_abs_diff_committed=g["max_abs_diff_committed"], method=g["method"]))
        rows.append(dict(quantity=f"{tag}, d={d}: correlation over seeds of GD's edge with the fresh-x edge "
                                  f"(informational; with the sample minimum: {groups[-1]['corr_gd_sample_min']:.3f})",
                         theory=None, simulation=groups[-1]["corr_gd_fresh"], d=d, seeds=s, tolerance="informational",
                         agree=None))
    summary = dict(groups=groups, law_tail=(cl / Nl).tolist(), law_paths=int(Nl), small_pool_tail=(cs / Ns).tolist(),
                   small_pool_paths=int(Ns), law_block_mean=float(np.mean(big["mean"])), law_block_sd=float(np.mean(big["sd"])))
    return dict(rows=rows, summary=summary)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S, P, perf = settings(mode), problem(), []
    t0 = time.perf_counter()
    data = dict(law=law_side(P, S, perf), large=law_side(P, S, perf, S["large_paths"], S["large_keys"]))
    data["gd"] = gd_side(P, S, perf)
    from .runner import assemble
    return assemble(NAME, S, data, analysis, perf, t0, replot, outdir)


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, sm = res["setting"], res["data"]["summary"]
    G = sm["groups"]
    ds = [g["d"] for g in G]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].plot(ds, [g["gd_sd"] for g in G], "o-", label="GD edge")
    ax[0].plot(ds, [g["fresh_sd"] for g in G], "s--", mfc="none", label="own blocks, fresh x")
    ax[0].plot(ds, [g["gd_sample_min_sd"] for g in G], "^-", label="GD sample min of λ_min(D)")
    ax[0].plot(ds, [g["pool_sample_min_sd"] for g in G], "v--", mfc="none", label=f"{sm['small_pool_paths']} DMFT paths: sample min")
    ax[0].plot(ds, [g["large_pool_sample_min_sd"] for g in G], "v-", label=f"{sm['law_paths']} DMFT paths: sample min")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("d")
    ax[0].set_ylabel("sd over seeds")
    ax[0].legend(fontsize=7)
    th = S["thresholds"]
    ax[1].semilogy(th, sm["law_tail"], "k-", label=f"DMFT law ({sm['law_paths']} paths)")
    ax[1].semilogy(th, np.maximum(sm["small_pool_tail"], 1e-7), "k--", label=f"DMFT law ({sm['small_pool_paths']} paths)")
    for i, g in enumerate(G):
        ax[1].semilogy(th, np.maximum(g["gd_tail"], 1e-7), "o-", color=f"C{i}", label=f"GD d={g['d']}")
    ax[1].set_xlabel("c")
    ax[1].set_ylabel("P(λ_min(D) < c)")
    ax[1].legend(fontsize=7)
    fig.suptitle(f"PR quadratic m=4, δ={S['delta']:g}, t·η={S['lr'] * S['steps']:g}: GD's edge spread and its blocks' tail",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
