"""Success curves of finite-d GD: the ground truth for δ_NN (THEORY §3).

For each δ, ``seeds`` runs of full-batch GD from an ordinary random initialization
(``random_overlap=True``: ``W^0`` with rows ``N(0, Q_0/d)`` in every direction, so the hard
overlap starts at ``O(d^{-1/2})``). A run *succeeds* when its hard-subspace overlap

    cos(t) = ‖Θ_hardᵀ W^t‖_F / ‖W^t‖_F

exceeds ``threshold`` (0.5) at the end of the horizon. The 50% point of the success
fraction against δ is estimated by *linear* interpolation of the fraction between the bracketing
grid points, with the binomial sd of a fraction at p = 1/2 divided by the local slope as its s.e.
(session 50 user audit, 4000 replicates of a probit curve with sd 0.5 and 8 seeds: 95 % coverage 0.90–0.93
on grids of step 0.5–1, 0.79 on a step of 0.25, where interpolating between noisy neighbours steepens
the slope). :func:`probit_fifty_percent_point` fits a probit curve to every grid point by maximum
likelihood, with a profile-likelihood interval (spread 0.09–0.14 against 0.13–0.25, coverage 0.93–0.96 on the
same replicates); :func:`success_curve` returns both. Escape times (first step with cos > threshold)
and test-error curves are returned for the grokking plots.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from .problem import Problem, ProblemError
from .simulate import simulate


@dataclasses.dataclass
class SuccessCurve:
    d: int
    deltas: np.ndarray  # (D,)
    success: np.ndarray  # (D,) fraction of seeds with final cos > threshold
    cos_final: np.ndarray  # (D, seeds)
    escape_step: np.ndarray  # (D, seeds) first step with cos > threshold (-1: never)
    cos_curves: np.ndarray  # (D, seeds, len(record)) hard overlap at recorded steps
    test_curves: np.ndarray  # (D, len(record)) mean test error at recorded steps
    train_curves: np.ndarray  # (D, len(record))
    record_steps: np.ndarray
    delta_50: float
    delta_50_stderr: float
    setting: dict
    probit: Optional[dict] = None   # probit_fifty_percent_point: ML 50 % point with a profile-likelihood interval


def hard_cosine(overlap, gram, hard):
    """``‖Θ_hardᵀW‖_F / ‖W‖_F`` from the overlap ``M`` (..., k, m) and ``WᵀW`` (..., m, m)."""
    Mh = overlap[..., list(hard), :]
    num = jnp.sum(Mh**2, axis=(-2, -1))
    den = jnp.trace(gram, axis1=-2, axis2=-1)
    return jnp.sqrt(num / den)


def fifty_percent_point(deltas, success, seeds):
    """δ at which the success fraction crosses 1/2 (linear interpolation of the fraction
    between the first bracketing grid points, in increasing δ) and a binomial s.e. propagated through the
    local slope. ``nan`` when the grid does not bracket 1/2. The grid is sorted first (a user audit: the
    unsorted grid [2.5, 1, 4, 1.5] interpolated between 1 and 4 and gave 2.5 ± 0.53 for 2.0 ± 0.24);
    repeated δ values are refused; a curve that crosses 1/2 upward more than once warns (the first
    crossing is returned; its s.e. does not include that ambiguity)."""
    x, s = _sorted_curve(deltas, success)
    ups = [i for i in range(1, len(x)) if s[i - 1] < 0.5 <= s[i]]
    if len(ups) > 1:
        import warnings
        where = ", ".join(f"[{x[i - 1]:.4g}, {x[i]:.4g}]" for i in ups)
        warnings.warn(f"fifty_percent_point: the success fraction crosses 1/2 upward {len(ups)} times ({where}): not "
                      "monotone in δ at these seeds; the first crossing is returned, and its s.e. does not cover the "
                      "others (more seeds, or a coarser grid).", RuntimeWarning, stacklevel=2)
    for i in ups[:1]:
        x0, x1, y0, y1 = x[i - 1], x[i], s[i - 1], s[i]
        root = x0 + (0.5 - y0) * (x1 - x0) / (y1 - y0)
        slope = (y1 - y0) / (x1 - x0)
        se = np.sqrt(0.25 / seeds) / slope  # binomial sd of a fraction at p = 1/2
        return float(root), float(se)
    return float("nan"), float("nan")


def _sorted_curve(deltas, success):
    x = np.asarray(deltas, float).ravel()
    s = np.asarray(success, float).ravel()
    if x.shape != s.shape:
        raise ProblemError(f"deltas and success must have the same length (got {x.size} and {s.size}).")
    if np.unique(x).size != x.size:
        raise ProblemError(f"deltas must not repeat a value (got {x.tolist()}): pool the seeds of equal δ first.")
    order = np.argsort(x)
    return x[order], s[order]


def probit_fifty_percent_point(deltas, success, seeds, level: float = 0.95) -> dict:
    """Maximum-likelihood 50 % point of a probit success curve P(success at δ) = Φ((δ − μ)/s) from the
    per-δ success fractions of ``seeds`` runs each, with a profile-likelihood interval for μ.

    Why next to :func:`fifty_percent_point`: it uses every grid point, not the two that bracket 1/2. Session 50
    (400 replicates per grid of a probit curve μ = 3, s = 0.5; grids of step 0.25–1 over [1, 5] or [2, 4]; 8 or 16
    seeds): spread of the estimate 0.09–0.14 against 0.13–0.25 for the interpolation (4000 replicates), and the
    95 % interval covers μ in 0.925–0.960 of the replicates (the interpolation's ±1.96 s.e.: 0.79–0.93). About
    0.2 s per call (a profile over 121 values of μ). Returns ``delta_50`` (nan unless ``status`` is
    "ok"), ``ci`` = (lo, hi) at ``level`` (2 Δ log L ≤ χ²₁ quantile; an end beyond the grid by more than its span
    is ±inf), ``stderr`` = (hi − lo)/(2 z) (nan when an end is open), ``scale`` s, and ``status``: "ok";
    "separated" (every δ below some point has no success and every δ above has all: μ is only known to lie in
    the gap, given as ``ci``, and s → 0); "no-information" (the same fraction 0 or 1 everywhere, or one δ)."""
    from scipy import optimize, stats

    if not 0.0 < float(level) < 1.0:
        raise ProblemError(f"level must lie in (0, 1) (got {level!r}), e.g. 0.95.")
    if not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise ProblemError(f"seeds must be a positive int, the runs behind each fraction (got {seeds!r}).")
    x, p = _sorted_curve(deltas, success)
    n = float(seeds)
    k = np.round(p * n)
    if np.any(np.abs(k - p * n) > 1e-6) or np.any((p < 0) | (p > 1)):
        raise ProblemError(f"success must be fractions of {seeds} runs (k/{seeds}); got {p.tolist()}.")
    out = dict(delta_50=float("nan"), ci=(float("nan"), float("nan")), stderr=float("nan"), scale=float("nan"),
               level=float(level), model="probit Φ((δ − μ)/s), binomial likelihood, profile interval")
    if np.all(k == 0) or np.all(k == n) or x.size < 2:     # one δ: location and scale are not both identified
        return dict(out, status="no-information")
    if np.all((k == 0) | (k == n)) and x[k == 0].max() < x[k == n].min():
        return dict(out, status="separated", ci=(float(x[k == 0].max()), float(x[k == n].min())))
    span = float(x[-1] - x[0])

    def nll(mu, ls):
        z = (x - mu) / np.exp(ls)
        return -float(np.sum(k * stats.norm.logcdf(z) + (n - k) * stats.norm.logsf(z)))

    lo_s, hi_s = np.log(1e-4 * span), np.log(10.0 * span)

    def profile(mu):
        r = optimize.minimize_scalar(lambda ls: nll(mu, ls), bounds=(lo_s, hi_s), method="bounded",
                                     options=dict(xatol=1e-9))
        return r.fun, r.x

    a, b = x[0] - span, x[-1] + span
    grid = np.linspace(a, b, 121)
    prof = np.array([profile(m)[0] for m in grid])
    i = int(np.argmin(prof))
    r = optimize.minimize_scalar(lambda m: profile(m)[0], bounds=(grid[max(i - 1, 0)], grid[min(i + 1, 120)]),
                                 method="bounded", options=dict(xatol=1e-10))
    mu, best = float(r.x), float(r.fun)
    cut = 0.5 * float(stats.chi2.ppf(level, 1))
    f = lambda m: profile(m)[0] - best - cut
    lo = float(optimize.brentq(f, a, mu, xtol=1e-10)) if f(a) > 0 else -np.inf
    hi = float(optimize.brentq(f, mu, b, xtol=1e-10)) if f(b) > 0 else np.inf
    zq = float(stats.norm.ppf(0.5 + level / 2))
    se = (hi - lo) / (2 * zq) if np.isfinite(lo) and np.isfinite(hi) else float("nan")
    return dict(out, status="ok", delta_50=mu, ci=(lo, hi), stderr=float(se), scale=float(np.exp(profile(mu)[1])))


def no_bracket_reason(deltas, success) -> str:
    """Why :func:`fifty_percent_point` found no crossing, and which way to widen the grid."""
    deltas, s = _sorted_curve(deltas, success)
    if s[0] >= 0.5:
        return (f"success is already {s[0]:.3g} ≥ 0.5 at the smallest δ = {float(deltas[0]):.4g}: the 50% point lies at "
                f"or below it (extend --grid downward)")
    if np.all(s < 0.5):
        return (f"success stays below 0.5 up to the largest δ = {float(deltas[-1]):.4g} (max {s.max():.3g}; extend "
                f"--grid upward or run longer)")
    return "the success fraction does not cross 0.5 from below on this grid (widen --grid)"


def success_curve(problem: Problem, d: int, deltas, *, lr, steps: int, seeds: int, key, threshold: float = 0.5,
                  record_every: int = None, dtype=jnp.float32, hard=None, test_samples: int = 1024) -> SuccessCurve:
    """GD success fraction against δ at dimension ``d`` (one :func:`dmft.simulate` per δ, seeds vmapped)."""
    hard = tuple(problem.teacher.hard_coordinates() if hard is None else hard)
    if not hard:
        raise ProblemError("success_curve needs hard teacher coordinates (Teacher.hard or an even link).")
    deltas = np.asarray(deltas, float).ravel()
    if deltas.size == 0 or np.unique(deltas).size != deltas.size:
        raise ProblemError(f"deltas must be a non-empty grid without repeats (got {deltas.tolist()}).")
    deltas = np.sort(deltas)       # rows in increasing δ (was: as given; the 50 % point then read non-neighbours)
    record_every = record_every or max(1, steps // 200)
    rec = np.arange(0, steps + 1, record_every)
    succ, cosf, esc, cosc, testc, trainc = [], [], [], [], [], []
    n_pad = int(round(float(deltas.max()) * d))  # one compilation for the whole δ grid
    for i, dv in enumerate(deltas):
        sim = simulate(problem, d=d, delta=float(dv), lr=lr, steps=steps, seeds=seeds, key=jax.random.fold_in(key, i),
                       random_overlap=True, dtype=dtype, test_samples=test_samples, n_pad=n_pad)
        cos = np.asarray(hard_cosine(sim.overlap_seeds, sim.gram_seeds, hard))  # (seeds, steps+1)
        above = cos > threshold
        first = np.where(above.any(axis=1), above.argmax(axis=1), -1)
        succ.append(float(np.mean(cos[:, -1] > threshold)))
        cosf.append(cos[:, -1])
        esc.append(first)
        cosc.append(cos[:, rec])
        testc.append(np.asarray(sim.test_error)[rec])
        trainc.append(np.asarray(sim.train_error)[rec])
    succ = np.array(succ)
    d50, d50se = fifty_percent_point(deltas, succ, seeds)
    probit = probit_fifty_percent_point(deltas, succ, seeds)
    setting = dict(d=int(d), deltas=deltas.tolist(), lr=float(np.asarray(lr).mean()), steps=int(steps), seeds=int(seeds),
                   threshold=threshold, hard=list(hard), init="random (rows N(0, Q0/d) in all directions)",
                   dtype=jnp.dtype(dtype).name, success="final hard-subspace cos > threshold")
    return SuccessCurve(d=int(d), deltas=deltas, success=succ, cos_final=np.array(cosf), escape_step=np.array(esc),
                        cos_curves=np.array(cosc), test_curves=np.array(testc), train_curves=np.array(trainc),
                        record_steps=rec, delta_50=d50, delta_50_stderr=d50se, setting=setting, probit=probit)
