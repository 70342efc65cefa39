"""Losses, the training loss and the neural correlation function (THEORY §5).

    𝓛(w) = Σ_i ℓ(H(x_i; w), y_i)                 (a SUM over samples, not a mean)
    e_y  = −∂_p ℓ(0, y)                            (square: e_y = y; logistic ln(1+e^{−py}): y/2)
    N(u) = e_yᵀ H(X; u)                            (near 0: −∇𝓛(w) = ∇N(w) + O(‖w‖^{2L−1}))
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from .errors import FlowError


def square_loss(p, y):
    """ℓ(p, y) = (p − y)² / 2."""
    return 0.5 * (p - y) ** 2


def logistic_loss(p, y):
    """ℓ(p, y) = ln(1 + e^{−p y}), y ∈ {−1, +1};  e_y = y / 2."""
    return jax.nn.softplus(-p * y)


def get_loss(loss) -> Callable:
    if callable(loss):
        return loss
    if loss == "square":
        return square_loss
    if loss == "logistic":
        return logistic_loss
    raise FlowError(f"loss={loss!r}: use 'square', 'logistic' or a callable ℓ(p, y) (scalar p, y).")


def label_vector(loss, y):
    """e_y = −∂_p ℓ(0, y) by autodiff."""
    ell = get_loss(loss)
    y = jnp.asarray(y, dtype=jnp.float64)
    return -jax.vmap(jax.grad(ell, argnums=0))(jnp.zeros_like(y), y)


def require_signal(loss, y):
    """Raise when e_y ≡ 0 (e.g. y ≡ 0 with the square loss): N ≡ 0, the origin is a global minimum of the flow
    and every direction is a trivial KKT point, so nothing escapes for any δ or horizon."""
    import numpy as np

    if not np.any(np.asarray(label_vector(loss, y))):
        raise FlowError("y: every label gives e_y = −∂ℓ(0, y) = 0, so the NCF N ≡ 0: every direction is a trivial "
                        "KKT point and the flow never leaves the origin (for any delta or t1); check y / loss.")


def make_ncf(model, X, y, loss="square") -> Callable:
    """N(u) = e_yᵀ H(X; u) as a function of the parameter pytree."""
    e = label_vector(loss, y)
    X = jnp.asarray(X, dtype=jnp.float64)
    return lambda u: jnp.dot(e, model(u, X))


def make_loss(model, X, y, loss="square") -> Callable:
    """𝓛(w) = Σ_i ℓ(H(x_i; w), y_i)."""
    ell = get_loss(loss)
    X = jnp.asarray(X, dtype=jnp.float64)
    y = jnp.asarray(y, dtype=jnp.float64)
    return lambda w: jnp.sum(jax.vmap(ell)(model(w, X), y))
