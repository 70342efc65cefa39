"""GD's per-sample blocks against the DMFT law in the far tail, with seed-level errors (issue #4 item 3; THEORY §2).

Why. The finite-d edge of the first-phase Hessian is set by the most extreme blocks D_i (``edge_tail``:
correlation 0.89–0.97 with the seed's most extreme block), so the law of the edge over runs is only as good as
the law's far tail. ``edge_tail`` compared P(λ_min(D) < c) of GD's blocks pooled over seeds with one DMFT key of
2^20 paths: every (d, c) cell within its Poisson s.e., but GD above the law in 16 of 20. Poisson errors on a
pooled count ignore that a seed's blocks share its W, and one key ignores the law's kernel Monte Carlo error.
Here: per seed fractions (the seed is the unit: its s.e. is the spread over seeds), the law from ``law_keys``
independent keys (its s.e. the spread over keys, or the Poisson s.e. of its distinct paths, whichever is
larger), per (d, c) rows, and per c the excess GD/law − 1 pooled over d and fitted by a constant and by
A·d^(−1/2).

Setting: ``finite_n_edge_law``'s, with d = 4000 and 8000 added (same seed rule; blocks only, no spectra) to tell a
constant excess from one falling like d^(−1/2) (phase retrieval y = z², quadratic student m = 4, a = 1/4 frozen, η = 0.2,
t·η = 2.4, δ = 3, GD on the first-phase manifold, the same keys and seeds). For this student
λ_min(D_i) = −2a(y_i − F(r_i)) (rank-one F'F'ᵀ plus −(y − F)·2a·I), so the tail is that of the residual.
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "block_tail"
HERE = pathlib.Path(__file__).resolve().parent


def settings(mode: str) -> dict:
    src = HERE / "results" / ("quick" if mode == "quick" else "") / "finite_n_edge_law.json"
    G = json.loads(src.read_text())["setting"]
    S = dict(source=str(src.relative_to(HERE.parent)), delta=G["delta"], lr=G["lr"], steps=G["steps"],
             ds=G["ds"] + ([] if mode == "quick" else [4000, 8000]),
             seeds=G["seeds"], sim_key=G["sim_key"], dmft_key=G["key"], law_paths=1 << 20, law_keys=3,
             thresholds=[-1.2, -1.5, -1.8, -2.0, -2.2], problem=G["problem"], simulation=G["simulation"],
             law_key_rule="fold_in(fold_in(key(dmft_key), law_paths), j): key 0 is edge_tail's large pool",
             distinct_note="antithetic pairs share D (±z, hard overlap 0): the law's Poisson s.e. counts half its tail paths")
    if mode == "quick":
        S.update(law_paths=1 << 16, law_keys=2, thresholds=[-1.2, -1.5, -1.8])
    return S


def problem():
    from .bench_matrix_model_edge import problem as p
    return p()


def gd_side(P, S, perf) -> dict:
    import dmft
    from spectral.hessian import finite_blocks

    out = {}
    for d in S["ds"]:
        t0 = time.perf_counter()
        sim = dmft.simulate(P, d=d, delta=S["delta"], lr=S["lr"], steps=S["steps"], seeds=S["seeds"],
                            key=jax.random.fold_in(jax.random.key(S["sim_key"]), d), freeze_hard=True, return_weights=True,
                            test_samples=16)
        frac, mean = [], []
        for s in range(S["seeds"]):
            X, y = dmft.simulation_data(P, sim, s)
            lmin = np.asarray(jnp.linalg.eigvalsh(finite_blocks(P, X, y, sim.a[s], sim.W[s]))[:, 0])
            frac.append([float((lmin < c).mean()) for c in S["thresholds"]])
            mean.append(float(lmin.mean()))
        out[str(d)] = dict(n=int(X.shape[0]), fractions=frac, block_mean=mean)
        perf.append(dict(what=f"GD d={d}: {S['seeds']} seeds, blocks", value=time.perf_counter() - t0, unit="s", ratio=None,
                         note=jax.default_backend()))
    return out


def law_side(P, S, perf) -> dict:
    import dmft
    import spectral

    out = dict(fractions=[], block_mean=[], train_error=[])
    for j in range(S["law_keys"]):
        t0 = time.perf_counter()
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["dmft_key"]), S["law_paths"]), j)
        tr = dmft.solve(P, S["delta"], S["lr"], S["steps"], S["law_paths"], key, save_samples_at=(S["steps"],))
        lmin = np.asarray(jnp.linalg.eigvalsh(spectral.law_from_dmft(P, tr, S["steps"]).D)[:, 0])
        out["fractions"].append([float((lmin < c).mean()) for c in S["thresholds"]])
        out["block_mean"].append(float(lmin.mean()))
        out["train_error"].append(float(tr.train_error[-1]))
        del tr
        perf.append(dict(what=f"DMFT solve (T={S['steps']}, m=4, {S['law_paths']} paths) + block tail, key {j}",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
    return out


def _fit(x, r, se):
    """Weighted least squares of r on a single regressor x (no intercept): coefficient, its s.e., χ²."""
    w = 1.0 / np.asarray(se) ** 2
    a = float(np.sum(w * x * r) / np.sum(w * x * x))
    return a, float(1.0 / math.sqrt(np.sum(w * x * x))), float(np.sum(w * (r - a * x) ** 2))


def analysis(data, S) -> dict:
    from .bench_finite_n import _row

    tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * S['steps']:g}, δ={S['delta']:g}"
    L = np.asarray(data["law"]["fractions"], float)                       # keys × c
    K = L.shape[0]
    law = L.mean(0)
    law_se = np.maximum(L.std(0, ddof=1) / math.sqrt(K) if K > 1 else 0.0,
                        np.sqrt(np.maximum(law, 1e-12) / (K * S["law_paths"] / 2)))  # distinct paths: half
    rows, groups = [], []
    excess = np.zeros((len(S["ds"]), len(S["thresholds"])))
    excess_se = np.zeros_like(excess)
    for i, d in enumerate(S["ds"]):
        g = data["gd"][str(d)]
        F = np.asarray(g["fractions"], float)                             # seeds × c
        s, n = F.shape[0], g["n"]
        # s.e. over seeds, floored by the Poisson s.e. at the law's rate (few or no tail blocks in small runs)
        m, se = F.mean(0), np.maximum(F.std(0, ddof=1) / math.sqrt(s), np.sqrt(law / (n * s)))
        for jc, c in enumerate(S["thresholds"]):
            rows.append(_row(f"{tag}, d={d}: P(λ_min(D) < {c:g}), DMFT law ({K} keys × {S['law_paths']} paths; s.e. over keys "
                             "or Poisson of the distinct paths) vs GD's blocks (seed mean; s.e. over seeds)",
                             law[jc], law_se[jc], m[jc], se[jc], d, s))
        excess[i] = m / law - 1
        excess_se[i] = np.hypot(se / law, m * law_se / law ** 2)
        poisson_sd = np.sqrt(law / n)                                     # a seed's fraction if its blocks were iid
        groups.append(dict(d=d, n=n, gd=m.tolist(), gd_se=se.tolist(), ratio=(m / law).tolist(),
                           excess_se=excess_se[i].tolist(), seed_sd_over_poisson=(F.std(0, ddof=1) / poisson_sd).tolist(),
                           gd_block_mean=float(np.mean(g["block_mean"])), gd_block_mean_se=float(np.std(g["block_mean"], ddof=1) / math.sqrt(s))))
    pooled = []
    x = np.asarray(S["ds"], float) ** -0.5
    for jc, c in enumerate(S["thresholds"]):
        w = 1.0 / excess_se[:, jc] ** 2
        mu, mu_se = float(np.sum(w * excess[:, jc]) / np.sum(w)), float(1.0 / math.sqrt(np.sum(w)))
        chi_const = float(np.sum(w * (excess[:, jc] - mu) ** 2))
        A, A_se, chi_sqrt = _fit(x, excess[:, jc], excess_se[:, jc])
        pooled.append(dict(c=c, excess=mu, excess_se=mu_se, chi2_constant=chi_const, A=A, A_se=A_se, chi2_sqrt=chi_sqrt,
                           dof=len(S["ds"]) - 1))
        rows.append(_row(f"{tag}: P(λ_min(D) < {c:g}), GD/law − 1 pooled over d = {', '.join(map(str, S['ds']))} "
                         f"(inverse-variance; constant χ² {chi_const:.1f} on {len(S['ds']) - 1}; A·d^−1/2 fit A = {A:.2f} ± "
                         f"{A_se:.2f}, χ² {chi_sqrt:.1f}) vs 0 (the law exact at every d)",
                         0.0, 0.0, mu, mu_se, 0, len(S["ds"]) * S["seeds"]))
    summary = dict(law=law.tolist(), law_se=law_se.tolist(), law_keys=L.tolist(), groups=groups, pooled=pooled,
                   law_block_mean=float(np.mean(data["law"]["block_mean"])))
    return dict(rows=rows, summary=summary)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S, P, perf = settings(mode), problem(), []
    t0 = time.perf_counter()
    data = dict(gd=gd_side(P, S, perf), law=law_side(P, S, perf))
    from .runner import assemble
    return assemble(NAME, S, data, analysis, perf, t0, replot, outdir)


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, sm = res["setting"], res["data"]["summary"]
    th = S["thresholds"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for i, g in enumerate(sm["groups"]):
        ax[0].errorbar(np.asarray(th) + 0.01 * i, np.asarray(g["ratio"]) - 1, yerr=g["excess_se"], fmt="o-", color=f"C{i}",
                       capsize=2, label=f"GD d={g['d']}")
    ax[0].axhline(0, color="k", lw=0.8)
    ax[0].set_xlabel("c")
    ax[0].set_ylabel("P_GD(λ_min(D) < c) / P_law − 1")
    ax[0].legend(fontsize=8)
    P = sm["pooled"]
    ax[1].errorbar([p["c"] for p in P], [p["excess"] for p in P], yerr=[p["excess_se"] for p in P], fmt="ks-", capsize=3,
                   label="pooled over d")
    ax[1].axhline(0, color="k", lw=0.8)
    ax[1].set_xlabel("c")
    ax[1].set_ylabel("pooled excess")
    ax[1].legend(fontsize=8)
    fig.suptitle(f"PR quadratic m=4, δ={S['delta']:g}, t·η={S['lr'] * S['steps']:g}: GD's blocks against the DMFT law "
                 f"({S['law_keys']} × {S['law_paths']} paths) in the far tail", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
