"""The law of the finite-n edge (spectral.finite_n_edge_law) against dense eigendecompositions."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import spectral

DELTA, C = 3.0, 0.5


def _toy_law(samples=1 << 20, seed=0):
    """m = 1, D = 1 − C g²: exponential lower tail (the shape of the square-loss blocks of phase retrieval)."""
    g = np.random.default_rng(seed).standard_normal(samples)
    return spectral.law_from_samples(jnp.asarray((1.0 - C * g ** 2)[:, None, None]), unbounded=("bottom",))


def _dense_bottom_edges(d, draws, seed=1):
    """Smallest eigenvalue of (1/n) Σ x_i x_iᵀ D_i, n = δd, D_i = 1 − C g_i², over ``draws`` draws."""
    rng = np.random.default_rng(seed)
    n = int(DELTA * d)
    out = np.empty(draws)
    for r in range(draws):
        X = rng.standard_normal((n, d))
        D = 1.0 - C * rng.standard_normal(n) ** 2
        out[r] = np.linalg.eigvalsh((X.T * D) @ X / n)[0]
    return out


def test_edge_law_matches_dense_draws():
    """d = 400, 300 dense draws, model "spike" (the Gumbel numbers come with it). Tolerances: 3 s.e. of the draws' statistic (median and sd by bootstrap)
    plus the model's own Monte Carlo error, 3× its sd over law seeds 0–3 (2^20 samples, 4000 sampled
    draws; measured: median sd 0.005, mean 0.002, sd 0.025 → allowances 0.015, 0.015, 0.075). With 2000 draws (session 38)
    the spike model was within 0.003 of the draws' median and mean at d = 400 (KS p = 0.40), the
    Gumbel model 0.05 / 0.03 too extreme (KS p = 1e-9). Checked here: the spike model's median, mean,
    sd and the uniformity of the draws' probability integral transform; the convention's single edge
    e(1) lies outside the tolerance of the draws' mean (the test tells the law from the convention)."""
    d = 400
    law = spectral.finite_n_edge_law(_toy_law(), DELTA, "bottom", n=DELTA * d, model="spike")
    assert law.model == "spike" and law.converged and law.adequate and law.beyond_sample < 0.01
    assert law.slope < 0 and law.fit_residual < 0.03
    x = _dense_bottom_edges(d, 300)
    boot = np.random.default_rng(0).integers(0, x.size, (2000, x.size))
    med_se = float(np.std(np.median(x[boot], axis=1)))
    mean_se = float(x.std(ddof=1) / math.sqrt(x.size))
    sd_se = float(np.std(x[boot].std(axis=1, ddof=1)))
    mc, mc_sd = 0.015, 0.075
    assert abs(law.median - np.median(x)) < 3 * med_se + mc, (law.median, np.median(x), med_se)
    assert abs(law.mean - x.mean()) < 3 * mean_se + mc, (law.mean, x.mean(), mean_se)
    assert abs(law.sd - x.std(ddof=1)) < 3 * sd_se + mc_sd, (law.sd, x.std(ddof=1), sd_se)
    assert abs(law.convention_edge - x.mean()) > 3 * mean_se + mc      # the convention's edge is not the mean
    assert stats.kstest(law.prob_beyond(x), "uniform").pvalue > 0.01
    # the draws of the model lie mostly beyond the convention's edge; ln 2 and 1 are among the levels
    assert 0.5 < law.prob_beyond(law.convention_edge) < 0.8
    assert law.prob_beyond(law.quantile(0.3)) == pytest.approx(0.3, abs=1e-3)
    assert law.convention_edge == law.edges[law.levels.index(1.0)]
    assert law.probability[law.levels.index(1.0)] == pytest.approx(1 - math.exp(-1))
    # the Gumbel model (the default) from the same edges: right in sign and size, 0.05 / 0.03 too extreme
    # in median / mean at this d (2000 draws); allowances 3 s.e. + 0.06 / 0.04 (sd: + 0.075)
    assert law.gumbel_median < law.median and law.gumbel_mean < law.mean
    assert abs(law.gumbel_median - np.median(x)) < 3 * med_se + 0.06
    assert abs(law.gumbel_mean - x.mean()) < 3 * mean_se + 0.04
    assert abs(law.gumbel_sd - x.std(ddof=1)) < 3 * sd_se + mc_sd


