"""The DMFT from a seeded hard overlap against GD trajectories (issues #7 and #2).

Why: in bench_design_gd the negative-outlier δ*(t) of the M^0 = 0 trajectory orders activations
differently from GD (designed α = 0.75: lower δ*(t), but GD learns the hard direction less; the
even-part activation: higher δ*(t), GD learns it as well or better). This benchmark asks whether
the DMFT *dynamics*, started like GD from an O(d^{-1/2}) hard overlap, reproduces what GD does
— the escape along the hard direction and the height of the plateau — i.e. whether the
discrepancy is in the spectral criterion or in the DMFT itself. It also exercises the dynamic
DMFT at late times (t·η up to 300), where the block-Cholesky innovations are at rounding level
(docs/dmft.md, "Conditioning at late times").

Setting: the staircase of bench_design_gd (y = z1 + z2² − 1, m = 2, a = (1, ½) frozen, Q0 = I,
pseudo-Huber 1, ridge 0.2, η = 0.5), δ = 3, three activations at unit Gaussian norm: GeLU,
(GeLU + 0.75 r) (the α-design of bench_design_gd) and (GeLU + log cosh).

DMFT: ``dmft.solve`` with the hard row of M^0 = g/√d, g ~ N(0, I_2) (GD's initial overlap law at
Q0 = I, d = 1000; the easy row 0), ``draws`` independent draws of g, each with its own Monte Carlo
key; the prediction for GD's mean over seeds is the mean over draws (its s.e. includes the init
variability, as GD's does). The escape depends on the init direction: the linear dynamics of the
hard row near 0 is a 2×2 system with one fast and one slow mode. GD: ``dmft.simulate`` at d = 1000 from a random init (its hard overlap is O(d^{-1/2})),
8 seeds. Observable: the hard cos ‖M_hard‖/√tr(WᵀW) at every step. The DMFT uses
``chol_jitter=1e-8`` (docs/dmft.md: with the default 1e-13 one of these 600-step solves, the
log-cosh draw 0, lost its field to rounding at step 556).
"""

from __future__ import annotations

import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft.success import hard_cosine

from .bench_design_gd import EVEN, _problem

NAME = "escape_dmft"
CANDIDATES = ("gelu (α=0)", "designed (α=0.75)", EVEN)


def _candidate(name):
    return _problem(name, 0.75 if name.startswith("designed") else 0.0)


def _seeded(problem, eps, hard_row):
    """The problem with M^0's hard row set to ``eps · hard_row`` (the other rows 0)."""
    (h,) = problem.teacher.hard_coordinates()
    M0 = jnp.zeros((problem.k, problem.m)).at[h].set(eps * jnp.asarray(hard_row, float))
    return eqx.tree_at(lambda p: p.init.overlap, problem, M0)


def dmft_summary(cos, solver):
    """Mean ± s.e. over init draws of the final DMFT hard cos, over the draws whose solve finished.
    A draw whose kernels became non-finite (``failed_step`` ≥ 0: at late times the block-Cholesky
    innovations are at rounding level, docs/dmft.md) is excluded and counted, never averaged in."""
    cos = np.asarray(cos, float)
    ok = np.array([d["failed_step"] < 0 for d in solver]) & np.isfinite(cos[:, -1])
    final = cos[ok, -1]
    return dict(dmft_cos_mean=cos[ok].mean(0).tolist() if ok.any() else None,
                dmft_final=float(final.mean()) if ok.any() else None,
                dmft_final_stderr=float(final.std(ddof=1) / np.sqrt(ok.sum())) if ok.sum() >= 2 else None,
                draws_used=int(ok.sum()), draws_failed=[int(d["failed_step"]) for d in solver if d["failed_step"] >= 0])


def accuracy_rows(S, res):
    """Rows from the stored per-draw / per-seed results (recomputable from the JSON)."""
    D, G = S["dmft"], S["gd"]
    acc = []
    for name, v in res.items():
        note = (f"; {len(v['draws_failed'])} of {D['draws']} DMFT draws excluded (non-finite kernels at step "
                f"{', '.join(map(str, v['draws_failed']))})" if v["draws_failed"] else "")
        ok = v["dmft_final_stderr"] is not None
        se = float(np.hypot(v["dmft_final_stderr"], v["gd_final_stderr"])) if ok else None
        acc.append(dict(quantity=f"{name}: hard cos at step {D['steps']} (t·η={D['steps'] * S['lr']:g}), δ={S['delta']:g}: "
                                 f"DMFT from M^0_hard = g/√d (mean over draws of g) vs GD from random init",
                        theory=v["dmft_final"], theory_stderr=v["dmft_final_stderr"], simulation=v["gd_final"],
                        sim_stderr=v["gd_final_stderr"], d=G["d"], seeds=G["seeds"],
                        tolerance="3 combined s.e. (DMFT draws, GD seeds)" + note,
                        agree=bool(ok and abs(v["dmft_final"] - v["gd_final"]) < 3 * se)))
    return acc


