"""Feature-learning thresholds from the DMFT state: δ*(t) and δ_NN (THEORY §2).

``δ*(t)`` is the smallest δ for which, with the DMFT law of ``(ζ, D)`` at time ``t`` *for
that δ*, the Hessian has an outlier below the bulk whose eigenvector correlates with the
hard subspace. Each δ needs its own DMFT: the DMFT runs ``vmap``ped over a δ grid with
common random numbers (:func:`dmft.solve_sweep`), the outlier margin

    margin(δ, t) = λ_min( A(λ_edge) ),    A(λ) = E[ζ² D (I + S(λ) D/δ)^{-1}] − λ I

(negative ⇔ an outlier exists below the left edge, since every eigenvalue of ``A``
decreases in λ) is computed per (δ, t), the sign change is bracketed on the grid, refined
on a finer grid inside the bracket, and the root is located by linear interpolation of the
margin. The Monte Carlo uncertainty comes from ``repeats`` independent keys.

``δ_NN = lim_{t→∞} δ*(t)`` is reported from the trend of δ*(t) only when the first phase has
converged (train error and δ*(t) stationary over the last part of the horizon); otherwise
the result says so and ``delta_nn`` is None. The other route — the stationary DMFT of THEORY
§2 "Long time" with the outlier equation on its law — is
:func:`spectral.stationary_threshold.delta_nn_stationary`; ``benchmarks/bench_two_route.py``
compares the two. (For phase retrieval with square loss the stationary DMFT finds no fixed
point near the GD state, consistent with the measured marginal first phase; docs/thresholds.md.)

Criterion (``level``): by default an outlier counts only if it is a *negative* eigenvalue of
the Hessian including the ridge, i.e. it lies below ``min(bulk edge, −ridge)`` (THEORY §2:
"a negative outlier ... below the bulk"); ``level="edge"`` counts any outlier that has
separated from the bulk. The two differ only when the bulk edge of ``H + ridge·I`` is
positive (a strict minimum); the result records which was used (``setting["criterion"]``).

Unbounded ``D`` (square loss on ``y = z²``): the strict limit has no left edge, hence no
outlier and no finite δ*; the finite-n convention (law of ``D`` truncated at its ``1 − 1/n``
quantile, ``n = δ d``) gives a d-dependent threshold. Every result records the convention.
The truncation acts on the ``paths`` Monte Carlo samples: it removes ``paths/n`` of them, none when
``paths < n``, so the finite-n threshold at d is resolved only with ``paths ≫ n``.
:func:`delta_star` reports ``paths/n`` at each root where the law is unbounded below and says so in
its message when it is below ``MIN_PATHS_PER_N`` (measured: ``benchmarks/bench_finite_n_threshold``).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import warnings
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import NO_OUTLIER, SUCCESS, SpectralError, message
from .law import BlockLaw, law_from_dmft
from .outliers import outlier


@dataclasses.dataclass
class MarginCurve:
    deltas: np.ndarray  # (D,)
    times: tuple  # (T,)
    margin: np.ndarray  # (D, T)
    eigenvalue: np.ndarray  # (D, T) outlier location (nan where none)
    edge: np.ndarray  # (D, T) left edge used
    cosine2: np.ndarray  # (D, T)
    train_error: np.ndarray  # (D, steps+1)
    test_error: np.ndarray  # (D, steps+1)
    convention: str
    notes: list
    # (D,) max over steps of the fraction of Monte Carlo paths whose local GD step η·λ_max(D)/δ > 2
    # (dmft.solve's ``unstable_fraction``): > 0 means the fixed-η dynamics diverges on rare samples at that δ
    unstable_fraction: Optional[np.ndarray] = None
    # (D, T) whether the untruncated DMFT law of D is unbounded below (the finite-n truncation then
    # sets the edge; :data:`MIN_PATHS_PER_N`)
    unbounded_bottom: Optional[np.ndarray] = None
    # with ``min_cosine2 = c``: ``margin`` is :func:`cosine_cut_margin` (an outlier whose hard cos² ≥ c) and the
    # outlier's own margin is kept here
    min_cosine2: Optional[float] = None
    outlier_margin: Optional[np.ndarray] = None
    # (D,) first step at which GD diverges (``dmft.solve.divergence_step``; −1: never): margins from then on are nan
    diverged_step: Optional[np.ndarray] = None


def _slice(traj, i):
    return jax.tree.map(lambda x: x[i] if getattr(x, "ndim", 0) > 0 else x, traj)


def truncate_fixed_shape(law: BlockLaw, n: int) -> BlockLaw:
    """Finite-n convention (THEORY §2) with the sample count unchanged, so that repeated
    solves do not recompile: samples whose smallest eigenvalue of ``D`` lies below the
    weighted ``1/n`` quantile get weight 0 (their rows are replaced by a kept row so that no
    singular ``I + S D/δ`` is ever formed), the rest are renormalized. Same law as
    :func:`spectral.law.truncate`."""
    Dn = np.asarray(law.D)
    e = np.linalg.eigvalsh(Dn)[:, 0]
    w = np.asarray(law.weights)
    order = np.argsort(e)
    cw = np.cumsum(w[order])
    q = e[order][min(np.searchsorted(cw, 1.0 / n), len(cw) - 1)]
    keep = e >= q
    ref = int(np.argmax(keep))
    D2 = np.where(keep[:, None, None], Dn, Dn[ref])
    w2 = w * keep
    w2 = w2 / w2.sum()
    zeta = None if law.zeta is None else jnp.asarray(np.where(keep[:, None], np.asarray(law.zeta), np.asarray(law.zeta)[ref]))
    return BlockLaw(D=jnp.asarray(D2), weights=jnp.asarray(w2), zeta=zeta,
                    unbounded=tuple(s for s in law.unbounded if s != "bottom"),
                    source=f"{law.source}; truncated at 1-1/n quantile (bottom), n={n}, {int((~keep).sum())} samples zero-weighted")


def _law_at(problem, traj_i, t, delta, convention, d):
    """(law under the convention, whether the untruncated law is unbounded below)."""
    law = law_from_dmft(problem, traj_i, t)
    unbounded_below = "bottom" in law.unbounded
    if convention == "finite-n":
        if d is None:
            raise SpectralError("convention='finite-n' needs the dimension d (n = delta*d samples); pass d=...")
        law = truncate_fixed_shape(law, int(round(delta * d)))
    return law, unbounded_below


def outlier_solver_defaults() -> dict:
    """The solver options every outlier solve of :func:`delta_star` uses (those of
    :func:`spectral.outlier`, read from its signature: search, bisections, tolerances, probe rules), for
    the provenance of a result."""
    skip = ("side", "convention", "n", "level", "throw")
    return {k: v.default for k, v in inspect.signature(outlier).parameters.items()
            if v.default is not inspect.Parameter.empty and k not in skip}


def negative_level(problem, level="auto"):
    """The level an outlier must lie below to count (THEORY §2: a *negative* outlier of the
    Hessian, whose W-block is ``H_data + ridge·I``): ``"auto"`` → ``−ridge``; ``"edge"`` →
    None (any outlier below the bulk edge, the separation criterion); or a float."""
    if level == "auto":
        return 0.0 - float(np.asarray(problem.ridge))      # 0.0, not -0.0, for ridge 0 (it is printed)
    if level == "edge" or level is None:
        return None
    return float(level)


def margins_from_sweep(problem, traj, deltas, times, *, convention="finite-n", d=None, side="bottom", level="auto",
                       outlier_options=None):
    """Outlier margin, location, edge and cos² at each (δ, t) of a DMFT δ sweep
    (``dmft.solve_sweep(..., save_samples_at=times)``), for one convention / dimension.
    A failed outlier solve (edge not found, no convergence) or a sweep point whose DMFT
    became non-finite by time t leaves nan and a note. ``level``: see :func:`negative_level`
    (default: a negative eigenvalue of the Hessian including the ridge). ``outlier_options``:
    keyword arguments for :func:`spectral.outlier` (e.g. ``max_steps=20``: every real solve stops
    after 20 Newton steps; the edge-bisection probes already do by default, ``probe_steps``).
    (One solve per (δ, t): a vmapped batch of the same solves measured 2× slower on the
    2-core CPU — the batched while-loops run to the slowest member.)"""
    return _margins_from_sweep(problem, traj, deltas, times, convention=convention, d=d, side=side, level=level,
                               outlier_options=outlier_options)[:5]


def _margins_from_sweep(problem, traj, deltas, times, *, convention, d, side, level, outlier_options=None):
    """:func:`margins_from_sweep` plus (D, T) flags: the untruncated law is unbounded below, and (D,) the step at
    which each δ's GD diverges (−1: never)."""
    D, T = len(deltas), len(times)
    margin, ev, edge, cos2 = (np.full((D, T), np.nan) for _ in range(4))
    unb = np.zeros((D, T), bool)
    notes = []
    failed = np.asarray(traj.failed_step).reshape(-1) if getattr(traj, "failed_step", None) is not None else None
    from dmft.solve import DIVERGENCE_FACTOR, divergence_step

    diverged = divergence_step(np.asarray(traj.train_error)[:D])
    for i, dv in enumerate(np.asarray(deltas, float)):
        tri = _slice(traj, i)
        for j, t in enumerate(times):
            if failed is not None and 0 <= failed[i] <= t:
                notes.append(f"delta={dv:.4g}, t={t}: the DMFT became non-finite at step {int(failed[i])}; margin left nan")
                continue
            if 0 <= diverged[i] <= t:
                # a law of D from a blown-up state looks unbounded; its margin (±inf) is not a threshold
                # (session 50 audit: lr = 40 gave train error 1e21 and the hint "D unbounded, use finite-n")
                notes.append(f"delta={dv:.4g}, t={t}: GD diverges (train error above {DIVERGENCE_FACTOR:g} × its initial "
                             f"value from step {int(diverged[i])}: the step lr is above 2/λ_max); margin left nan")
                continue
            law, unb[i, j] = _law_at(problem, tri, t, dv, convention, d)
            if side in law.unbounded:
                notes.append(f"delta={dv:.4g}, t={t}: support unbounded on the {side} (strict limit): no edge, no outlier")
                margin[i, j] = np.inf
                continue
            res = outlier(law, float(dv), side=side, convention="strict", level=negative_level(problem, level) if side == "bottom" else None, throw=False,
                          **(outlier_options or {}))
            if int(res.status) not in (SUCCESS, NO_OUTLIER):
                notes.append(f"delta={dv:.4g}, t={t}: outlier solve failed ({message(res.status)}); margin left nan")
                continue
            margin[i, j] = float(res.margin)
            ev[i, j] = float(res.eigenvalue)
            edge[i, j] = float(res.edge)
            cos2[i, j] = float(res.cosine2)
    return margin, ev, edge, cos2, notes, unb, diverged


