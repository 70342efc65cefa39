"""THEORY §4 reference values (closed-form quadrature results: tolerance 1e-3) and the
m = 1 reduction of the block equations to Lu–Li / Mondelli–Montanari."""

import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import spectral

PR = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
TSTAR = lambda y: 1.0 - 1.0 / y
TMIN = lambda y: jnp.minimum(y, 3.0)


@pytest.mark.parametrize("delta,cos2,edge", [(1.0, 0.2307, 0.9581), (2.0, 0.6389, 0.3395), (3.0, 0.8454, 0.0350)])
def test_tstar_reference(delta, cos2, edge):
    res = spectral.spectral_method(preprocess=TSTAR, teacher=PR, delta=delta)
    assert isinstance(res.eigenvalue, float) and res.has_outlier
    assert abs(res.eigenvalue - 1.0 / delta) < 1e-6          # exactly 1/δ
    assert abs(res.cosine2 - cos2) < 1e-3
    assert abs(res.edge - edge) < 1e-3


def test_tmin_reference():
    res = spectral.spectral_method(preprocess=TMIN, teacher=PR, delta=2.0)
    assert abs(res.eigenvalue - 4.1279) < 1e-3
    assert abs(res.edge - 3.983) < 1e-3
    assert abs(res.cosine2 - 0.2544) < 1e-3
    thr = spectral.spectral_method_threshold(preprocess=TMIN, teacher=PR)
    assert isinstance(thr, float) and abs(thr - 0.8009) < 1e-3
    below = spectral.spectral_method(preprocess=TMIN, teacher=PR, delta=0.75)   # below 0.8009
    assert not below.has_outlier and below.cosine2 == 0.0 and below.eigenvalue == below.edge


def test_thresholds():
    assert abs(spectral.spectral_method_threshold(preprocess=TSTAR, teacher=PR) - 0.5) < 1e-3
    assert abs(spectral.weak_recovery_threshold(PR) - 0.5) < 1e-3
    for Delta, ref in [(0.1, 0.5181), (1.0, 0.6466)]:
        t = dmft.Teacher(link=lambda z, e, D=Delta: z[0] ** 2 + jnp.sqrt(D) * e[0], k=1, noise_dim=1)
        assert abs(spectral.weak_recovery_threshold(t) - ref) < 1e-3


def test_block_equations_reduce_to_lu_li():
    """General m×m machinery with m = 1, D = T(y), ζ = z reproduces ψ/φ results (same nodes):
    edge, outlier and cos² = ψ'/(ψ' − φ') agree to 1e-6 (bisection tolerance ~1e-9)."""
    q = dict(panels=200, order=8)
    ref = spectral.spectral_method(TSTAR, PR, 2.0, quadrature=q)
    law = spectral.spectral_method_law(TSTAR, PR, quadrature=q)
    out = spectral.outlier(law, 2.0, "top")
    assert bool(out.exists) and out.convention == "strict"
    assert abs(float(out.edge) - ref.edge) < 1e-6
    assert abs(float(out.eigenvalue) - ref.eigenvalue) < 1e-6
    assert abs(float(out.cosine2) - ref.cosine2) < 1e-6


def test_unbounded_preprocessing_has_no_strict_edge():
    """T(y) = y on phase retrieval (support of T unbounded above): the strict limit has no right edge
    (the top eigenvalue grows like the largest y_i, dense d = 200 / 500: 7.8 / 8.9), so no number: before,
    the quadrature's cut at |z| = 13 gave an edge of 85.5 (τ = 13² = 169) and a threshold of 81.5 (user audit)."""
    res = spectral.spectral_method(lambda y: y, PR, 2.0, throw=False)
    assert res.status == spectral.UNBOUNDED_SUPPORT and not res.has_outlier and np.isnan(res.eigenvalue)
    assert res.edge == float("inf")
    with pytest.raises(spectral.SpectralError, match="unbounded above"):
        spectral.spectral_method(lambda y: y, PR, 2.0)
    with pytest.raises(spectral.SpectralError, match="unbounded above"):
        spectral.spectral_method_threshold(lambda y: jnp.log(y), PR)
    lin = dmft.Teacher(link=lambda z, e: z[0], k=1, noise_dim=0)
    assert spectral.spectral_method(lambda y: -y, lin, 2.0, throw=False).status == spectral.UNBOUNDED_SUPPORT
    assert spectral.spectral_method_law(lambda y: jnp.sqrt(y), PR).unbounded == ("top",)
    # bounded maps that approach their sup slowly are not flagged: 1 − 1/y, 1 − y^(−1/2), y e^(−y), −y on y = z²
    for T in (TSTAR, lambda y: 1 - 1 / jnp.sqrt(y), lambda y: y * jnp.exp(-y), lambda y: -y):
        assert spectral.spectral_method(T, PR, 2.0, throw=False).status in (spectral.SUCCESS, spectral.NO_OUTLIER)
    assert spectral.spectral_method_law(TSTAR, PR).unbounded == ()


def test_weak_recovery_needs_an_even_link():
    """E[G|y] != 0 (y = z + noise): first-order information, threshold 0 (with a warning), not the
    formula's 0.5 / 0.59 (user audit). Unknown quadrature options are named."""
    with pytest.warns(RuntimeWarning, match="first-order"):
        assert spectral.weak_recovery_threshold(dmft.Teacher(link=lambda z, e: z[0], k=1, noise_dim=0)) == 0.0
    noisy = dmft.Teacher(link=lambda z, e: z[0] + 0.3 * e[0], k=1, noise_dim=1)
    with pytest.warns(RuntimeWarning, match="first-order"):
        assert spectral.weak_recovery_threshold(noisy, quadrature=dict(panels=100, order=6), y_panels=200) == 0.0
    with pytest.raises(spectral.SpectralError, match="unknown option"):
        spectral.weak_recovery_threshold(PR, quadrature=dict(L=10.0))