def figure(S, res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    D, G = S["dmft"], S["gd"]
    fig, ax = plt.subplots(1, len(res), figsize=(5 * len(res), 4), squeeze=False)
    for j, (name, v) in enumerate(res.items()):
        a = ax[0, j]
        for r, c in enumerate(v["dmft_cos"]):
            a.plot(np.arange(D["steps"] + 1), c, "--", color="C0", lw=0.8, label="DMFT, one init draw" if r == 0 else None)
        if v["draws_failed"]:
            a.text(0.02, 0.02, f"excluded: draws failed at step {v['draws_failed']}", transform=a.transAxes, fontsize=7)
        a.plot(np.arange(D["steps"] + 1), v["dmft_cos_mean"], "-", color="C0", label=f"DMFT mean of {v['draws_used']} draws")
        a.plot(np.arange(G["steps"] + 1), v["gd_cos_mean"], "k-", label=f"GD d={G['d']} (mean of {G['seeds']})")
        a.plot(np.arange(G["steps"] + 1), v["gd_cos_median"], "k:", label="GD median")
        a.set_title(name, fontsize=9)
        a.set_xlabel("step (η = 0.5)")
        a.set_ylabel("hard cos")
        a.legend(fontsize=7)
    fig.suptitle(f"escape along the hard direction: DMFT from a seeded overlap vs GD, δ = {S['delta']:g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick = mode == "quick"
    S = dict(target="y = z1 + z2^2 - 1 (z2 hard)", student="m=2, a=(1, 1/2) frozen, Q0=I", loss="pseudo-Huber 1",
             ridge=0.2, delta=3.0, lr=0.5, candidates=list(CANDIDATES),
             dmft=dict(steps=600, paths=1024, draws=4, key=31, chol_jitter=1e-8,
                       init="hard row of M^0 = g/sqrt(d), g ~ N(0, I_2) per draw (key fold_in(key, 1000 + draw)), easy row 0"),
             gd=dict(d=1000, seeds=8, steps=600, key=32, init="random (rows N(0, Q0/d))"),
             compare="final hard cos: DMFT mean over init draws, GD mean over seeds")
    if quick:
        S["candidates"] = [CANDIDATES[0]]
        S["dmft"].update(steps=120, paths=256, draws=2)
        S["gd"].update(d=300, seeds=4, steps=120)
    D, G = S["dmft"], S["gd"]
    eps = 1.0 / np.sqrt(G["d"])
    res = {}
    for name in S["candidates"]:
        P = _candidate(name)
        hard = tuple(P.teacher.hard_coordinates())
        t0 = time.perf_counter()
        cos = np.zeros((D["draws"], D["steps"] + 1))
        diag = []
        for r in range(D["draws"]):
            g = np.asarray(jax.random.normal(jax.random.fold_in(jax.random.key(D["key"]), 1000 + r), (2,)), float)
            tr = dmft.solve(_seeded(P, eps, g), delta=S["delta"], lr=S["lr"], steps=D["steps"], paths=D["paths"],
                            key=jax.random.fold_in(jax.random.key(D["key"]), r), throw=False,
                            chol_jitter=D["chol_jitter"])
            cos[r] = np.asarray(hard_cosine(tr.overlap, tr.gram, hard))
            diag.append(dict(init_hard_row=g.tolist(), failed_step=int(tr.failed_step), min_schur=float(tr.min_schur),
                             max_unstable_fraction=float(np.max(np.asarray(tr.unstable_fraction)))))
        t_dmft = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = dmft.simulate(P, d=G["d"], delta=S["delta"], lr=S["lr"], steps=G["steps"], seeds=G["seeds"],
                            key=jax.random.key(G["key"]), random_overlap=True)
        gcos = np.asarray(hard_cosine(sim.overlap_seeds, sim.gram_seeds, hard))          # (seeds, steps+1)
        t_gd = time.perf_counter() - t0
        res[name] = dict(dmft_cos=cos.tolist(), **dmft_summary(cos, diag),
                         gd_cos_mean=gcos.mean(0).tolist(), gd_cos_median=np.median(gcos, 0).tolist(),
                         gd_final=float(gcos[:, -1].mean()), gd_final_stderr=float(gcos[:, -1].std(ddof=1) / np.sqrt(G["seeds"])),
                         solver=diag, wall_dmft_s=t_dmft, wall_gd_s=t_gd)
        print(f"   {name}: DMFT final cos {np.round(cos[:, -1], 3).tolist()} (draws), "
              f"GD {res[name]['gd_final']:.3f} ± {res[name]['gd_final_stderr']:.3f}", flush=True)

    acc = accuracy_rows(S, res)
    perf = [dict(what=f"{n}: DMFT {D['draws']} solves × {D['steps']} steps × {D['paths']} paths",
                 value=v["wall_dmft_s"], unit="s", ratio=None, note="incl. compilation") for n, v in res.items()]
    perf += [dict(what=f"{n}: GD d={G['d']} × {G['seeds']} seeds × {G['steps']} steps", value=v["wall_gd_s"], unit="s",
                  ratio=None, note=jax.default_backend()) for n, v in res.items()]

    figure(S, res, outdir)
    return dict(setting=S, accuracy=acc, performance=perf, figure=f"{NAME}.png", diagnostics=res)
