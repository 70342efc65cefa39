"""δ_NN from the stationary DMFT (THEORY §2 "Long time", route (a) of the threshold).

For each δ of a grid: the stationary point of the DMFT (``dmft.stationary_sweep``, started
from a dynamic DMFT run of the same δ — the fixed point GD reaches is the one continued from
its own trajectory), the law of ``(ζ, D)`` of its effective process (``r = prox(b)``), and
the hard-outlier margin of that law (spectral.outliers, with ``level = −ridge``: a negative
eigenvalue of the Hessian including the ridge). ``δ_NN`` is the first sign change of the
margin from ≥ 0 to < 0, bracketed on the grid, refined on a finer grid inside the bracket and
located by linear interpolation; its Monte Carlo uncertainty comes from ``repeats``
independent keys (each key: new paths for the warm-up and the fixed point).

Route (b) — the trend of δ*(t) of the dynamic DMFT — is :func:`spectral.thresholds.delta_star`;
the two are compared in ``benchmarks/bench_two_route.py``.

Each fixed point is solved by Levenberg–Marquardt (vmapped over the grid). With
``fallback_iters > 0``, points LM leaves unaccepted are retried with the damped fixed-point
iteration (damping 0.3) from the same warm start: measured, it converges in cases where LM stalls
on the Monte Carlo residual (silu staircase, δ = 1.5 and 2: 80–91 iterations), but where no
fixed point exists (marginal states) it runs to its limit, ~0.1 s per iteration at 2048 paths —
hence off by default. A fixed point is accepted when the solver
reports convergence, or when it stopped at its
iteration limit with every residual of (S3)–(S5) below ``residual_tol`` (default 1e-3),
the per-sample prox converged and ``λI + Γ ≻ 0``: the equations' coefficients are Monte
Carlo estimates with relative error ~ paths^{-1/2} ≈ 1e-2, so a residual of 1e-3 moves the
fixed point far less than its own sampling error; the acceptance used is recorded. If a
grid point next to the root is not accepted, that repeat gives no root and the result says
so (status "not-converged"), never a number.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import NO_OUTLIER, SUCCESS, SpectralError, message
from .law import law_from_problem
from .outliers import outlier
from .thresholds import _criterion, _root_on_grid, negative_level, padded_grid, require_hard


FALLBACK_DAMPING = 0.3


@dataclasses.dataclass
class StationaryThreshold:
    delta_nn: Optional[float]
    delta_nn_stderr: Optional[float]
    per_repeat: np.ndarray          # (R,) root per key (nan: no accepted bracket)
    bracket: tuple                  # coarse-grid bracket
    status: str                     # "converged" | "not-converged" | "no-bracket"
    message: str
    criterion: str
    coarse: dict                    # grid, margin, eigenvalue, edge, cosine2, accepted, solver status per δ
    fine: list                      # per repeat: the same on the refined grid
    setting: dict
    diagnostics: dict


def _accepted(st, ridge, residual_tol):
    from dmft.stationary import CONVERGED, MAX_ITERS, PROX_BAD_FRACTION, STALLED, STATUS_MESSAGES

    status = np.atleast_1d(np.asarray(st.status))
    res = np.atleast_1d(np.asarray(st.residual))
    pres = np.atleast_1d(np.asarray(st.prox_residual))
    gam = np.asarray(st.gamma).reshape((-1,) + np.asarray(st.gamma).shape[-2:])
    pd = np.linalg.eigvalsh(gam + ridge * np.eye(gam.shape[-1]))[:, 0] > 0
    ok = (status == CONVERGED) | (((status == MAX_ITERS) | (status == STALLED)) & (res < residual_tol)
                                  & (pres <= PROX_BAD_FRACTION) & pd)
    return ok, [STATUS_MESSAGES[int(c)] for c in status]


def margins_at_stationary(problem, grid, *, paths: int, key, warmup, max_iters: int = 200, residual_tol: float = 1e-3,
                          level="auto", fallback_iters: int = 0, pad_to: Optional[int] = None) -> dict:
    """Stationary DMFT at every δ of ``grid`` (one vmapped solve, common random numbers) and
    the hard-outlier margin of its law. Returns a dict of per-δ arrays (nan where the fixed
    point is not accepted or the outlier solve failed) with the solver diagnostics.
    ``pad_to``: run the warm-up and the fixed points at this many δ by repeating the last one
    (solved, not reported), so that grids of different lengths share one compiled program each
    (as :func:`spectral.thresholds.margin_curve`)."""
    import dmft

    grid = np.asarray(grid, float)
    require_hard(problem, "margins_at_stationary")
    hard = problem.teacher.hard_coordinates()
    n = len(grid)
    run = padded_grid(grid, pad_to)
    start = warmup.run_sweep(problem, jnp.asarray(run), key)
    st = dmft.stationary_sweep(problem, jnp.asarray(run), paths=paths, key=key, start=start, max_iters=max_iters)
    st = jax.tree.map(lambda x: x[:n] if getattr(x, "ndim", 0) > 0 else x, st)
    start = jax.tree.map(lambda x: x[:n], start)
    ok, msgs = _accepted(st, float(np.asarray(problem.ridge)), residual_tol)
    per = [jax.tree.map(lambda x: x[i] if getattr(x, "ndim", 0) > 0 else x, st) for i in range(n)]
    solver = ["least-squares"] * len(grid)
    for i in (np.nonzero(~ok)[0] if fallback_iters > 0 else []):
        # Levenberg–Marquardt can stall on the Monte Carlo residual (samples switching prox
        # branches); the damped fixed-point iteration from the same warm start often converges
        alt = dmft.stationary(problem, float(grid[i]), paths=paths, key=key, start=jax.tree.map(lambda x: x[i], start),
                              solver="iterate", damping=FALLBACK_DAMPING, max_iters=int(fallback_iters))
        ok_i, msg_i = _accepted(alt, float(np.asarray(problem.ridge)), 0.0)  # only 'converged' (its residual is a step size)
        solver[i] = f"iterate (damping {FALLBACK_DAMPING}) after least-squares: {msgs[i]}"
        msgs[i] = msg_i[0]
        if ok_i[0]:
            ok[i], per[i] = True, alt
    lv = negative_level(problem, level)
    out = {k: np.full(len(grid), np.nan) for k in ("margin", "eigenvalue", "edge", "cosine2")}
    notes = []
    for i, dv in enumerate(grid):
        if not ok[i]:
            notes.append(f"delta={dv:.4g}: stationary point not accepted ({msgs[i]}; residual {float(per[i].residual):.1e})")
            continue
        smp = per[i].samples
        law = law_from_problem(problem, smp["y"], smp["r"], per[i].second_layer, zeta=smp["z"][:, list(hard)],
                               unbounded=())
        res = outlier(law, float(dv), side="bottom", convention="strict", level=lv, throw=False)
        if int(res.status) not in (SUCCESS, NO_OUTLIER):
            notes.append(f"delta={dv:.4g}: outlier solve failed ({message(res.status)})")
            continue
        out["margin"][i], out["eigenvalue"][i] = float(res.margin), float(res.eigenvalue)
        out["edge"][i], out["cosine2"][i] = float(res.edge), float(res.cosine2)
    st_res = [float(p.residual) for p in per]
    out.update(grid=grid, accepted=ok, solver_status=msgs, solver=solver, residual=st_res,
               iterations=[int(p.iterations) for p in per], train_error=[float(p.train_error) for p in per],
               notes=notes)
    return out


def delta_nn_stationary(problem, *, grid, paths: int, key, warmup, repeats: int = 4, refine: int = 6,
                        max_iters: int = 200, residual_tol: float = 1e-3, level="auto", fallback_iters: int = 0,
                        progress: Optional[Callable[[str], None]] = None) -> StationaryThreshold:
    """δ_NN from the stationary DMFT: coarse grid (key 0) → bracket → ``refine`` points across
    the bracket for each of ``repeats`` independent keys → root per key; mean ± s.e.
    ``warmup``: a :class:`dmft.stationary.Warmup` (dynamic DMFT run that starts each fixed point)."""
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    grid = np.sort(np.asarray(grid, float))
    if grid.size < 2 or np.any(grid <= 0):
        raise SpectralError("grid needs at least two δ values, all > 0.")
    if repeats < 2:
        raise SpectralError("repeats must be >= 2 (the Monte Carlo s.e. of δ_NN comes from independent keys).")
    from dmft.solve import _problem_setting

    keys = [jax.random.fold_in(key, r) for r in range(repeats)]
    # one δ batch for the coarse and the fine sweeps: one compilation of the warm-up and of the
    # fixed-point program (the shorter sweep repeats its last δ)
    kw = dict(paths=paths, warmup=warmup, max_iters=max_iters, residual_tol=residual_tol, level=level,
              fallback_iters=fallback_iters, pad_to=max(len(grid), int(refine)))
    say(f"stationary δ sweep: {len(grid)} points")
    coarse = margins_at_stationary(problem, grid, key=keys[0], **kw)
    root, lo, hi = _root_on_grid(grid, coarse["margin"])
    setting = dict(grid=grid.tolist(), paths=int(paths), repeats=int(repeats), refine=int(refine), max_iters=int(max_iters),
                   residual_tol=float(residual_tol), level=negative_level(problem, level), fallback_iters=int(fallback_iters),
                   warmup=dict(lr=float(warmup.lr), steps=int(warmup.steps), paths=int(warmup.paths)),
                   route="stationary DMFT (THEORY §2 long time) + outlier equation on its law",
                   repeat_keys="fold_in(key, r), r = 0 .. repeats-1 (r = 0: the coarse sweep)",
                   **_problem_setting(problem, key))
    crit = _criterion(problem, level)
    if not np.isfinite(lo):
        m = coarse["margin"]
        hint = ("the margin is ≥ 0 on the whole grid: try larger δ" if np.all(m[np.isfinite(m)] >= 0) and np.isfinite(m).any()
                else "an outlier exists at the smallest δ: try smaller δ" if np.isfinite(m[0]) and m[0] < 0
                else "stationary points near the sign change were not accepted (see coarse.notes)")
        return StationaryThreshold(None, None, np.full(repeats, np.nan), (np.nan, np.nan), "no-bracket",
                                   f"no sign change of the margin on the grid: {hint}.", crit, _jsonable(coarse), [], setting,
                                   dict(wall_s=time.perf_counter() - t0))
    pad = 0.5 * (hi - lo)
    fine_grid = np.linspace(max(lo - pad, 0.5 * lo), hi + pad, refine)
    per = np.full(repeats, np.nan)
    fines = []
    for r, kr in enumerate(keys):
        say(f"refinement {r + 1}/{repeats}: {refine} points in [{fine_grid[0]:.4g}, {fine_grid[-1]:.4g}]")
        f = margins_at_stationary(problem, fine_grid, key=kr, **kw)
        fines.append(_jsonable(f))
        per[r] = _root_on_grid(fine_grid, f["margin"])[0]
    good = np.isfinite(per)
    if good.sum() >= 2 and good.all():
        dnn, se, status = float(per.mean()), float(per.std(ddof=1) / np.sqrt(repeats)), "converged"
        msg = f"δ_NN = {dnn:.4g} ± {se:.2g} (stationary DMFT, {repeats} keys × {paths} paths)"
    else:
        dnn, se, status = None, None, "not-converged"
        msg = (f"{int((~good).sum())} of {repeats} keys gave no root on the refined grid (a fixed point next to the "
               "sign change was not accepted or the margin did not change sign): no δ_NN reported")
    return StationaryThreshold(dnn, se, per, (float(lo), float(hi)), status, msg, crit, _jsonable(coarse), fines, setting,
                               dict(wall_s=time.perf_counter() - t0, coarse_root=float(root)))


def _jsonable(d: dict) -> dict:
    return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}