def cosine_cut_margin(margin, cosine2, c: float):
    """Margin of the criterion "an outlier whose squared cosine with the hard subspace is ≥ c": ``c − cos²``
    where there is an outlier (margin < 0), ``c + margin`` (> 0) where there is none. Continuous where the
    outlier appears (cos² = 0 there), negative exactly where cos² > c, so its sign change on a δ grid is where
    cos² reaches c. That is what a finite-d criterion "hard weight of the bottom eigenvectors > c" measures: for
    a width-1 student the cosine grows slowly from 0 at δ* (it reaches 0.25 0.8–1.3 above δ*), and GD's weight
    > 0.25 is met 0.6–1.1 above it (``benchmarks/bench_success_law_width1.py``). nan stays nan."""
    if not 0.0 < float(c) < 1.0:
        raise SpectralError(f"min_cosine2 must lie in (0, 1) (got {c!r}): it is a squared cosine, e.g. 0.25.")
    m = np.asarray(margin, float)
    c2 = np.nan_to_num(np.asarray(cosine2, float), nan=0.0)
    return np.where(m < 0, c - c2, c + m)


def padded_grid(grid, pad_to: Optional[int]):
    """``grid`` extended to ``pad_to`` points by repeating its last value (the extra points are solved, not
    reported), so sweeps of different lengths share one compiled program."""
    grid = np.asarray(grid, float)
    n = len(grid)
    return grid if pad_to is None or pad_to <= n else np.concatenate([grid, np.full(pad_to - n, grid[-1])])


