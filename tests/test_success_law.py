"""spectral.finite_n_success_law: the law over runs of the finite-d threshold (δ_run = δ*_n(d/Γ₁)).

Closed forms of the Gumbel law, a Monte Carlo of the defining model (runs draw Γ₁ ~ Exp(1) and
succeed iff δ > δ*_n(d/Γ₁) on a line in ln d: the formulas must reproduce the sampled success
fractions, median, mean and sd), recovery of the line and its covariance, and bad input. The law
against GD is ``benchmarks/bench_finite_n_success_law.py`` (committed-JSON test in test_benchmarks)."""

import math

import numpy as np
import pytest

import spectral
from spectral import SpectralError


def _law():
    # the committed t·η = 2.4 roots' scale (b ≈ 0.63), exact line: δ*_n = 4.1 + 0.63 ln(d/500)
    ds = np.array([250.0, 500.0, 1000.0])
    return spectral.finite_n_success_law(ds, 4.1 + 0.63 * np.log(ds / 500), [0.05, 0.03, 0.06])


def test_line_recovered_exactly_with_its_covariance():
    L = _law()
    assert L.slope == pytest.approx(0.63, abs=1e-12)
    assert L.loc(500) == pytest.approx(4.1, abs=1e-12)
    assert L.loc(2000) == pytest.approx(4.1 + 0.63 * math.log(4), abs=1e-12)
    assert L.chi2 == pytest.approx(0.0, abs=1e-18) and L.dof == 1
    # covariance of weighted least squares: by hand with the design matrix
    ds, se = np.array([250.0, 500.0, 1000.0]), np.array([0.05, 0.03, 0.06])
    X = np.stack([np.ones(3), np.log(ds / L.d_ref)], 1)
    np.testing.assert_allclose(L.cov, np.linalg.inv(X.T @ (X / se[:, None] ** 2)), rtol=1e-12)
    # s.e. of the location at d is the propagated variance, smallest near d_ref
    assert L.loc_stderr(L.d_ref) == pytest.approx(math.sqrt(L.cov[0, 0]), rel=1e-12)
    assert L.loc_stderr(4000) > L.loc_stderr(L.d_ref)


def test_gumbel_closed_forms():
    L, d = _law(), 1000
    assert L.prob_success(L.loc(d), d) == pytest.approx(math.exp(-1.0), abs=1e-14)       # δ*_n(d): the 1/e point
    assert L.median(d) == pytest.approx(L.loc(d / math.log(2.0)), abs=1e-12)               # = δ*_n(d / ln 2)
    assert L.quantile(0.5, d) == pytest.approx(L.median(d), abs=1e-12)
    assert L.mean(d) - L.loc(d) == pytest.approx(np.euler_gamma * L.slope, abs=1e-12)
    assert L.sd == pytest.approx(math.pi * L.slope / math.sqrt(6.0), abs=1e-12)
    p = np.array([0.05, 0.37, 0.5, 0.9, 0.99])
    np.testing.assert_allclose(L.prob_success(L.quantile(p, d), d), p, rtol=1e-12)
    # the width is the same at every d: the curve at 4d is the curve at d shifted by b ln 4
    x = np.linspace(3.0, 7.0, 9)
    np.testing.assert_allclose(L.prob_success(x + L.slope * math.log(4), 4 * d), L.prob_success(x, d), rtol=1e-12)


