"""Named activations (one table for the CLI, benchmarks and tests). Derivatives always come
from autodiff; these are plain jax.numpy functions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import erf


def gelu(x):
    """Exact (erf) GeLU ``x Φ(x)``."""
    return 0.5 * x * (1 + erf(x / jnp.sqrt(2.0)))


def quadratic(x):
    return x**2


def relu_power(p: float):
    """``relu(x)^p``."""
    return lambda x: jax.nn.relu(x) ** p


ACTIVATIONS = {
    "gelu": gelu,
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "quadratic": quadratic,
    "erf": erf,
    "softplus": jax.nn.softplus,
    "silu": jax.nn.silu,
}


def get(name: str, power: float = 2.0):
    """Activation by name (``relu-power`` uses ``power``); KeyError if unknown."""
    if name == "relu-power":
        return relu_power(power)
    return ACTIVATIONS[name]
