"""The secant bracket searches of ``spectral.outlier`` against bisection (issue #3 solver speed).

Why. An ``outlier`` call is an edge search (44 bisection probes, each a real Stieltjes solve continued
from the last good point) and, where an outlier exists, a 44-step bisection of its root: most of the
time of every δ*(t), δ_NN and finite-n threshold. ``search="secant"`` (default since session 42) aims
the edge probes just short of the zero of (1 − ρ)² (linear at a square-root edge) and locates the root
by regula falsi with the Illinois rule, both with bisection safeguards and the same final bracket
(docs/spectral.md, "The secant edge search"). This benchmark runs both searches on the same laws.

Laws (``setting``):
- toy: the bounded m = 2 law of tests/test_spectral_bulk.py (a negative spike along ζ), its m = 1
  corner and an m = 3 extension, at δ = 0.5 … 8, both sides;
- huber: DMFT states of phase retrieval under a Huber loss (bench_spectral_dmft_state's problem,
  m = 2, quadratic and GeLU students), both sides where bounded, at the edge and at level 0;
- pr: phase retrieval, square loss, m = 4 (bench_finite_n_threshold's quadratic student; GeLU in the
  standard run), finite-n laws at several d (the setting of the δ* sweeps).

Per law: status, existence, edge, margin, outlier, cos², Newton steps and edge probes of each search.
Timing: compiled ``outlier`` calls on the PR quadratic laws, median of ``repeats`` after a first call
(which includes the compilation; reported apart).

Measured: see RESULTS.md (generated) and docs/spectral.md.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
import spectral
from dmft import activations
from spectral.thresholds import _law_at, _slice

from .bench_delta_star_trend import problem as pr_problem
from .bench_spectral import toy_D
from .bench_spectral_dmft_state import problem as huber_problem

NAME = "bracket_search"
SEARCHES = ("bisection", "secant")
# agreement of the secant search with bisection (same final bracket, 2^-44 of the initial one): the edge to
# about one bracket (the predicate's resolution near the fold, ~1e-12), the margin at the edge like the
# square root of that, the outlier and cos² far less
TOL = dict(edge=1e-11, margin=1e-5, eigenvalue=1e-10, cosine2=1e-9)


def settings(mode: str) -> dict:
    S = dict(toy=dict(samples=8000, deltas=[0.5, 1.0, 2.0, 4.0, 8.0], widths=[1, 2, 3], key=0),
             huber=dict(activations=["quadratic", "gelu"], deltas=[2.0, 4.0, 6.0], paths=8192, steps=10, lr=0.2, key=3),
             pr=[dict(activation="quadratic", lr=0.2, steps=12, paths=32768, deltas=[3.5, 4.5, 5.0], ds=[250, 1000],
                      key=0, timed=True),
                 dict(activation="gelu", lr=0.5, steps=12, paths=8192, deltas=[3.0, 6.0], ds=[250, 2000], key=4,
                      timed=False)],
             outlier_options=dict(max_steps=20), repeats=3, level_pr=0.0)
    if mode == "quick":
        S.update(toy=dict(samples=2000, deltas=[1.0, 4.0], widths=[2], key=0), huber=None,
                 pr=[dict(activation="quadratic", lr=0.2, steps=6, paths=2048, deltas=[3.5, 5.0], ds=[250], key=0,
                          timed=True)], repeats=2)
    return S


def toy_law(m: int, samples: int, key: int):
    """The toy law of ``bench_spectral.toy_D`` (m = 2), its (0, 0) corner (m = 1) or an m = 3 extension."""
    k1, k2 = jax.random.split(jax.random.key(key))
    zeta = jax.random.normal(k1, (samples,))
    u = jax.random.normal(k2, (samples, 2))
    D2 = toy_D(zeta, u)
    if m == 1:
        D = D2[:, :1, :1]
    elif m == 2:
        D = D2
    else:
        c = 0.2 * jnp.tanh(u)                                              # coupling of the third unit
        e = 1.2 + 0.3 * jnp.tanh(u[:, 0] + u[:, 1])
        D = jnp.concatenate([jnp.concatenate([D2, c[:, :, None]], 2),
                             jnp.concatenate([c[:, None, :], e[:, None, None]], 2)], 1)
    return spectral.law_from_samples(D, zeta=zeta, unbounded=())


def cases(S) -> list:
    """(label, law, δ, side, level, group, timed) for every law of the setting."""
    out = []
    T = S["toy"]
    for m in T["widths"]:
        law = toy_law(m, T["samples"], T["key"])
        for dv in T["deltas"]:
            for side in ("bottom", "top"):
                out.append((f"toy m={m} δ={dv:g} {side}", law, dv, side, None, "toy", False))
    H = S["huber"]
    if H:
        for act in H["activations"]:
            P = huber_problem(activation=act)
            tr = dmft.solve_sweep(P, jnp.asarray(H["deltas"]), lr=H["lr"], steps=H["steps"], paths=H["paths"],
                                  key=jax.random.key(H["key"]), save_samples_at=(H["steps"],), throw=False)
            for i, dv in enumerate(H["deltas"]):
                law = spectral.law_from_dmft(P, _slice(tr, i), H["steps"])
                for side in ("bottom", "top"):
                    if side in law.unbounded:
                        continue
                    for lev in ((None, 0.0) if side == "bottom" else (None,)):
                        out.append((f"huber {act} m=2 δ={dv:g} {side} level={lev}", law, dv, side, lev, "huber", False))
    for R in S["pr"]:
        P = pr_problem(activations.get(R["activation"]))
        tr = dmft.solve_sweep(P, jnp.asarray(R["deltas"]), lr=R["lr"], steps=R["steps"], paths=R["paths"],
                              key=jax.random.key(R["key"]), save_samples_at=(R["steps"],), throw=False)
        for i, dv in enumerate(R["deltas"]):
            for d in R["ds"]:
                law, _ = _law_at(P, _slice(tr, i), R["steps"], dv, "finite-n", d)
                out.append((f"PR {R['activation']} m=4 {R['paths']} paths finite-n d={d} δ={dv:g} bottom level=0", law,
                            dv, "bottom", S["level_pr"], "pr", R["timed"]))
    return out


def compare(S) -> list:
    rows = []
    for label, law, dv, side, lev, group, timed in cases(S):
        r = dict(case=label, group=group)
        for s in SEARCHES:
            t0 = time.perf_counter()
            o = spectral.outlier(law, dv, side, level=lev, search=s, throw=False, **S["outlier_options"])
            jax.block_until_ready(o.edge)
            first = time.perf_counter() - t0
            e = spectral.bulk_edge(law, dv, side, search=s, throw=False, **S["outlier_options"])
            r[s] = dict(status=int(o.status), exists=bool(o.exists), edge=float(o.edge), margin=float(o.margin),
                        eigenvalue=float(o.eigenvalue), cosine2=float(o.cosine2), iterations=int(o.iterations),
                        edge_iterations=int(e.iterations), probes=int(e.probes), bracket=float(e.bracket))
            if timed:
                walls = []
                for _ in range(S["repeats"]):
                    t0 = time.perf_counter()
                    jax.block_until_ready(spectral.outlier(law, dv, side, level=lev, search=s, throw=False,
                                                           **S["outlier_options"]).edge)
                    walls.append(time.perf_counter() - t0)
                r[s].update(first_call_s=first, walls_s=walls)
        b, c = r["bisection"], r["secant"]
        print(f"   {label}: exists {b['exists']}/{c['exists']}, Newton steps {b['iterations']} → {c['iterations']}, "
              f"probes {b['probes']} → {c['probes']}, Δedge {c['edge'] - b['edge']:.1e}", flush=True)
        rows.append(r)
    return rows


def _diff(rows, q):
    """Largest |secant − bisection| of ``q`` over the rows (outliers: where both found one)."""
    v = [abs(r["secant"][q] - r["bisection"][q]) for r in rows
         if np.isfinite(r["secant"][q]) and np.isfinite(r["bisection"][q])]
    return float(max(v)) if v else 0.0


def summary(rows) -> dict:
    it = np.array([[r[s]["iterations"] for s in SEARCHES] for r in rows], float)
    pr = np.array([[r[s]["probes"] for s in SEARCHES] for r in rows], float)
    ratio = it[:, 0] / it[:, 1]
    out = dict(laws=len(rows), outliers=int(sum(r["bisection"]["exists"] for r in rows)),
               same_status=int(sum(r["bisection"]["status"] == r["secant"]["status"] for r in rows)),
               same_existence=int(sum(r["bisection"]["exists"] == r["secant"]["exists"] for r in rows)),
               newton_ratio_median=float(np.median(ratio)), newton_ratio_min=float(ratio.min()),
               newton_ratio_max=float(ratio.max()), newton_total=[int(it[:, 0].sum()), int(it[:, 1].sum())],
               probes_secant=[int(pr[:, 1].min()), float(np.median(pr[:, 1])), int(pr[:, 1].max())],
               probes_bisection=int(pr[:, 0].max()),
               max_diff={q: _diff(rows, q) for q in TOL})
    timed = [r for r in rows if "walls_s" in r["bisection"]]
    if timed:
        med = np.array([[np.median(r[s]["walls_s"]) for s in SEARCHES] for r in timed])
        first = np.array([[r[s]["first_call_s"] for s in SEARCHES] for r in timed])
        out.update(timed_laws=len(timed), wall_compiled_s=med.sum(0).tolist(),
                   wall_ratio=float(med[:, 0].sum() / med[:, 1].sum()),
                   first_call_s=first[0].tolist(), compile_s=(first[0] - med[0]).tolist())
    return out


def accuracy_rows(summ: dict) -> list:
    n = summ["laws"]
    acc = [dict(quantity=f"secant vs bisection search: laws with the same existence decision (of {n}; "
                         f"{summ['outliers']} with an outlier)",
                theory=n, simulation=summ["same_existence"], sim_stderr=None, d=None, seeds=None,
                tolerance="all", agree=bool(summ["same_existence"] == n and summ["same_status"] == n))]
    for q, tol in TOL.items():
        acc.append(dict(quantity=f"secant vs bisection search: max |Δ {q}| over the laws (bisection = reference)",
                        theory=0.0, simulation=summ["max_diff"][q], sim_stderr=None, d=None, seeds=None,
                        tolerance=f"< {tol:g}", agree=bool(summ["max_diff"][q] < tol)))
    return acc


def performance_rows(summ: dict) -> list:
    perf = [dict(what=f"Newton steps of an outlier call, bisection / secant search (median over {summ['laws']} laws)",
                 value=summ["newton_ratio_median"], unit="x", ratio=summ["newton_ratio_median"],
                 note=f"range {summ['newton_ratio_min']:.2f}–{summ['newton_ratio_max']:.2f}; in all "
                      f"{summ['newton_total'][0]} → {summ['newton_total'][1]}"),
            dict(what="edge-search probes, secant search (min / median / max; bisection: 44)",
                 value=summ["probes_secant"][1], unit="probes", ratio=None,
                 note=f"{summ['probes_secant'][0]}–{summ['probes_secant'][2]}")]
    if "wall_ratio" in summ:
        perf.append(dict(what=f"compiled outlier calls on {summ['timed_laws']} PR quadratic finite-n laws, "
                              "bisection / secant wall (sum of per-law medians)",
                         value=summ["wall_ratio"], unit="x", ratio=summ["wall_ratio"],
                         note=f"{summ['wall_compiled_s'][0]:.2f} s → {summ['wall_compiled_s'][1]:.2f} s"))
        for s, c in zip(SEARCHES, summ["compile_s"]):
            perf.append(dict(what=f"compilation of the {s} outlier program (first call − compiled median, first law)",
                             value=c, unit="s", ratio=None, note=None))
    return perf


def figure(rows, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    groups = sorted({r["group"] for r in rows})
    for g in groups:
        rr = [r for r in rows if r["group"] == g]
        ax[0].plot([r["bisection"]["iterations"] for r in rr], [r["secant"]["iterations"] for r in rr], "o", label=g)
        ax[1].semilogy([r["secant"]["probes"] for r in rr],
                       [max(abs(r["secant"]["edge"] - r["bisection"]["edge"]), 1e-16) for r in rr], "o", label=g)
    lim = max(r["bisection"]["iterations"] for r in rows)
    ax[0].plot([0, lim], [0, lim], "k:", lw=0.8)
    ax[0].plot([0, lim], [0, lim / 2], "k--", lw=0.5)
    ax[0].set_xlabel("Newton steps, bisection")
    ax[0].set_ylabel("Newton steps, secant")
    ax[0].legend(fontsize=7)
    ax[1].set_xlabel("edge probes, secant (bisection: 44)")
    ax[1].set_ylabel("|Δ edge| secant − bisection")
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)


def replot(res, outdir):
    figure(res["data"]["rows"], outdir)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S = settings(mode)
    rows = compare(S)
    summ = summary(rows)
    figure(rows, outdir)
    return dict(setting=S, accuracy=accuracy_rows(summ), performance=performance_rows(summ), figure=f"{NAME}.png",
                data=dict(rows=rows, summary=summ))