def test_formulas_reproduce_a_monte_carlo_of_the_defining_model():
    """Runs draw Γ₁ ~ Exp(1) and succeed at δ iff δ > δ*_n(d/Γ₁) (the line): 200 000 runs."""
    L, d = _law(), 1000
    g = np.random.default_rng(0).exponential(size=200_000)
    thr = L.loc(d / g)                                               # each run's threshold
    n = thr.size
    for x in (3.8, 4.54, 5.0, 6.0, 7.0):
        p = L.prob_success(x, d)
        assert abs(np.mean(thr < x) - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-12
    assert abs(np.median(thr) - L.median(d)) < 0.01
    assert abs(np.mean(thr) - L.mean(d)) < 4 * L.sd / math.sqrt(n)
    assert abs(np.std(thr) - L.sd) < 0.01


def test_bad_input_names_the_parameter():
    with pytest.raises(SpectralError, match="same length"):
        spectral.finite_n_success_law([250, 500], [3.7], [0.05, 0.05])
    with pytest.raises(SpectralError, match="two distinct"):
        spectral.finite_n_success_law([500, 500], [4.0, 4.1], [0.05, 0.05])
    with pytest.raises(SpectralError, match="ds must be positive"):
        spectral.finite_n_success_law([0, 500], [4.0, 4.1], [0.05, 0.05])
    with pytest.raises(SpectralError, match="delta_star_n must be finite"):
        spectral.finite_n_success_law([250, 500], [np.nan, 4.1], [0.05, 0.05])
    with pytest.raises(SpectralError, match="stderr must be positive"):
        spectral.finite_n_success_law([250, 500], [4.0, 4.1], [0.0, 0.05])
    with pytest.raises(SpectralError, match="does not rise with d"):
        spectral.finite_n_success_law([250, 500], [4.1, 4.0], [0.05, 0.05])
    with pytest.raises(SpectralError, match="p must lie"):
        _law().quantile(1.0, 500)
    # d <= 0 made ln(d / d_ref) -inf / NaN: prob_success(δ, 0) was exactly 0.0, median(-5) NaN
    for method in ("prob_success", "prob_success_bounds"):
        for bad in (0.0, -500.0, np.inf):
            with pytest.raises(SpectralError, match="d must be a positive finite dimension"):
                getattr(_law(), method)(4.0, bad)
    for method in ("loc", "loc_stderr", "median", "mean"):
        with pytest.raises(SpectralError, match="d must be a positive finite dimension"):
            getattr(_law(), method)([500.0, 0.0])
    with pytest.raises(SpectralError, match="d must be a positive finite dimension"):
        _law().quantile(0.5, np.nan)


def _result(d, ds, se, ppn, convention="finite-n", times=(10, 20)):
    from types import SimpleNamespace
    return SimpleNamespace(times=times, delta_star=np.asarray(ds, float), delta_star_stderr=np.asarray(se, float),
                           convention=convention, setting=dict(d=d),
                           diagnostics=dict(paths_per_n=ppn, finite_n_resolved=all(v is None or v >= 20 for v in ppn)))


def test_success_laws_per_time_and_the_reasons_for_none():
    """``success_laws`` fits the law per time from δ*(t) results at two d; a time whose root is missing,
    has no s.e., is not resolved by the paths, or does not rise with d gets no law and says why."""
    a = _result(500, [4.0, 4.2], [0.05, 0.05], [40.0, 30.0])
    b = _result(1000, [4.5, 4.1], [0.05, 0.05], [25.0, 24.0])
    rows = spectral.success_laws([a, b])
    assert [r["t"] for r in rows] == [10, 20]
    ref = spectral.finite_n_success_law([500, 1000], [4.0, 4.5], [0.05, 0.05])
    L = rows[0]["law"]
    assert rows[0]["reason"] is None and L.scale == pytest.approx(0.5 / math.log(2), rel=1e-12)
    assert L.scale == pytest.approx(ref.scale, rel=1e-12) and float(L.median(500)) == pytest.approx(float(ref.median(500)))
    assert rows[1]["law"] is None and "does not rise with d" in rows[1]["reason"]
    # not resolved by the paths at d = 1000, t = 20 only
    c = _result(1000, [4.5, 4.6], [0.05, 0.05], [25.0, 8.0])
    rows = spectral.success_laws([a, c])
    assert rows[0]["law"] is not None and rows[1]["law"] is None
    assert "not resolved" in rows[1]["reason"] and "d = 1000 (paths/n = 8)" in rows[1]["reason"]
    e = _result(1000, [np.nan, 4.6], [0.05, np.nan], [None, 25.0])
    rows = spectral.success_laws([a, e])
    assert "not bracketed at d = 1000" in rows[0]["reason"] and "no Monte Carlo s.e." in rows[1]["reason"]
    with pytest.raises(SpectralError, match="finite-n"):
        spectral.success_laws([a, _result(1000, [4.5, 4.6], [0.05, 0.05], [None, None], convention="strict")])
    with pytest.raises(SpectralError, match="distinct d"):
        spectral.success_laws([a, a])
    with pytest.raises(SpectralError, match="share the times"):
        spectral.success_laws([a, _result(1000, [4.5], [0.05], [25.0], times=(10,))])
    with pytest.raises(SpectralError, match="two or more"):
        spectral.success_laws([a])


def test_audit_session49_degenerate_laws_are_flagged():
    """Session 49 user audit. Equal finite-n thresholds gave a slope of rounding size (4e-16) and a step-function
    "law" → refused; a slope within 2 s.e. of 0 (0.0029 ± 0.051) gave a 10–90 % width with no caveat → flagged
    (`significant`, `setting["caveat"]`). matrix_model(replace=False) on a weighted (stratified) law drew 15.2
    tail samples per draw against the law's 8.0 → refused. finite_n_edge_law on a bounded law declared unbounded
    gave sd 1.5e-16 with adequate=True → not adequate; a Gaussian tail (D = −|g|, Gumbel sd half the dense one)
    → `gumbel_linear` False with a note."""
    import jax
    import jax.numpy as jnp

    with pytest.raises(spectral.SpectralError, match="does not rise"):
        spectral.finite_n_success_law([250, 500, 1000], [4.2] * 3, [0.05] * 3)
    weak = spectral.finite_n_success_law([250, 1000], [4.000, 4.004], [0.05, 0.05])
    assert not weak.significant and "within 2 s.e." in weak.setting["caveat"]
    lo, hi = weak.prob_success_bounds(4.1, 500)
    assert lo < weak.prob_success(4.1, 500) < hi
    strong = spectral.finite_n_success_law([250, 1000], [4.0, 4.4], [0.05, 0.05])
    assert strong.significant and "caveat" not in strong.setting
    g = np.random.default_rng(0).standard_normal(1 << 16)
    w = np.where(np.arange(g.size) < 200, 0.01 / 200, 0.99 / (g.size - 200))
    law_w = spectral.law_from_samples(jnp.asarray(-np.abs(g))[:, None, None], zeta=jnp.asarray(g), weights=jnp.asarray(w),
                                      unbounded=("bottom",))
    with pytest.raises(spectral.SpectralError, match="uniform weights"):
        spectral.matrix_model(law_w, 3.0, 100, draws=1, key=jax.random.key(0), replace=False)
    bounded = spectral.law_from_samples(jnp.asarray(1 - 0.5 * np.minimum(g**2, 4.0))[:, None, None], unbounded=("bottom",))
    L = spectral.finite_n_edge_law(bounded, 3.0, "bottom", n=1200)
    assert not L.adequate and any("point mass" in s for s in L.setting["notes"])
    g = np.random.default_rng(0).standard_normal(1 << 18)    # ≥ 100 tail samples per level: linearity is tested
    gauss = spectral.law_from_samples(jnp.asarray(-np.abs(g))[:, None, None], unbounded=("bottom",))
    G = spectral.finite_n_edge_law(gauss, 3.0, "bottom", n=1200)
    assert not G.gumbel_linear and any("not linear" in s for s in G.setting["notes"])   # misfit 0.11 sd
    quad = spectral.law_from_samples(jnp.asarray(1 - 0.5 * g**2)[:, None, None], unbounded=("bottom",))
    assert spectral.finite_n_edge_law(quad, 3.0, "bottom", n=1200).gumbel_linear   # the design law: 0.035 sd
