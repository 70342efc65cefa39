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

from .bench_window_plateau import accuracy_rows, figure, measure, reanalyze, setting  # noqa: F401 (accuracy_rows: test)

NAME = "window_plateau_paths"


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick = mode == "quick"
    S = dict(setting(quick), grid=[3.0, 4.0], paths=1024 if quick else 16384, keys=2 if quick else 4, key=1,
             plateau_change_max=0.005)
    return measure(S, outdir, NAME)


def replot(res, outdir):
    figure(res["setting"], res["data"]["theory"], res["data"]["gd"], outdir, NAME)
