"""Parametric activations and losses (issue #7): equinox Modules whose parameters are traced
leaves of the :class:`dmft.Problem`, so a sweep over them is one compilation and thresholds
can be differentiated with respect to them (``spectral.threshold_gradient``).

Every member is smooth in its input *and* its parameters (C² at least), because the
threshold's derivative is taken through Monte Carlo expectations over fixed samples: a kink in
``ℓ''`` or ``σ''`` (Huber, ReLU) makes the per-sample Hessian ``D`` jump as a sample crosses it,
and the sample-average's derivative then misses the population's boundary term. ``Huber`` is
kept for the forward problems; use ``PseudoHuber`` when differentiating.

Activations ``σ_θ(r)``:
    SoftplusT(β)        softplus(β r)/β               (→ ReLU as β → ∞)
    SiLUT(β)            r · sigmoid(β r)              (SiLU at β = 1, → ReLU as β → ∞)
    GeLUT(β)            r · Φ(β r)                    (GeLU at β = 1)
    Hermite(c)          Σ_k c_k He_k(r)               (probabilists' Hermite polynomials; degree ≥ 3
                                                       makes D unbounded: no strict-convention edge)
    Combination(c)      Σ_i c_i φ_i(r), φ = (r, softplus, tanh, GeLU) by default
    SmoothReLUPower(p, β)  (softplus(β r)/β)^p        (smoothed ReLU^p)
Losses ``ℓ_θ(y, ŷ)`` of the residual ``e = y − ŷ``:
    PseudoHuber(w)      w² (√(1 + (e/w)²) − 1)        (ℓ'' = (1 + (e/w)²)^{-3/2} ∈ (0, 1]: D bounded)
    Huber(w)            ½e² for |e| ≤ w, w(|e| − w/2) beyond (ℓ'' jumps at |e| = w)
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

Array = jax.Array


def _param(x):
    return jnp.asarray(x, dtype=float)


class SoftplusT(eqx.Module):
    """``softplus(β r)/β``."""

    beta: Array = eqx.field(converter=_param)

    def __call__(self, r):
        return jax.nn.softplus(self.beta * r) / self.beta


class SiLUT(eqx.Module):
    """``r · sigmoid(β r)``."""

    beta: Array = eqx.field(converter=_param)

    def __call__(self, r):
        return r * jax.nn.sigmoid(self.beta * r)


class GeLUT(eqx.Module):
    """``r · Φ(β r)`` (Φ the standard normal cdf)."""

    beta: Array = eqx.field(converter=_param)

    def __call__(self, r):
        return r * ndtr(self.beta * r)


class Hermite(eqx.Module):
    """``Σ_k c_k He_k(r)`` with ``He_0 = 1, He_1 = r, He_{k+1} = r He_k − k He_{k−1}``."""

    coeffs: Array = eqx.field(converter=_param)

    def __call__(self, r):
        c = self.coeffs
        h_prev, h = jnp.ones_like(r), r
        out = c[0] * h_prev
        if c.shape[0] > 1:
            out = out + c[1] * h
        for k in range(1, c.shape[0] - 1):
            h_prev, h = h, r * h - k * h_prev
            out = out + c[k + 1] * h
        return out


def _identity(r):
    return r


def _gelu(r):
    return r * ndtr(r)


DEFAULT_BASIS = (_identity, jax.nn.softplus, jnp.tanh, _gelu)


class Combination(eqx.Module):
    """``Σ_i c_i φ_i(r)`` over a fixed basis (default: r, softplus, tanh, GeLU — each with
    bounded φ', φ'', so a bounded-curvature loss keeps ``D`` bounded: the strict convention
    applies and thresholds are smooth in ``c``). A design space for activations (issue #7)."""

    coeffs: Array = eqx.field(converter=_param)
    basis: tuple = eqx.field(static=True, default=DEFAULT_BASIS)

    def __call__(self, r):
        out = jnp.zeros_like(r)
        for c, phi in zip(self.coeffs, self.basis):
            out = out + c * phi(r)
        return out


class SmoothReLUPower(eqx.Module):
    """``(softplus(β r)/β)^p``."""

    p: Array = eqx.field(converter=_param)
    beta: Array = eqx.field(converter=_param)

    def __call__(self, r):
        return (jax.nn.softplus(self.beta * r) / self.beta) ** self.p


class PseudoHuber(eqx.Module):
    """``w² (√(1 + ((y − ŷ)/w)²) − 1)``: quadratic near 0, linear in the tails, C^∞."""

    width: Array = eqx.field(converter=_param)

    def __call__(self, y, yhat):
        u = (y - yhat) / self.width
        return self.width**2 * (jnp.sqrt(1.0 + u**2) - 1.0)


class Huber(eqx.Module):
    """Huber loss with transition at ``width`` (``ℓ''`` jumps there: not for derivatives)."""

    width: Array = eqx.field(converter=_param)

    def __call__(self, y, yhat):
        e = jnp.abs(y - yhat)
        return jnp.where(e <= self.width, 0.5 * e**2, self.width * (e - 0.5 * self.width))
