"""The law over runs of the finite-d threshold: success probability of GD at (δ, d) from the finite-n
thresholds δ*_n at two or more d (THEORY §2; docs/thresholds.md "Which runs succeed at finite d").

Why. The finite-n convention gives one threshold δ*_n(d) per d: the δ at which the outlier equation,
with the law truncated at tail mass 1/n (n = δd), has an outlier below its edge e(1). A run of GD does
not see e(1): its edge is set by its own most extreme sample, e(Γ₁) with Γ₁ ~ Exp(1)
(:func:`spectral.finite_n_edge_law`; checked on 192 GD seeds in ``benchmarks/bench_finite_n_edge_law``).

Derivation. The edge of a run at (δ, d) is the convention's edge at the effective sample size n/Γ₁;
the rest of the outlier equation (``S(λ)`` outside the support) does not depend on one sample. So the
run has an outlier below its own edge iff the finite-n margin at n/Γ₁ is negative, i.e. iff
δ > δ*_n(d/Γ₁) (at fixed δ, n/Γ₁ = δ·(d/Γ₁)). With δ*_n linear in ln d over the range,
δ*_n(d) = a + b·ln d (b = dδ*_n/d ln d, the log n correction of the threshold), the run's threshold is

    δ_run = δ*_n(d) − b·ln Γ₁ = δ*_n(d) + b·G,     G = −ln Γ₁ standard Gumbel,
    P(success at δ) = P(δ_run < δ) = exp(−exp(−(δ − δ*_n(d))/b)).

So the finite-n threshold δ*_n(d) is the 1/e ≈ 37 % point of the success curve, its median is
δ*_n(d) − b·ln ln 2 = δ*_n(d/ln 2), its mean δ*_n(d) + γ b, its sd π b/√6, and **its width b does not
shrink with d** (a deterministic threshold with O(d^−1/2) noise would sharpen). b ≤ 0 (δ*_n not rising
with d: a bounded side, or the strict limit) means the finite-n edge does not set the threshold, and
there is no such law: :func:`finite_n_success_law` raises.

What it leaves out: the bulk's n^(−2/3) edge fluctuation, the finite-d fluctuation of the outlier itself
(O(n^−1/2)), and the finite-d smoothing of the transition (BBP window). These shrink with d; the width
b does not. Checked against GD in ``benchmarks/bench_finite_n_success_law.py``."""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np
from scipy import stats

from ._errors import SpectralError

EULER_GAMMA = float(np.euler_gamma)
LN_LN2 = math.log(math.log(2.0))      # median of G is −ln ln 2


class SuccessLaw(eqx.Module):
    """Law of the per-run threshold δ_run = δ*_n(d) + b·G (module docstring), from the weighted
    least-squares line δ*_n(d) = intercept + slope·ln(d/d_ref) through the given finite-n thresholds.
    ``slope`` is b (the law's scale); ``cov`` the 2×2 covariance of (intercept, slope); ``chi2`` / ``dof``
    and ``fit_pvalue`` the fit's goodness (dof = 0 with two d: no check of linearity)."""

    ds: np.ndarray
    delta_star: np.ndarray
    stderr: np.ndarray
    d_ref: float
    intercept: float
    slope: float
    cov: np.ndarray
    chi2: float
    dof: int
    fit_pvalue: float
    setting: dict

    @property
    def scale(self) -> float:
        """b = dδ*_n/d ln d: the Gumbel scale of δ_run (the same at every d)."""
        return self.slope

    @property
    def scale_stderr(self) -> float:
        return float(math.sqrt(self.cov[1, 1]))

    @property
    def significant(self) -> bool:
        """b > 2 s.e.: the rise of δ*_n with d is resolved. Otherwise the law's width is not measured (a user audit
        fed b = 0.0029 ± 0.051 and got a 10–90 % width of 0.009 with no caveat); `setting["caveat"]` says so."""
        return bool(self.slope > 2.0 * self.scale_stderr)

    def prob_success_bounds(self, delta, d):
        """P(success) at b ± 2 s.e. (b floored at a tiny positive value): how much of the curve's shape the data fix."""
        lo, hi = max(self.slope - 2 * self.scale_stderr, 1e-12), self.slope + 2 * self.scale_stderr
        x = np.asarray(delta, float) - self.loc(d)
        f = lambda b: np.exp(-np.exp(-x / b))
        return np.minimum(f(lo), f(hi)), np.maximum(f(lo), f(hi))

    @property
    def sd(self) -> float:
        """sd of δ_run over runs: π b/√6."""
        return math.pi * self.slope / math.sqrt(6.0)

    def loc(self, d):
        """δ*_n(d) on the fitted line: the 1/e point of the success curve at d."""
        return self.intercept + self.slope * np.log(_dimension(d) / self.d_ref)

    def loc_stderr(self, d):
        x = np.log(_dimension(d) / self.d_ref)
        c = self.cov
        return np.sqrt(c[0, 0] + 2 * x * c[0, 1] + x * x * c[1, 1])

    def prob_success(self, delta, d):
        """P(a run at (δ, d) has an outlier below its own edge) = exp(−exp(−(δ − δ*_n(d))/b))."""
        return np.exp(-np.exp(-(np.asarray(delta, float) - self.loc(d)) / self.slope))

    def quantile(self, p, d):
        """The δ at which a fraction ``p`` of runs at d succeed: δ*_n(d) − b·ln(−ln p)."""
        p = np.asarray(p, float)
        if np.any((p <= 0) | (p >= 1)):
            raise SpectralError(f"p must lie in (0, 1) (got {p!r}).")
        return self.loc(d) - self.slope * np.log(-np.log(p))

    def median(self, d):
        """δ*_n(d) − b ln ln 2 = δ*_n(d/ln 2)."""
        return self.loc(d) - self.slope * LN_LN2

    def mean(self, d):
        return self.loc(d) + EULER_GAMMA * self.slope


