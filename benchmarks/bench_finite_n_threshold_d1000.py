"""The finite-n threshold δ*_n(t) against GD's δ*_d(t) at d = 1000, both times, with independent keys
(issue #4 item 3; THEORY §2).

Over the eight cells of ``finite_n_threshold``, ``_late``, ``_d250`` and ``_d500`` the theory lies above
GD by +0.17 ± 0.04 (χ² = 11.0 on 7): 0.31 ± 0.07 at d = 250, 0.11 ± 0.05 at 500, 0.09 ± 0.13 at 1000;
a fit a + b·log(d/500) gives b = −0.20 ± 0.10. The d = 1000 point, two cells from 4 keys and 16 GD
seeds, carries the least weight. This benchmark remeasures d = 1000 at t·η = 2.4 and 4.8 from one run
(``run_setting`` with ``times``), with keys independent of the earlier runs (DMFT root 19, GD key 10),
4 keys × 131 072 paths (paths/n ≥ 23) and 24 GD seeds, on δ = 4–5.5 (δ*(t) at d = 1000 was
4.4–5.0 in the earlier runs).

Measured (standard, 2026-12-06, CPU, 5395 s: 627–850 s a key with other jobs running, 560–621 s of GD
per δ): δ*_n = 4.44 ± 0.12 / 4.78 ± 0.07 at t·η = 2.4 / 4.8 against δ*_d = 4.37 ± 0.10 / 4.82 ± 0.09
(0.4 / −0.4 combined s.e.; both agree). The earlier d = 1000 cells (other keys) were 4.57 / 5.01 against
4.44 / 5.04. Over all ten cells of the five benchmarks theory − GD = +0.14 ± 0.04 (χ² = 14.5 on 9):
0.31 ± 0.07 at d = 250, 0.11 ± 0.05 at 500, 0.03 ± 0.07 at 1000 (four cells each at 500 and 1000); a
fit a + b·log(d/500) gives b = −0.20 ± 0.07. The offset shrinks with d (2.7 s.e.) and is consistent
with 0 at d = 1000; docs/thresholds.md.
"""

from __future__ import annotations

import pathlib

from .bench_finite_n_threshold import replot, run_setting, two_times  # noqa: F401  (replot: the runner's redraw)

NAME = "finite_n_threshold_d1000"


def settings(mode: str) -> dict:
    return two_times(mode, dict(grid=[4.0, 4.5, 5.0, 5.5], paths=131_072, keys=4, ds=[1000], seeds=24, key=19, sim_key=10),
                     dict(grid=[4.0, 4.5, 5.0, 5.5, 6.0], paths=524_288, keys=16, seeds=128))


def run(mode: str, outdir: pathlib.Path) -> dict:
    return run_setting(settings(mode), NAME, outdir)
