"""Quadrature for expectations over low-dimensional laws (teacher coordinate ``z ~ N(0,1)``,
scalar Gaussian label noise), used instead of Monte Carlo where the law is low-dimensional
(THEORY §4 reference values are quadrature results).

Composite Gauss–Legendre on ``[−L, L]`` weighted by the Gaussian density: robust to kinks
in the integrand (e.g. ``T(y) = min(y, 3)``) and, with ``0`` a panel boundary, never
evaluates ``T`` at ``y = z² = 0`` (where ``1 − 1/y`` is infinite). Nodes are exactly
symmetric (``±z`` give bit-identical ``z²``), which the noiseless conditional expectations
rely on.
"""

from __future__ import annotations

import numpy as np


def gauss_legendre_composite(a, b, panels, order):
    """Nodes and weights of composite Gauss–Legendre on [a, b]."""
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1)
    h = np.diff(edges) / 2
    mid = (edges[:-1] + edges[1:]) / 2
    nodes = (mid[:, None] + h[:, None] * x[None]).ravel()
    weights = (h[:, None] * w[None]).ravel()
    return nodes, weights


def normal_nodes(panels: int = 1200, order: int = 10, L: float = 13.0):
    """Symmetric nodes/weights for ``E[f(z)]``, ``z ~ N(0, 1)`` (weights sum to 1)."""
    if panels % 2:
        panels += 1
    zp, wp = gauss_legendre_composite(0.0, L, panels // 2, order)  # positive half, mirrored
    z = np.concatenate([-zp[::-1], zp])
    w = np.concatenate([wp[::-1], wp]) * np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
    return z, w / w.sum()


def hermite_nodes(num: int = 60):
    """Gauss–Hermite (probabilists') nodes/weights for ``E[f(ε)]``, ``ε ~ N(0,1)``."""
    x, w = np.polynomial.hermite_e.hermegauss(num)
    return x, w / w.sum()


def is_standard_normal_noise(teacher) -> bool:
    try:
        from dmft.problem import _standard_normal_noise
    except Exception:  # pragma: no cover
        return False
    return teacher.noise is _standard_normal_noise


def teacher_nodes(teacher, panels=1200, order=10, noise_nodes=48, mc_samples=400_000, key=0):
    """Nodes ``z`` (N,), ``eps`` (N, noise_dim), ``y`` (N,) and weights (N,) for a k = 1 teacher.

    Noiseless or scalar standard-normal noise: tensor quadrature (method "quadrature").
    Any other noise law: Monte Carlo with ``mc_samples`` (method "monte-carlo").
    """
    import jax
    import jax.numpy as jnp

    if teacher.k != 1:
        from ._errors import SpectralError
        raise SpectralError(f"teacher.k must be 1 for this quadrature (got k = {teacher.k}); "
                            "use spectral.law_from_samples with Monte Carlo samples for k > 1.")
    z, wz = normal_nodes(panels, order)
    if teacher.noise_dim == 0:
        eps = np.zeros((z.size, 0))
        w, method = wz, "quadrature"
    elif teacher.noise_dim == 1 and is_standard_normal_noise(teacher):
        e, we = hermite_nodes(noise_nodes)
        zz, ee = np.meshgrid(z, e, indexing="ij")
        z, eps = zz.ravel(), ee.ravel()[:, None]
        w, method = (wz[:, None] * we[None]).ravel(), "quadrature"
    else:
        kz, ke = jax.random.split(jax.random.key(key))
        z = np.asarray(jax.random.normal(kz, (mc_samples,)))
        eps = np.asarray(teacher.sample_noise(ke, (mc_samples,)))
        w, method = np.full(mc_samples, 1.0 / mc_samples), "monte-carlo"
    y = np.asarray(teacher.labels(jnp.asarray(z)[:, None], jnp.asarray(eps)))
    return z, eps, y, w, method