def require_hard(problem, where: str):
    """The outlier criterion needs hard teacher coordinates: checked before any DMFT solve (a user audit saw the
    whole sweep run, then an internal 'outlier needs the hard coordinates' message)."""
    if not tuple(problem.teacher.hard_coordinates()):
        raise SpectralError(f"{where}: the teacher has no hard coordinates (no direction the first phase leaves "
                            "unlearned: declare Teacher(hard=(...)) or use a link that is even in some coordinate), so "
                            "there is no hard-direction outlier and no threshold.")


def margin_curve(problem, deltas, *, lr, steps: int, times, paths: int, key, convention="finite-n", d=None,
                 side="bottom", level="auto", pad_to: Optional[int] = None,
                 min_cosine2: Optional[float] = None, chol_jitter: Optional[float] = None) -> MarginCurve:
    """DMFT δ sweep (one compilation, common random numbers) and the outlier margin at each
    requested time. ``convention``: "strict" or "finite-n" (needs ``d``). ``pad_to``: run the
    sweep at this many δ by repeating the last one (the extra points are solved but not
    reported), so that sweeps of different lengths share one compiled DMFT program; each δ's
    trajectory does not depend on the batch (measured bit-identical). ``min_cosine2 = c``: the margin is that
    of an outlier whose hard cos² ≥ c (:func:`cosine_cut_margin`). ``chol_jitter``: the DMFT's relative
    Cholesky jitter (default ``dmft.solve.CHOL_JITTER`` = 1e-13); ``threshold_gradient(route="dynamic")`` runs
    at 1e-8, and the same key then gives the same δ*(t) only at the same jitter (session 50 audit, staircase
    t = 20, 2048 paths: root 1.24223 at 1e-13, 1.24118 at 1e-8 = the dynamic route's 1.24118)."""
    import dmft

    if min_cosine2 is not None:
        cosine_cut_margin(0.0, 0.0, min_cosine2)      # validates before the sweep

    if convention not in ("strict", "finite-n"):
        raise SpectralError(f"convention must be 'strict' or 'finite-n'; got {convention!r}.")
    require_hard(problem, "margin_curve")
    times = tuple(int(t) for t in times)
    if any(t < 0 or t > int(steps) for t in times):
        raise SpectralError(f"times={list(times)}: each time must lie in 0..steps={int(steps)} (GD steps of the run).")
    deltas = np.asarray(deltas, dtype=float)
    n = len(deltas)
    run = padded_grid(deltas, pad_to)
    traj = dmft.solve_sweep(problem, jnp.asarray(run), lr=lr, steps=steps, paths=paths, key=key,
                            save_samples_at=times, chol_jitter=chol_jitter)
    margin, ev, edge, cos2, notes, unb, diverged = _margins_from_sweep(problem, traj, deltas, times, convention=convention, d=d,
                                                             side=side, level=level)
    crit = margin if min_cosine2 is None else cosine_cut_margin(margin, cos2, min_cosine2)
    return MarginCurve(deltas=deltas, times=times, margin=crit, eigenvalue=ev, edge=edge, cosine2=cos2,
                       train_error=np.asarray(traj.train_error)[:n], test_error=np.asarray(traj.test_error)[:n],
                       convention=convention, notes=notes,
                       unstable_fraction=np.asarray(jnp.max(traj.unstable_fraction, axis=-1))[:n], unbounded_bottom=unb,
                       min_cosine2=min_cosine2, outlier_margin=margin, diverged_step=diverged)


