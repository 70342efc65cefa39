"""Issue #2's cost comparison at its own horizon on the CPU: the DMFT curve to T = 200 (m = 2,
10^5 paths in all) against ``dmft.simulate`` at d = 4000 reaching the same error bar on the train
error — ``bench_dmft_cost``'s measurement (same problem, rules and error bars) at that one point.

Standard (CPU) run: the DMFT error bar is the spread over ``keys`` = 5 independent solves of
20 000 paths each (10^5 paths in all); one solve's run time is measured after compilation; GD runs
16 seeds at d = 4000 (4 until session 23: their spread was low by chance, see bench_dmft_cost). The ratio does not depend on the DMFT's path count where its cost ∝ paths and
its variance ∝ 1/paths (the rule adds GD seeds or DMFT paths, whichever side is less precise), so
20 000-path solves stand in for the issue's 10^5 paths at a fifth of the cost. ``bench_dmft_cost`` has the T = 25–100 trend on the
CPU and the 10^5-path, T = 200 point in ``--full`` (GPU). Quick: T = 50, d = 1000, small sizes.
"""

from __future__ import annotations

import pathlib

from .bench_dmft_cost import measure

NAME = "dmft_cost_t200"


def run(mode: str, outdir: pathlib.Path) -> dict:
    if mode == "quick":
        S = dict(delta=3.0, lr=0.1, paths=5_000, Ts=[50], ds=[1000], seeds=8, keys=3)
    else:
        S = dict(delta=3.0, lr=0.1, paths=20_000, Ts=[200], ds=[4000], seeds=16, keys=5)
    return measure(S, outdir, NAME)
