"""Finite-d data and the empirical risk (THEORY §0, §3).

By rotation invariance of ``x ~ N(0, I_d)`` the teacher is taken as the first ``k``
coordinate axes: ``Θ* = [e_1 .. e_k]``, so ``z = x[:k]`` and ``M = W[:k]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .problem import Problem


def sample_data(problem: Problem, key, d: int, n: int, dtype=jnp.float64):
    """Draw ``X`` (n, d) with i.i.d. N(0, 1) entries, ``z = X[:, :k]``, labels ``y`` (n,)."""
    kx, ke = jax.random.split(key)
    X = jax.random.normal(kx, (n, d), dtype=dtype)
    eps = problem.teacher.sample_noise(ke, (n,)).astype(dtype)
    y = problem.teacher.labels(X[:, : problem.k], eps)
    return X, y


def fixed_test_set(problem: Problem, key, samples: int, dtype=jnp.float64):
    """A test set in the projected space, fixed across time (common random numbers): ``z`` (samples, k) and
    ``ξ`` (samples, m) standard normal, labels ``y`` (samples,). The test inputs' fields are
    ``r = M^tᵀ z + F ξ`` with ``F Fᵀ`` the orthogonal part's Gram (``W_⊥ᵀW_⊥`` at finite d, ``C_θ(t,t)`` in the
    DMFT): the exact law of ``Wᵀx`` for a fresh ``x``. Shared by ``dmft.simulate`` and ``dmft.solve(test_samples=)``."""
    ktz, kte, ktx = jax.random.split(key, 3)
    zt = jax.random.normal(ktz, (samples, problem.k), dtype)
    yt = problem.teacher.labels(zt, problem.teacher.sample_noise(kte, (samples,)).astype(dtype))
    xit = jax.random.normal(ktx, (samples, problem.m), dtype)
    return zt, yt, xit


def init_weights(problem: Problem, key, d: int, random_overlap: bool = False, dtype=jnp.float64):
    """``W^0 = Θ* M^0 + W_⊥^0``, rows of ``√d W_⊥^0`` i.i.d. ``N(0, Q_0)`` (shape (d, m)).

    With ``random_overlap=False`` (default) ``W_⊥^0`` is exactly orthogonal to ``Θ*`` so the
    overlap is exactly ``M^0``; with ``True`` the first ``k`` rows are random too, giving an
    ``O(d^{-1/2})`` random overlap as for an ordinary random initialization.
    """
    k, m = problem.k, problem.m
    L = jnp.linalg.cholesky(problem.init.q0)
    G = jax.random.normal(key, (d, m), dtype=dtype) @ L.T.astype(dtype) / jnp.sqrt(d)
    if random_overlap:
        return G.at[:k].add(problem.init.overlap.astype(dtype))
    return G.at[:k].set(problem.init.overlap.astype(dtype))


def empirical_risk(problem: Problem, W, a, X, y, weights=None):
    """``R̂(W, a) = (1/n) Σ_i ell(y_i, F(W^T x_i; a)) + (λ/2)‖W‖² + (λ_a/2)‖a‖²``.

    ``weights`` (n,) optionally replaces ``1/n`` (used to mask padded samples in δ sweeps).
    """
    R = X @ W
    losses = jax.vmap(problem.sample_loss, in_axes=(0, 0, None))(y, R, a)
    if weights is None:
        data = jnp.mean(losses)
    else:
        data = jnp.sum(weights * losses)
    return data + 0.5 * problem.ridge * jnp.sum(W**2) + 0.5 * problem.ridge_second * jnp.sum(a**2)