def _criterion(problem, level, min_cosine2=None):
    lv = negative_level(problem, level)
    base = ("outlier below the bulk edge (separation; negativity not required)" if lv is None else
            f"outlier below min(bulk edge, {lv:g}) (a negative eigenvalue of the Hessian incl. ridge {float(np.asarray(problem.ridge)):g})"
            if level == "auto" else f"outlier below min(bulk edge, {lv:g})")
    return base if min_cosine2 is None else f"{base} whose squared cosine with the hard subspace is >= {min_cosine2:g}"


def _crossing(deltas, m, i):
    """(root, lo, hi) of the sign change of ``m`` between grid points i − 1 and i (linear interpolation)."""
    lo, hi = deltas[i - 1], deltas[i]
    return float(lo + (hi - lo) * m[i - 1] / (m[i - 1] - m[i])), float(lo), float(hi)


def _root_on_grid(deltas, margin):
    """First sign change from margin ≥ 0 (no outlier) to < 0 (outlier); linear interpolation.
    Returns (root, lo, hi) or (nan, nan, nan). Non-finite margins are gaps, not crossings: a negative
    margin after a gap gives the bracket from the last finite margin before it (root nan) if that one is
    ≥ 0, no crossing if it is < 0 (the outlier existed already), and the bracket from the grid's start if
    there is none (session 50 audit: [+, nan, −] bracketed only [δ₁, δ₂], and [−, nan, −] reported a
    bracket where the outlier exists at the smallest δ)."""
    m = np.asarray(margin, float)
    last = None                                  # index of the last finite margin
    for i in range(len(deltas)):
        if not np.isfinite(m[i]):
            continue
        if m[i] < 0:
            if last is None:
                if i > 0:                        # only gaps before: the sign change is somewhere below δ_i
                    return float("nan"), float(deltas[0]), float(deltas[i])
            elif m[last] >= 0:
                if last == i - 1:
                    return _crossing(deltas, m, i)
                return float("nan"), float(deltas[last]), float(deltas[i])
        last = i
    return float("nan"), float("nan"), float("nan")


def _upper_root_on_grid(deltas, margin):
    """First sign change back from margin < 0 (outlier) to ≥ 0 (none) along the grid: the negative
    outlier disappears again at larger δ, so it exists in a *window* of δ (measured:
    benchmarks/bench_window_bounded.py). Linear interpolation; (root, lo, hi) or (nan, nan, nan).
    Non-finite margins are not crossings."""
    m = np.asarray(margin, float)
    for i in range(1, len(deltas)):
        if np.isfinite(m[i - 1]) and np.isfinite(m[i]) and m[i - 1] < 0 <= m[i]:
            return _crossing(deltas, m, i)
    return float("nan"), float("nan"), float("nan")


def _window_note(upper_last, t_last) -> str:
    """Message part for the upper crossing ``(root, lo, hi)`` at the last time (coarse grid, key 0); empty
    when there is none."""
    up, lo, hi = upper_last
    if not np.isfinite(up):
        return ""
    return (f"; the outlier disappears again above δ ≈ {up:.3g} (t={t_last}, coarse grid, key 0, bracket [{lo:.3g}, "
            f"{hi:.3g}]): it exists only in a window of δ, so the hard direction is not predicted learnable for every "
            "δ above the lower threshold — refine that end with a grid around it (diagnostics: window_upper)")


