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