def test_edge_law_convention_edge_is_bulk_edge_and_errors():
    law = _toy_law(1 << 14)
    res = spectral.finite_n_edge_law(law, DELTA, "bottom", n=600)
    assert res.model == "gumbel"
    e1 = spectral.bulk_edge(law, DELTA, "bottom", convention="finite-n", n=600)
    assert res.convention_edge == float(e1.edge)
    assert res.median == res.gumbel_median and res.mean == res.gumbel_mean and res.draws.size == 0
    assert res.prob_beyond(res.quantile(0.3)) == pytest.approx(0.3)
    assert res.tail_samples[res.levels.index(1.0)] == pytest.approx((1 << 14) / 600, abs=1)
    with pytest.raises(spectral.SpectralError, match="n must be"):
        spectral.finite_n_edge_law(law, DELTA, n=1)
    with pytest.raises(spectral.SpectralError, match="levels"):
        spectral.finite_n_edge_law(law, DELTA, n=600, levels=(0.0, 1.0))
    with pytest.raises(spectral.SpectralError, match="model must be"):
        spectral.finite_n_edge_law(law, DELTA, n=600, model="tw")
    with pytest.raises(spectral.SpectralError, match="configs"):
        spectral.finite_n_edge_law(law, DELTA, n=600, configs=10, model="spike")
    with pytest.raises(spectral.SpectralError, match="side"):
        spectral.finite_n_edge_law(law, DELTA, "left", n=600)
    with pytest.raises(spectral.SpectralError, match="bounded on side='top'"):
        spectral.finite_n_edge_law(law, DELTA, "top", n=600)
    # too few samples beyond the smallest level: flagged, not hidden
    assert not spectral.finite_n_edge_law(law, DELTA, n=600, min_tail_samples=40, model="gumbel").adequate


def test_stratify_keeps_the_tail_and_the_edges():
    """spectral.stratify against the law it reduces (2^16 samples of the toy law, tail mass 0.01 whole, 8192
    of the other 64 881 by systematic sampling): the tail samples and weights are the full law's (so the
    truncation quantiles and tail counts are), E[D] agrees to 1e-3 (the law's Monte Carlo s.e. is 3e-3), and
    the finite-n edges at every level to 2e-3 (measured over seeds 0–5: |Δe| ≤ 7e-4, Gumbel sd ≤ 2.3e-4; a
    uniform subsample of 8192 was off by up to 0.018)."""
    law = _toy_law(1 << 16)
    full = spectral.finite_n_edge_law(law, DELTA, "bottom", n=600)
    sl = spectral.stratify(law, "bottom", tail_mass=0.01, bulk=8192, seed=3)
    k = sl.size - 8192
    assert float(jnp.sum(sl.weights)) == pytest.approx(1.0)
    e_full = np.sort(np.asarray(law.D)[:, 0, 0])
    np.testing.assert_array_equal(np.sort(np.asarray(sl.D)[:k, 0, 0]), e_full[:k])
    assert float(np.asarray(sl.weights)[:k].sum()) == pytest.approx(k / law.size)
    assert float(jnp.sum(sl.weights * sl.D[:, 0, 0])) == pytest.approx(float(jnp.mean(law.D)), abs=1e-3)
    red = spectral.finite_n_edge_law(sl, DELTA, "bottom", n=600)
    assert red.tail_samples == full.tail_samples
    np.testing.assert_allclose(red.edges, full.edges, atol=2e-3)
    assert red.gumbel_sd == pytest.approx(full.gumbel_sd, abs=1e-3)
    assert "stratified" in sl.source and sl.unbounded == law.unbounded
    with pytest.raises(spectral.SpectralError, match="tail_mass"):
        spectral.stratify(law, "bottom", tail_mass=1.5, bulk=100)
    with pytest.raises(spectral.SpectralError, match="bulk must be"):
        spectral.stratify(law, "bottom", tail_mass=0.01, bulk=law.size)
    with pytest.raises(spectral.SpectralError, match="side"):
        spectral.stratify(law, "left", tail_mass=0.01, bulk=100)
