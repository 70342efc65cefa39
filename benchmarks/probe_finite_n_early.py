"""Probe (not a runner benchmark; run: PYTHONPATH=. python benchmarks/probe_finite_n_early.py, ~18 min on 2 cores): finite-n δ*_n(t) at t·η = 0.6, 1.2 at matching n for d = 500, 1000, 2000 (the success.json d's),
measured 2026-12-02 (output in docs/thresholds.md): the early-time threshold against the GD success 50% points.
PR quadratic m=4 (CLI setting), η = 0.2, 16384 paths, 2 keys (fold_in(key(7), k), as bench_finite_n)."""
import time
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import dmft
from dmft import activations
from benchmarks.bench_delta_star_trend import problem
from spectral.thresholds import _root_on_grid, margins_from_sweep


def main():
    P = problem(activations.get("quadratic"))
    grid = [1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    times = (3, 6)
    out = {}
    for kk in (0, 1):
        t0 = time.perf_counter()
        traj = dmft.solve_sweep(P, jnp.asarray(grid), lr=0.2, steps=6, paths=16384,
                                key=jax.random.fold_in(jax.random.key(7), kk), save_samples_at=times, throw=False)
        for d in (500, 1000, 2000):
            marg, ev, edge, cos2, notes = margins_from_sweep(P, traj, grid, times, convention="finite-n", d=d,
                                                             outlier_options=dict(max_steps=20))
            roots = [_root_on_grid(np.asarray(grid), marg[:, j])[0] for j in range(len(times))]
            out.setdefault(d, []).append(roots)
            print(kk, d, "roots t·η=0.6,1.2:", np.round(roots, 3), "margins", np.round(marg[:, -1], 3), round(time.perf_counter() - t0), flush=True)
    for d, r in out.items():
        r = np.array(r)
        print(d, "mean", np.round(r.mean(0), 3), "se", np.round(r.std(0, ddof=1) / np.sqrt(2), 3))


if __name__ == "__main__":
    main()
