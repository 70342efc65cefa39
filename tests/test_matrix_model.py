"""spectral.matrix_model: finite-d draws of H = (1/n) Σ x_i x_iᵀ ⊗ D_i with (ζ_i, D_i) from a law.

Checked against an independent closed form: with m = 1 and D = −T(ζ²) the matrix is minus the Lu–Li /
Mondelli–Montanari spectral-method matrix of phase retrieval, whose top outlier, right edge and squared
cosine ``spectral.spectral_method`` gives (THEORY §4, reproduced to 1e-3 in test_spectral_methods.py).
Measured (session 44, T(y) = min(y, 3), δ = 6, law of 2^17 samples, 8 draws): d = 200: outlier 2.715 ± 0.029
against 2.777 (2.1 s.e.), constrained edge 2.289 ± 0.015 against 2.332 (the finite-d edge of a bounded
law sits inside the limit's by O(d^-2/3)), hard weight 0.600 ± 0.018 against cos² 0.596; d = 400: 2.752 ±
0.033, 2.299 ± 0.017, 0.588 ± 0.008. At δ = 3: 3.426 ± 0.057 / 3.441 ± 0.045 against 3.458, weight 0.383 /
0.370 against 0.385."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import spectral

PR = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)


def _T(y):
    return jnp.minimum(y, 3.0)


def _law(samples=2**17):
    z = jax.random.normal(jax.random.key(5), (samples, 1))
    return spectral.law_from_samples(-_T(z[:, 0] ** 2), zeta=z)


def test_matrix_model_reproduces_the_spectral_method_closed_form():
    delta, d, draws = 6.0, 200, 8
    th = spectral.spectral_method(preprocess=_T, teacher=PR, delta=delta)
    mm = spectral.matrix_model(_law(), delta, d, draws=draws, key=jax.random.key(1))
    assert mm.eigenvalues.shape == (draws, 6) and mm.constrained_edge.shape == (draws,)
    assert mm.setting["n"] == 1200 and mm.setting["method"] == "dense" and mm.setting["pool_over_n"] > 100

    def close(x, target, allowance=0.0):
        se = np.std(x, ddof=1) / np.sqrt(len(x))
        return abs(np.mean(x) - target) <= 4 * se + allowance, (np.mean(x), se, target)

    ok, info = close(-mm.eigenvalues[:, 0], float(th.eigenvalue))
    assert ok, info
    ok, info = close(mm.hard_weight_below_edge, float(th.cosine2))
    assert ok, info
    # the finite-d edge of a bounded law lies inside the limit's by O(d^-2/3): 0.04 at d = 200 (measured)
    ok, info = close(-mm.constrained_edge, float(th.edge), allowance=0.03)
    assert ok, info
    assert np.all(mm.eigenvalues[:, 0] <= mm.constrained_edge)      # Cauchy interlacing
    assert mm.success_fraction(0.25) == np.mean(mm.hard_weight_below_edge > 0.25)


def test_matrix_model_without_a_spike_has_no_hard_weight():
    """D ≡ 1: a Wishart matrix; the constrained edge is near (1 − δ^-1/2)², and no eigenvector below it
    carries more than O(1/d) hard weight."""
    z = jax.random.normal(jax.random.key(2), (4096, 1))
    law = spectral.law_from_samples(jnp.ones(4096), zeta=z)
    mm = spectral.matrix_model(law, 4.0, 150, draws=4, key=jax.random.key(3))
    assert np.all(np.abs(mm.constrained_edge - 0.25) < 0.05)
    assert np.all(mm.hard_weight_below_edge < 0.1)


def test_matrix_model_dense_and_lanczos_agree_on_the_same_draws():
    law = _law(2**14)
    a = spectral.matrix_model(law, 3.0, 120, draws=2, key=jax.random.key(7), method="dense")
    b = spectral.matrix_model(law, 3.0, 120, draws=2, key=jax.random.key(7), method="lanczos")
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, atol=1e-8)
    np.testing.assert_allclose(a.constrained_edge, b.constrained_edge, atol=1e-8)
    np.testing.assert_allclose(a.hard_weight[:, 0], b.hard_weight[:, 0], atol=1e-6)


def test_matrix_model_bad_input():
    law = _law(1024)
    with pytest.raises(spectral.SpectralError, match="law.size >= n"):
        spectral.matrix_model(law, 6.0, 200, draws=1)
    with pytest.raises(spectral.SpectralError, match="hard coordinates"):
        spectral.matrix_model(spectral.law_from_samples(jnp.ones(64)), 2.0, 10, draws=1)
    with pytest.raises(spectral.SpectralError, match="method"):
        spectral.matrix_model(law, 2.0, 10, draws=1, method="eigsh")
    with pytest.raises(spectral.SpectralError, match="draws"):
        spectral.matrix_model(law, 2.0, 10, draws=0)
    with pytest.raises(spectral.SpectralError, match="delta"):
        spectral.matrix_model(law, -1.0, 10, draws=1)


def test_matrix_model_counts_the_pool_s_distinct_blocks():
    """An antithetic DMFT law holds each block twice (±z share D when the hard overlap is 0): the setting's
    pool_distinct_over_n is half its pool_over_n, the number that says how far into the tail the pool reaches."""
    import benchmarks.bench_delta_star_trend as b
    from dmft import activations

    P = b.problem(activations.get("quadratic"), m=2)
    tr = dmft.solve(P, 3.0, 0.2, 4, 1024, jax.random.key(0), save_samples_at=(4,))
    law = spectral.law_from_dmft(P, tr, 4)
    mm = spectral.matrix_model(law, 3.0, 40, draws=1, key=jax.random.key(1))
    assert mm.setting["pool_over_n"] == pytest.approx(1024 / 120)
    assert mm.setting["pool_distinct_over_n"] == pytest.approx(512 / 120)
    # a law from iid samples has every block once
    z = jax.random.normal(jax.random.key(2), (600, 1))
    mm = spectral.matrix_model(spectral.law_from_samples(-z[:, 0] ** 2, zeta=z), 3.0, 40, draws=1)
    assert mm.setting["pool_distinct_over_n"] == mm.setting["pool_over_n"] == 5.0
