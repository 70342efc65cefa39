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
import numpy as np
from jax.scipy.special import ndtr

from .problem import Tracer

Array = jax.Array


def _param(x):
    return jnp.asarray(x, dtype=float)


def _concrete(x):
    """``x`` as a numpy array, or None under a trace (parameters are traced when thresholds are differentiated)."""
    try:
        return np.asarray(x, float)
    except Exception:
        return None


def _positive(name, cls, x):
    v = _concrete(x)
    if v is not None and not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError(f"{cls}: {name} must be finite and > 0 (got {v.tolist()}); "
                         f"{name} = 0 divides by zero and {name} < 0 gives a different (reflected) function.")


def _nan_unless_positive(out, x):
    """Under a caller's trace ``x`` cannot be checked at construction (``_positive`` skips it): an invalid traced
    value makes the output NaN instead of a plausible number from another function (session 51 audit: a traced
    SoftplusT β < 0 gave the reflected −softplus(−|β| r)/|β| silently). Concrete values pass through untouched."""
    if not isinstance(x, Tracer):
        return out
    return jnp.where(jnp.all(jnp.isfinite(x) & (x > 0)), out, jnp.nan)


class SoftplusT(eqx.Module):
    """``softplus(β r)/β`` (β > 0: β = 0 gave inf everywhere, β < 0 the reflected −softplus(−|β| r)/|β|)."""

    beta: Array = eqx.field(converter=_param)

    def __check_init__(self):
        _positive("beta", "SoftplusT", self.beta)

    def __call__(self, r):
        return _nan_unless_positive(jax.nn.softplus(self.beta * r) / self.beta, self.beta)


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

    def __check_init__(self):
        if self.coeffs.ndim != 1 or self.coeffs.shape[0] < 1:
            raise ValueError(f"Hermite: coeffs must be a 1-d array (c_0, c_1, ...); got shape {self.coeffs.shape}.")

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


_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(60)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()


def gaussian_norm(fn):
    """``√E[σ(Z)²]``, Z ~ N(0, 1), by 60-node Gauss–Hermite quadrature (differentiable)."""
    return jnp.sqrt(jnp.sum(_GH_WEIGHTS * fn(jnp.asarray(_GH_NODES)) ** 2))


class Combination(eqx.Module):
    """``Σ_i c_i φ_i(r)`` over a fixed basis (default: r, softplus, tanh, GeLU — each with
    bounded φ', φ'', so a bounded-curvature loss keeps ``D`` bounded: the strict convention
    applies and thresholds are smooth in ``c``). A design space for activations (issue #7).
    ``normalize=True`` divides by the Gaussian norm ``√E[σ_c(Z)²]`` (scale-free family: with a
    frozen second layer, shrinking σ otherwise changes δ_NN through the output scale alone)."""

    coeffs: Array = eqx.field(converter=_param)
    basis: tuple = eqx.field(static=True, default=DEFAULT_BASIS)
    normalize: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        # zip() silently dropped extra coefficients and padded missing ones with nothing (a user audit ran a
        # design with a 5th coefficient whose gradient was exactly 0 and that stayed in the "designed" result)
        if self.coeffs.shape != (len(self.basis),):
            raise ValueError(f"Combination: coeffs must have one entry per basis function ({len(self.basis)}: "
                             f"{[getattr(f, '__name__', type(f).__name__) for f in self.basis]}); got shape "
                             f"{self.coeffs.shape}.")
        c = _concrete(self.coeffs)
        if self.normalize and c is not None and not np.any(c != 0):
            raise ValueError("Combination(normalize=True): all coefficients are 0, so the Gaussian norm is 0 (NaN).")

    def _raw(self, r):
        out = jnp.zeros_like(r)
        for c, phi in zip(self.coeffs, self.basis):
            out = out + c * phi(r)
        return out

    def __call__(self, r):
        if self.normalize:
            return self._raw(r) / gaussian_norm(self._raw)
        return self._raw(r)


class SmoothReLUPower(eqx.Module):
    """``(softplus(β r)/β)^p``."""

    p: Array = eqx.field(converter=_param)
    beta: Array = eqx.field(converter=_param)

    def __check_init__(self):
        _positive("beta", "SmoothReLUPower", self.beta)

    def __call__(self, r):
        return _nan_unless_positive((jax.nn.softplus(self.beta * r) / self.beta) ** self.p, self.beta)