@dataclasses.dataclass
class DeltaStarResult:
    times: tuple
    delta_star: np.ndarray  # (T,) mean over repeats (nan where not bracketed)
    delta_star_stderr: np.ndarray  # (T,)
    per_repeat: np.ndarray  # (R, T)
    bracket: np.ndarray  # (T, 2) coarse-grid bracket
    delta_nn: Optional[float]
    delta_nn_stderr: Optional[float]
    status: str  # "converged" | "not-converged" | "no-bracket"
    message: str
    convention: str
    coarse: MarginCurve
    setting: dict
    diagnostics: dict


MIN_PATHS_PER_N = 20   # Monte Carlo samples per 1/n of tail mass for a resolved finite-n threshold: at paths/n = 3–9
# the truncated law's threshold was biased low by 0.3–0.6 (d = 500 / 1000); at paths/n ≥ 20 it agreed with GD
# (benchmarks/bench_finite_n_threshold*, docs/thresholds.md)
OSCILLATION_ALTERNATION = 0.8   # fraction of sign changes of successive train-error increments
OSCILLATION_AMPLITUDE = 1e-3    # mean |e_t − (e_{t−1} + e_{t+1})/2| relative to the train error


def period_two_oscillation(train_error, window: int = None):
    """Detect a period-2 (edge-of-stability) oscillation at the end of train-error curves.

    ``train_error`` (D, steps+1). Over the last quarter of the steps (at least 8), the increments
    ``Δ_t = e_{t+1} − e_t`` must alternate in sign at ≥ ``OSCILLATION_ALTERNATION`` of the steps and
    the mean second difference ``|e_t − (e_{t−1}+e_{t+1})/2|`` must exceed ``OSCILLATION_AMPLITUDE``
    of the train error. Returns (flags (D,) bool, alternation (D,), relative amplitude (D,)).

    Measured (GeLU staircase, Huber, ridge 0.2, 2048 paths, 100–200 steps): at η = 1, δ = 2 the
    alternation is 1.0 and the amplitude 4.5e-3 (finite-d GD oscillates too); at η = 0.5 and 0.8 the
    alternation is ≤ 0.26 and the amplitude ≤ 7e-5 (Monte Carlo wiggle)."""
    e = np.atleast_2d(np.asarray(train_error, float))
    w = int(window or max(8, (e.shape[1] - 1) // 4))
    tail = e[:, -(w + 1):]
    inc = np.diff(tail, axis=1)
    alt = np.mean(np.sign(inc[:, 1:]) != np.sign(inc[:, :-1]), axis=1) if inc.shape[1] > 1 else np.zeros(len(e))
    curv = np.abs(tail[:, 1:-1] - 0.5 * (tail[:, :-2] + tail[:, 2:])).mean(axis=1) if tail.shape[1] > 2 else np.zeros(len(e))
    amp = curv / np.maximum(np.abs(tail.mean(axis=1)), 1e-12)
    flags = (alt >= OSCILLATION_ALTERNATION) & (amp > OSCILLATION_AMPLITUDE) & np.all(np.isfinite(tail), axis=1)
    return flags, alt, amp


def _cut(min_cosine2):
    """margin_curve keyword for the criterion (absent by default: fakes of margin_curve in tests need not take it)."""
    return {} if min_cosine2 is None else dict(min_cosine2=min_cosine2)


def refine_grid(brackets, refine: int) -> np.ndarray:
    """δ points of ``delta_star``'s refinement sweeps from the coarse brackets ``[(lo, hi)]`` (one per time):
    each bracket widened by half its width on each side (so independent keys still bracket their roots;
    never below lo/2), overlapping intervals merged, and ``refine`` points shared among the merged intervals:
    both ends of each, then one at a time to the interval whose spacing is widest (more than ``refine`` only
    when the brackets of different times are disjoint and ``refine`` < 2 per interval). With one bracket (or the same
    one at every time) this is the grid used before session 44, ``linspace(lo − w/2, hi + w/2, refine)``.
    Then one linspace spanned the hull of every time's bracket: where the brackets of different times lay far
    apart its spacing could exceed the coarse grid's, and a root was interpolated across several brackets
    (found by a user audit: δ*(t) = 10.37 reported for the bracket [4, 9])."""
    iv = sorted((max(a - 0.5 * (b - a), 0.5 * a), b + 0.5 * (b - a)) for a, b in np.asarray(brackets, float))
    merged = []
    for a, b in iv:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    lengths = np.array([b - a for a, b in merged])
    counts = np.full(len(merged), 2)         # both ends of every interval, then the rest where spacing is widest
    while counts.sum() < refine:
        counts[np.argmax(lengths / (counts - 1))] += 1
    return np.unique(np.concatenate([np.linspace(a, b, c) for (a, b), c in zip(merged, counts)]))


def delta_star(problem, *, grid, lr, steps: int, times, paths: int, key, convention="finite-n", d=None,
               refine: int = 6, repeats: int = 2, stationarity_tol: float = 0.02, level="auto",
               progress: Optional[Callable[[str], None]] = None, min_cosine2: Optional[float] = None,
               chol_jitter: Optional[float] = None) -> DeltaStarResult:
    """δ*(t) at each of ``times`` and δ_NN from its trend.

    1. coarse sweep over ``grid`` (key 0 of ``repeats``) -> margin curves and brackets;
    2. per repeat r (independent keys), a fine sweep of ``refine`` points spanning the
       union of brackets -> linear-interpolated roots per t;
    3. δ*(t) = mean over repeats, s.e. = sd/√R; δ_NN = δ*(t_max) if both the train error
       and δ*(t) are stationary over the last half of the horizon (relative change <
       ``stationarity_tol``), else ``None`` with status "not-converged".

    ``min_cosine2 = c``: the threshold of an outlier whose squared cosine with the hard subspace is ≥ c
    (:func:`cosine_cut_margin`), the quantity a finite-d criterion "hard weight > c" measures.

    With ``convention="finite-n"`` the diagnostics hold ``paths_per_n`` (paths/(δ*(t)·d) at each time
    whose law of D is unbounded below; None elsewhere) and ``finite_n_resolved``; the message says when
    paths/n < :data:`MIN_PATHS_PER_N` and how many paths would resolve it. Two such results at different
    d give the law over runs of the finite-d threshold (:func:`spectral.success_laws`).
    """
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    grid = np.sort(np.asarray(grid, dtype=float))
    if grid.size < 2:
        raise SpectralError("grid needs at least two δ values.")
    if not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise SpectralError(f"grid values (δ) must be finite and > 0; got {grid.tolist()}.")
    for name, v, lo_ in (("refine", refine, 2), ("repeats", repeats, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo_:
            raise SpectralError(f"{name} must be an integer >= {lo_}; got {v!r} (defaults: refine=6, repeats=2).")
    if convention == "finite-n" and (d is None or isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1):
        raise SpectralError(f"convention='finite-n' needs the dimension d as a positive integer (n = δ·d); got d={d!r}.")
    require_hard(problem, "delta_star")
    times = tuple(sorted(int(t) for t in times))
    if any(t < 0 or t > int(steps) for t in times):
        raise SpectralError(f"times={list(times)}: each time must lie in 0..steps={int(steps)} (GD steps of the run).")
    from dmft.solve import _jitter, _problem_setting

    # the full setting, on every path (the no-bracket result had setting={}); key and problem make it rerunnable
    setting = dict(grid=grid.tolist(), lr=float(np.asarray(lr).mean()), lr_schedule=np.asarray(lr).tolist(),
                   steps=int(steps), times=list(times), paths=int(paths), repeats=int(repeats), refine=int(refine),
                   convention=convention, d=d, stationarity_tol=stationarity_tol, level=negative_level(problem, level),
                   criterion=_criterion(problem, level, min_cosine2), min_cosine2=min_cosine2,
                   outlier_solver=outlier_solver_defaults(), **_problem_setting(problem, key),
                   chol_jitter=_jitter(chol_jitter),
                   repeat_keys="fold_in(key, r), r = 0 .. repeats-1 (r = 0 also runs the coarse sweep)")
    keys = [jax.random.fold_in(key, r) for r in range(repeats)]
    # one δ batch size for the coarse and the fine sweeps: one compilation of the DMFT program
    # (the shorter sweeps repeat their last δ: at most |len(grid) − refine| extra solves per sweep)
    batch = max(len(grid), int(refine))
    say(f"coarse δ sweep: {len(grid)} points x {len(times)} times")
    coarse = margin_curve(problem, grid, lr=lr, steps=steps, times=times, paths=paths, key=keys[0], chol_jitter=chol_jitter,
                          convention=convention, d=d, level=level, pad_to=batch, **_cut(min_cosine2))
    brackets = np.array([_root_on_grid(grid, coarse.margin[:, j])[1:] for j in range(len(times))])
    upper = np.array([_upper_root_on_grid(grid, coarse.margin[:, j]) for j in range(len(times))])  # (T, 3)
    window = dict(window_upper=upper[:, 0].tolist(), window_upper_bracket=upper[:, 1:].tolist())
    window_note = _window_note(upper[-1], times[-1])
    ok = np.isfinite(brackets[:, 0])
    if not ok.any():
        allpos = np.all(~(coarse.margin < 0))
        what = "no outlier" if min_cosine2 is None else f"no outlier with hard cos² >= {min_cosine2:g}"
        hint = (f"the margin is positive ({what}) on the whole grid [{grid[0]:.3g}, {grid[-1]:.3g}]: try "
                f"larger δ (e.g. up to {2 * grid[-1]:.3g})" if allpos else
                f"an outlier exists already at δ = {grid[0]:.3g}: try smaller δ (down to {grid[0] / 2:.3g})")
        if convention == "strict" and np.all(np.isinf(coarse.margin)):
            hint = ("the support of D is unbounded below, so the strict limit has no edge and no outlier; use "
                    "convention='finite-n' with the dimension d")
        from dmft.solve import DIVERGENCE_FACTOR

        div = np.full(len(grid), -1) if coarse.diverged_step is None else coarse.diverged_step
        if np.any((div >= 0) & (div <= max(times))):
            bad = [f"{dv:.3g}" for dv, st in zip(grid, div) if 0 <= st <= max(times)]
            hint = (f"GD diverges at δ = {', '.join(bad)} (the train error leaves {DIVERGENCE_FACTOR:g} × its initial value by step "
                    f"{int(div[div >= 0].min())}; last {float(coarse.train_error[div >= 0][0, -1]):.3g}): lr = {float(np.mean(lr)):g} "
                    "is above 2/λ_max of the Hessian there, and the margins of a blown-up state mean nothing; reduce lr")
        return DeltaStarResult(times=times, delta_star=np.full(len(times), np.nan),
                               delta_star_stderr=np.full(len(times), np.nan), per_repeat=np.full((repeats, len(times)), np.nan),
                               bracket=brackets, delta_nn=None, delta_nn_stderr=None, status="no-bracket",
                               message=f"the δ grid never brackets the threshold: {hint}{window_note}.",
                               convention=convention, coarse=coarse, setting=setting,
                               diagnostics=dict(wall_s=time.perf_counter() - t0, **window))
    fine = refine_grid(brackets[ok], refine)
    lo, hi = float(fine[0]), float(fine[-1])
    # key 0 is the coarse sweep's key: its coarse and fine margins are one function of δ (common random
    # numbers), so its roots come from the union of both grids and never leave its own coarse bracket
    union, first = np.unique(np.concatenate([fine, grid]), return_index=True)   # a shared δ: the fine value
    per = np.full((repeats, len(times)), np.nan)
    fine_curves, fine_unstable = [], []
    for r, kr in enumerate(keys):
        say(f"refinement sweep {r + 1}/{repeats}: {len(fine)} points in [{lo:.4g}, {hi:.4g}]")
        mc = margin_curve(problem, fine, lr=lr, steps=steps, times=times, paths=paths, key=kr, chol_jitter=chol_jitter,
                          convention=convention, d=d, level=level, pad_to=batch, **_cut(min_cosine2))
        fine_curves.append(mc.margin.tolist())
        fine_unstable.append(mc.unstable_fraction.tolist())
        for j in range(len(times)):
            if r == 0:
                root, _, _ = _root_on_grid(union, np.concatenate([mc.margin[:, j], coarse.margin[:, j]])[first])
            else:
                root, _, _ = _root_on_grid(fine, mc.margin[:, j])
            per[r, j] = root
    ds = np.nanmean(per, axis=0)
    with warnings.catch_warnings():   # < 2 finite repeats at some time: s.e. nan, said in the message (lost_note)
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(per, axis=0, ddof=1) / np.sqrt(np.sum(np.isfinite(per), axis=0)) if repeats > 1 else np.full(len(times), np.nan)
    # stationarity of the first phase: train error and δ*(t) over the last half of the horizon
    tr = coarse.train_error
    half = steps // 2
    tr_change = float(np.max(np.abs(tr[:, -1] - tr[:, half]) / np.maximum(np.abs(tr[:, half]), 1e-12)))
    late = [j for j, t in enumerate(times) if t >= half]
    ds_change = float(np.nanmax(np.abs(ds[late] - ds[late[-1]]) / ds[late[-1]])) if len(late) >= 2 and np.isfinite(ds[late[-1]]) else np.inf
    osc, osc_alt, osc_amp = period_two_oscillation(tr)
    converged = tr_change < stationarity_tol and ds_change < stationarity_tol and not osc.any()
    lost = np.sum(~np.isfinite(per), axis=0)   # repeats whose fine margins do not change sign at that time
    n_fin = repeats - lost                      # keys behind each s.e.: n_fin − 1 degrees of freedom
    lost_note = (f"; {int(lost[-1])} of {repeats} repeats have no root in the refine grid at t={times[-1]} (the mean "
                 f"and s.e. use the others{', so no s.e.' if n_fin[-1] < 2 else ''})" if lost[-1] else "")
    empty = [(a, b) for a, b in brackets[ok] if not np.any((fine > a) & (fine < b))]
    if empty and repeats > 1:
        lost_note += (f"; the refine grid has no point inside the bracket [{empty[0][0]:.3g}, {empty[0][1]:.3g}]: the roots "
                      f"of repeats 1.. are interpolated across it (repeat 0 also uses its coarse points): increase refine "
                      f"(now {refine})")
    if n_fin[-1] == 2:
        lost_note += ("; the s.e. comes from 2 keys (1 degree of freedom: indicative only, it can be far too small "
                      "by chance) — use repeats >= 4 for an error bar")
    # the finite-n truncation removes paths/n samples of an unbounded-below law: resolved only with paths ≫ n
    ppn = np.full(len(times), np.nan)
    if convention == "finite-n" and coarse.unbounded_bottom is not None:
        sets = np.asarray(coarse.unbounded_bottom).any(axis=0)
        ppn = np.where(sets & np.isfinite(ds), paths / (np.where(np.isfinite(ds), ds, 1.0) * d), np.nan)
        if np.nanmin(ppn, initial=np.inf) < MIN_PATHS_PER_N:
            k = int(np.nanargmin(ppn))
            lost_note += (f"; the finite-n truncation is not resolved: paths/n = {ppn[k]:.2g} at t={times[k]} (n = δ*·d = "
                          f"{ds[k] * d:.0f}; below {MIN_PATHS_PER_N} the law is cut at ~1/paths, not 1/n, and none of it "
                          f"when paths < n: measured 0.3–0.6 too low at paths/n = 3–9), so this is not yet the threshold at "
                          f"d = {d}; use paths >= {int(np.ceil(MIN_PATHS_PER_N * np.nanmax(ds[sets]) * d))}")
    unst = float(np.max(fine_unstable)) if fine_unstable else 0.0
    if unst > 0:   # the roots come from the refine sweeps: say when their dynamics is locally unstable
        lost_note += (f"; at some refine-grid δ a fraction {unst:.2g} of the Monte Carlo paths has a locally unstable GD "
                      "step (η·λ_max(D)/δ > 2; those paths diverge): reduce lr")
    if osc.any():   # GD at the edge of stability: the state flips every step, so there is no limit to read
        gd = grid[osc]   # coarse.train_error has one row per grid point
        lost_note += (f"; the train error oscillates with period 2 at the end of the horizon at δ = "
                      f"{', '.join(f'{v:.3g}' for v in np.unique(gd))} (alternation {float(osc_alt.max()):.2f}, relative "
                      f"amplitude {float(osc_amp.max()):.2g}): GD is at the edge of stability (η·λ_max(H) ≈ 2), not at a "
                      "stationary first phase; reduce lr (e.g. halve it and double steps)")
    if converged:
        dnn, dnn_se, status = float(ds[-1]), float(se[-1]), "converged"
        msg = (f"δ_NN ≈ δ*(t={times[-1]}) = {ds[-1]:.4g} ± {se[-1]:.2g}: train error changed {tr_change:.2%} and δ*(t) "
               f"{ds_change:.2%} over the last half of the horizon" + lost_note)
    elif len(late) < 2:
        # the trend test needs two times in the last half (audit: times=(5, 10) with steps=40 said "δ*(t) changed
        # inf%" and advised more steps)
        dnn, dnn_se, status = None, None, "not-converged"
        msg = (f"δ_NN not assessed: the stationarity test compares δ*(t) at two or more times in the last half of the "
               f"run (t ≥ {half}), and times={list(times)} has {len(late)}; add times near steps={steps}" + lost_note)
    else:
        dnn, dnn_se, status = None, None, "not-converged"
        msg = (f"first phase not converged within {steps} steps (train error changed {tr_change:.2%}, δ*(t) changed "
               f"{ds_change:.2%} over the last half; tolerance {stationarity_tol:.0%}): δ*(t) is reported as a curve, "
               "δ_NN is not; increase steps/lr" + lost_note)
    msg += window_note
    setting["refine_grid"] = fine.tolist()
    diag = dict(train_error_change_last_half=tr_change, delta_star_change_last_half=ds_change,
                period_two_oscillation=osc.tolist(), oscillation_alternation=osc_alt.tolist(),
                oscillation_amplitude=osc_amp.tolist(),
                repeats_without_root=lost.tolist(), stderr_degrees_of_freedom=(n_fin - 1).tolist(),
                paths_per_n=[None if not np.isfinite(v) else float(v) for v in ppn],
                finite_n_resolved=bool(not np.any(ppn < MIN_PATHS_PER_N)),
                coarse_margin=coarse.margin.tolist(), fine_margins=fine_curves, notes=coarse.notes[:10],
                coarse_unstable_fraction=coarse.unstable_fraction.tolist(), fine_unstable_fraction=fine_unstable,
                wall_s=time.perf_counter() - t0, **window)
    return DeltaStarResult(times=times, delta_star=ds, delta_star_stderr=se, per_repeat=per, bracket=brackets,
                           delta_nn=dnn, delta_nn_stderr=dnn_se, status=status, message=msg, convention=convention,
                           coarse=coarse, setting=setting, diagnostics=diag)