def _dimension(d) -> np.ndarray:
    """``d`` as floats, refused unless positive and finite: ln(d/d_ref) of d ≤ 0 is −inf or NaN, which the
    Gumbel law turns into a probability of exactly 0 or 1 (a user audit: ``prob_success(δ, 0)`` returned 0.0)."""
    d = np.asarray(d, float)
    if not np.all(np.isfinite(d) & (d > 0)):
        raise SpectralError(f"d must be a positive finite dimension (got {d.tolist()}).")
    return d


def finite_n_success_law(ds, delta_star_n, stderr) -> SuccessLaw:
    """The law over runs of the finite-d threshold (module docstring) from finite-n thresholds
    ``delta_star_n`` (e.g. :func:`spectral.thresholds.delta_star` with ``convention="finite-n"`` at each d) at
    dimensions ``ds`` (at least two distinct; repeats allowed, e.g. independent Monte Carlo keys) with
    their standard errors ``stderr`` (> 0). Raises :class:`SpectralError` on bad input and when the
    fitted slope b = dδ*_n/d ln d is not positive (the finite-n edge then does not set the threshold)."""
    ds = np.asarray(ds, float).ravel()
    y = np.asarray(delta_star_n, float).ravel()
    se = np.asarray(stderr, float).ravel()
    if not (ds.size == y.size == se.size):
        raise SpectralError(f"ds, delta_star_n and stderr must have the same length (got {ds.size}, {y.size}, {se.size}).")
    if not np.all(np.isfinite(ds) & (ds > 0)):
        raise SpectralError(f"ds must be positive finite dimensions (got {ds.tolist()}).")
    if np.unique(ds).size < 2:
        raise SpectralError("ds must hold at least two distinct dimensions: the law's scale is dδ*_n/d ln d "
                            f"(got {ds.tolist()}); compute δ*_n at a second d.")
    if not np.all(np.isfinite(y)):
        raise SpectralError(f"delta_star_n must be finite (got {y.tolist()}); a threshold that was not bracketed "
                            "has no place in the fit.")
    if not np.all(np.isfinite(se) & (se > 0)):
        raise SpectralError(f"stderr must be positive and finite (got {se.tolist()}); use the Monte Carlo s.e. of "
                            "each δ*_n (independent keys).")
    d_ref = float(np.exp(np.mean(np.log(ds))))
    X = np.stack([np.ones_like(ds), np.log(ds / d_ref)], axis=1)
    w = 1.0 / se**2
    A = X.T @ (w[:, None] * X)
    cov = np.linalg.inv(A)
    beta = cov @ (X.T @ (w * y))
    chi2 = float(np.sum(w * (y - X @ beta) ** 2))
    dof = int(ds.size - 2)
    pval = float(stats.chi2.sf(chi2, dof)) if dof > 0 else float("nan")
    # exactly equal thresholds give a slope of rounding size (1e-31 … 2.5e-16: a "law" of width 5e-16, audit)
    if not beta[1] > 1e-9 * max(1.0, abs(float(beta[0]))):
        raise SpectralError(f"delta_star_n does not rise with d (slope dδ*_n/d ln d = {beta[1]:.3g} ± "
                            f"{math.sqrt(cov[1, 1]):.2g}): the law over runs needs a threshold that the most extreme "
                            "sample raises (b > 0); here the finite-n edge does not set it over these d (a bounded side, "
                            "the strict convention, or d too small: in the CLI's default setting, t = 20, δ*_n falls "
                            "from d = 10 to 40, is flat to d ≈ 160 and rises above), so there is no law of this kind.")
    sig = bool(beta[1] > 2.0 * math.sqrt(cov[1, 1]))
    setting = dict(convention="finite-n: a run at (δ, d) succeeds iff δ > δ*_n(d/Γ₁), Γ₁ ~ Exp(1) "
                              "(its most extreme sample's tail mass)",
                   fit="weighted least squares δ*_n(d) = intercept + slope·ln(d/d_ref)", d_ref=d_ref,
                   significant=sig)
    if not sig:
        setting["caveat"] = (f"the slope b = {beta[1]:.3g} ± {math.sqrt(cov[1, 1]):.2g} is within 2 s.e. of 0: the law's "
                             "location is measured, its width (b) is not; see prob_success_bounds")
    return SuccessLaw(ds=ds, delta_star=y, stderr=se, d_ref=d_ref, intercept=float(beta[0]), slope=float(beta[1]),
                      cov=cov, chi2=chi2, dof=dof, fit_pvalue=pval, setting=setting)


