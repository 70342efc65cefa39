"""``window_plateau`` with 4× the DMFT paths on the two δ inside the window (issue #4): is the DMFT's
nonlinear plateau of the hard overlap after escape the one GD reaches?

Why. ``window_plateau`` (4096 paths, 3 keys) found the DMFT's final hard cos Monte Carlo-limited: key
spread 0.24–0.43 at δ = 4, so its rows agreed with GD only through that spread. ``window_outlier_seeds``
showed where such error comes from: the law of (ζ, D) behind the outlier is sampled by the paths
(16 384 paths = 8192 distinct antithetic pairs; key sd of the outlier 0.015 there, ∝ paths^-1/2), and
the escape and the plateau follow that outlier.

What. The same setting and code as ``window_plateau`` (``bench_window_plateau.measure``): DMFT from
M⁰_hard = ε·(1, −1)/√2, ``dmft_steps`` steps, ``paths`` paths, ``keys`` keys, δ = 3 and 4 (vmapped);
GD from random initialization (float32, ``gd_steps`` steps, ``seeds`` new seeds) at d = 1000 and 2000.
Rows as in ``window_plateau`` (DMFT final hard cos vs GD seed mean, 3 combined s.e.), except that a δ where
a DMFT key's hard cos still changes by more than ``plateau_change_max`` over the last quarter is labelled
"NOT at its plateau" and not counted as agreement.
"""

from __future__ import annotations

import pathlib

from .bench_window_bounded import A, ACT, RIDGE
from .bench_window_plateau import PLATEAU_MIN, accuracy_rows, figure, measure  # noqa: F401 (accuracy_rows: test)

NAME = "window_plateau_paths"


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick = mode == "quick"
    S = dict(act=ACT, a=list(A), ridge=RIDGE, lr=0.5, eps=0.05, grid=[3.0, 4.0],
             dmft_steps=60 if quick else 300, paths=1024 if quick else 16384, keys=2 if quick else 4,
             ds=[200, 400] if quick else [1000, 2000], seeds=3 if quick else 6, gd_steps=300 if quick else 1600, key=1,
             plateau_min=PLATEAU_MIN, plateau_change_max=0.005, init_dmft="M0_hard = eps (1, -1)/sqrt(2), M0_easy = 0, Q0 = I",
             init_gd="random (rows N(0, Q0/d) in all directions: hard overlap O(d^-1/2)), float32",
             keys_note="DMFT: fold_in(key(key), 200 + k); GD: fold_in(key(key), d) (success_curve, fold_in per δ)")
    return measure(S, outdir, NAME)


def replot(res, outdir):
    figure(res["setting"], res["data"]["theory"], res["data"]["gd"], outdir, NAME)
