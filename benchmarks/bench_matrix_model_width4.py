"""The random-matrix model of the DMFT law against GD in the width-4 family: GD's hard weight below its edge,
including where the law has no outlier (issue #4 item 3; THEORY §2; docs/thresholds.md).

Why. In the width-4 phase-retrieval setting of ``finite_n_threshold`` (quadratic student m = 4, a = 1/4 frozen,
η = 0.2, t·η = 2.4) GD's seeds carry hard weight below their constrained edge at δ where no DMFT key has an
outlier (0.18 ± 0.03 at d = 500, 0.04 ± 0.01 at d = 1000, δ = 3.5), and their weight crossing 0.25 lies below
the summed-cosine theory's (``finite_n_branches``). "A theory of GD's finite-d edge weight" was left open.
``spectral.matrix_model`` draws the law's own random-matrix model at (δ, d): if its weight matches GD's, the
edge weight is a finite-d property of the spectrum of the law, and the model predicts it.

- theory side: ``dmft.solve_sweep`` with ``finite_n_threshold``'s problem, grid, sizes and DMFT keys
  (``fold_in(key(13), k)``, k < ``keys``, 131 072 paths: the laws its thresholds came from); ``draws_per_key``
  draws of ``spectral.matrix_model`` per (δ, d, key), dense (d·m = 2000 / 4000), k = 6 as for GD.
- simulation side: ``finite_n_threshold``'s committed GD seeds (16 per (δ, d); hard weight below the constrained
  edge), read, not rerun.
- rows per (d, δ): the model's mean hard weight below the edge against GD's (3 combined s.e.; the model's
  s.e. over all draws); per d: where the mean weight crosses 0.25 (GD's δ*_d criterion), model vs GD
  (reported with the grid's linear interpolation, no s.e.: informational).
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np

from .bench_matrix_model import run_model

NAME = "matrix_model_width4"
HERE = pathlib.Path(__file__).resolve().parent
LEVEL = 0.25


def settings(mode: str) -> dict:
    src = HERE / "results" / ("quick" if mode == "quick" else "") / "finite_n_threshold.json"
    G = json.loads(src.read_text())["setting"]
    S = dict(source=str(src.relative_to(HERE.parent)), lr=G["lr"], steps=G["steps"], t=G["steps"], grid=G["grid"],
             ds=G["ds"], dmft_key=G["key"], keys=2, paths=G["paths"], draws_per_key=8, draws_per_key_at={},
             mm_key=45, mm_method="dense", k=G["k"], cut=LEVEL, problem=G["problem"],
             model="H = (1/n) Σ x_i x_iᵀ ⊗ D_i, n = round(δ d), (ζ_i, D_i) drawn without replacement from the DMFT paths "
                   "at t, x_i = (ζ_i, g_i) (spectral.matrix_model)",
             success="hard weight of the bottom k eigenvectors below the constrained edge (GD's criterion); δ*_d = "
                     f"where the mean weight crosses {LEVEL}")
    if mode == "quick":
        S.update(keys=1, draws_per_key=3)
    return S


def problem():
    from dmft import activations

    from .bench_finite_n import problem as p
    return p(activations.get("quadratic"))


def _crossing(grid, w, level=LEVEL):
    for i in range(1, len(grid)):
        if w[i - 1] < level <= w[i]:
            return float(grid[i - 1] + (grid[i] - grid[i - 1]) * (level - w[i - 1]) / (w[i] - w[i - 1]))
    return float("nan")


def analysis(data, S) -> dict:
    from .bench_finite_n import _row

    gd = json.loads((HERE.parent / S["source"]).read_text())["data"]["simulation"]["hard_weight_below_edge"]
    tag = "PR quadratic m=4, a=1/4, η=0.2, t·η=2.4"
    rows, groups = [], []
    for j, d in enumerate(S["ds"]):
        Wm = np.asarray(data["model"][str(d)]["weight"], float)          # (grid, draws)
        Wg = np.asarray(gd[j], float)                                    # (grid, seeds)
        mw, mse = Wm.mean(1), Wm.std(1, ddof=1) / math.sqrt(Wm.shape[1])
        gw, gse = Wg.mean(1), Wg.std(1, ddof=1) / math.sqrt(Wg.shape[1])
        for i, dv in enumerate(S["grid"]):
            rows.append(_row(f"{tag}, d={d}, δ={dv:g}: mean hard weight below the constrained edge, random-matrix model "
                             f"of the DMFT law ({Wm.shape[1]} draws) vs GD", mw[i], mse[i], gw[i], gse[i], d, Wg.shape[1]))
        cm, cg = _crossing(S["grid"], mw), _crossing(S["grid"], gw)
        rows.append(dict(quantity=f"{tag}, d={d}: δ where the mean weight crosses {LEVEL} (GD's δ*_d), model vs GD "
                                  "(grid interpolation, informational)", theory=cm, simulation=cg, d=d,
                         seeds=int(Wg.shape[1]), tolerance="informational", agree=None))
        groups.append(dict(d=d, mean_weight=mw.tolist(), mean_weight_se=mse.tolist(), gd_mean_weight=gw.tolist(),
                           gd_mean_weight_se=gse.tolist(), crossing=cm, gd_crossing=cg))
    return dict(rows=rows, summary=dict(groups=groups))


def run(mode: str, outdir: pathlib.Path) -> dict:
    return run_model(settings(mode), problem(), analysis, replot, NAME, outdir)


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, sm = res["setting"], res["data"]["summary"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, g in enumerate(sm["groups"]):
        ax.errorbar(S["grid"], g["mean_weight"], g["mean_weight_se"], fmt="s--", mfc="none", color=f"C{i}",
                    label=f"model d={g['d']}")
        ax.errorbar(S["grid"], g["gd_mean_weight"], g["gd_mean_weight_se"], fmt="o-", color=f"C{i}", label=f"GD d={g['d']}")
    ax.axhline(LEVEL, color="k", lw=0.5)
    ax.set_xlabel("δ")
    ax.set_ylabel("mean hard weight below the constrained edge")
    ax.set_title("PR quadratic m=4 (t·η=2.4): random-matrix model of the DMFT law vs GD", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