class PseudoHuber(eqx.Module):
    """``w² (√(1 + ((y − ŷ)/w)²) − 1)``: quadratic near 0, linear in the tails, C^∞."""

    width: Array = eqx.field(converter=_param)

    def __check_init__(self):
        _positive("width", "PseudoHuber", self.width)

    def __call__(self, y, yhat):
        u = (y - yhat) / self.width
        return _nan_unless_positive(self.width**2 * (jnp.sqrt(1.0 + u**2) - 1.0), self.width)


class Huber(eqx.Module):
    """Huber loss with transition at ``width`` (``ℓ''`` jumps there: not for derivatives)."""

    width: Array = eqx.field(converter=_param)

    def __check_init__(self):
        _positive("width", "Huber", self.width)

    def __call__(self, y, yhat):
        e = jnp.abs(y - yhat)
        return _nan_unless_positive(jnp.where(e <= self.width, 0.5 * e**2, self.width * (e - 0.5 * self.width)), self.width)


# ---------------------------------------------------------------------------------------------
# the setting in which the first phase converges on the DMFT horizon (bench_two_route)
# ---------------------------------------------------------------------------------------------


def staircase_link(z, eps):
    """``y = z_1 + z_2² − 1``: z_1 easy (linear), z_2 hard (even)."""
    return z[0] + z[1] ** 2 - 1.0


STAIRCASE_TEACHER = None


def staircase_problem(activation, loss, ridge, second_layer=(1.0, 0.5), init_scale=1.0):
    """Two-layer student of width ``len(second_layer)`` (frozen, unequal entries: no rotation
    symmetry among the hidden units), ``Q_0 = init_scale² I``, ``M^0 = 0``, on ``y = z_1 + z_2² − 1``. The
    teacher object is shared across calls so jitted solvers are reused when only the
    parameters change (a fresh lambda per call would recompile)."""
    global STAIRCASE_TEACHER
    from .problem import Init, Problem, Teacher, TwoLayer

    if STAIRCASE_TEACHER is None:
        STAIRCASE_TEACHER = Teacher(link=staircase_link, k=2, noise_dim=0)
    m = len(second_layer)
    return Problem(teacher=STAIRCASE_TEACHER,
                   student=TwoLayer(activation=activation, width=m, second_layer=jnp.asarray(second_layer, float)),
                   loss=loss, ridge=ridge, init=Init(q0=jnp.asarray(init_scale, float) ** 2 * jnp.eye(m),
                                                     overlap=jnp.zeros((2, m))))


# activation families by name: (constructor from params, initial params) — used by
# ``deltann design`` and the design benchmark
ACTIVATION_FAMILIES = {
    "combination": (lambda p: Combination(p["c"]), {"c": [0.0, 1.0, 0.0, 0.0]}),     # starts at softplus
    # unit Gaussian norm (scale-free design space), starts at softplus/‖softplus‖
    "combination-normalized": (lambda p: Combination(p["c"], normalize=True), {"c": [0.0, 1.0, 0.0, 0.0]}),
    "softplus-t": (lambda p: SoftplusT(p["beta"]), {"beta": 1.0}),
    "silu-t": (lambda p: SiLUT(p["beta"]), {"beta": 1.0}),
    "gelu-t": (lambda p: GeLUT(p["beta"]), {"beta": 1.0}),
}
_STAIRCASE_FAMILIES: dict = {}


def staircase_family(name: str):
    """``params -> Problem``: the staircase setting with activation family ``name`` (keys of
    ``ACTIVATION_FAMILIES``), pseudo-Huber width ``params["width"]``, ridge ``params["ridge"]`` and
    (optional) ``params["init_scale"]`` (``Q_0 = s² I``).
    The same function object is returned for the same name (jit caches are keyed on it)."""
    if name not in ACTIVATION_FAMILIES:
        raise KeyError(f"unknown activation family {name!r}; choose one of {', '.join(ACTIVATION_FAMILIES)}.")
    if name not in _STAIRCASE_FAMILIES:
        act = ACTIVATION_FAMILIES[name][0]

        def family(p):
            return staircase_problem(act(p), PseudoHuber(p["width"]), p["ridge"], init_scale=p.get("init_scale", 1.0))

        family.__name__ = f"staircase_{name.replace('-', '_')}"
        _STAIRCASE_FAMILIES[name] = family
    return _STAIRCASE_FAMILIES[name]