def success_laws(results) -> list:
    """The law over runs at each time of finite-n δ*(t) results at two or more dimensions.

    ``results``: :class:`spectral.thresholds.DeltaStarResult` from :func:`spectral.thresholds.delta_star`
    with ``convention="finite-n"``, the same ``times``, and distinct ``setting["d"]`` (independent keys, so
    that their errors are independent, as the fit assumes). Returns one dict per time: ``t``, ``law``
    (:class:`SuccessLaw`, or None) and ``reason`` (None, or why there is no law at that time: a threshold
    not bracketed or without an s.e., a finite-n truncation not resolved by the paths, δ*_n not rising
    with d)."""
    results = list(results)
    if len(results) < 2:
        raise SpectralError(f"success_laws needs δ*(t) results at two or more d (got {len(results)}).")
    for r in results:
        if r.convention != "finite-n" or r.setting.get("d") is None:
            raise SpectralError("success_laws needs results with convention='finite-n' and their d (the law is the "
                                f"finite-n threshold's d-dependence); got convention {r.convention!r}.")
        if tuple(r.times) != tuple(results[0].times):
            raise SpectralError(f"all results must share the times (got {tuple(r.times)} and {tuple(results[0].times)}).")
    ds = [float(r.setting["d"]) for r in results]
    if len(set(ds)) < 2:
        raise SpectralError(f"the results must be at two or more distinct d (got {ds}).")
    out = []
    for j, t in enumerate(results[0].times):
        y = [float(r.delta_star[j]) for r in results]
        se = [float(r.delta_star_stderr[j]) for r in results]
        ppn = [(r.diagnostics.get("paths_per_n") or [None] * len(r.times))[j] for r in results]
        reason = None
        if not all(np.isfinite(y)):
            reason = "δ*_n not bracketed at d = " + ", ".join(f"{d:g}" for d, v in zip(ds, y) if not np.isfinite(v))
        elif not all(np.isfinite(se) & (np.asarray(se) > 0)):
            reason = "no Monte Carlo s.e. of δ*_n (fewer than 2 repeats with a root) at d = " + ", ".join(
                f"{d:g}" for d, v in zip(ds, se) if not (np.isfinite(v) and v > 0))
        else:
            from .thresholds import MIN_PATHS_PER_N
            bad = [(d, v) for d, v in zip(ds, ppn) if v is not None and v < MIN_PATHS_PER_N]
            if bad:
                reason = ("finite-n truncation not resolved (paths/n < %d) at " % MIN_PATHS_PER_N
                          + ", ".join(f"d = {d:g} (paths/n = {v:.2g})" for d, v in bad)
                          + ": its δ*_n does not carry the d-dependence the law is built from")
        law = None
        if reason is None:
            try:
                law = finite_n_success_law(ds, y, se)
            except SpectralError as exc:
                reason = str(exc)
        out.append(dict(t=int(t), law=law, reason=reason))
    return out
