"""Replicas of a GD run's data with the same trajectory: a draw of ``X`` from its law given ``W^0 … W^T``.

Full-batch GD on ``(X, y)`` (``dmft.simulate``) moves ``W`` by ``W^{t+1} − W^t = −η_t (Xᵀ g^t / n + λ W^t)``
(hard rows zeroed with ``freeze_hard``), where ``g^t_i = ∂ℓ/∂r`` at ``r_i^t = W^tᵀ x_i`` is a function of
``(y_i, r_i^t, a^t)`` only. Split ``R^d`` into the span ``S`` of the teacher's ``k`` coordinates and of
``W^0 … W^T`` (at most ``k + m(T+1)`` dimensions) and its complement. Given the trajectory, ``X``'s
coordinates in ``S`` fix every ``r_i^t``, ``y_i`` and ``g^t``; every update lies in ``S``, so the complement part
``X_⊥`` must satisfy ``X_⊥ᵀ g^t = 0`` for each step, and nothing else. ``X_⊥`` is a priori standard Gaussian
and independent of the ``S`` part, so given the trajectory it is Gaussian on that linear subspace:

    X' = X P_S + (I_n − P_g) G (I_d − P_S),   G ~ N(0, 1)^{n×d},   P_g = projector on the columns of [g^0 … g^{T−1}]

has exactly the law of ``X`` given ``(W^0 … W^T, y)``, and GD on ``(X', y)`` from ``W^0`` retraces ``W^1 … W^T``
(test: ``tests/test_replica.py``). Why: the finite-d x–D dependence of a trained network's Hessian
``H = (1/n) Σ x_i x_iᵀ ⊗ D_i`` is exactly this constraint — a replica has the run's edge law, fresh
``x_i`` (no constraint) do not (``benchmarks/bench_edge_constraint.py``, docs/thresholds.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .problem import Problem, ProblemError, sample_grad


def step_gradients(problem: Problem, X, y, W_at, a) -> jax.Array:
    """``[g^0 … g^{T−1}]`` (n, m·T): the per-sample gradients ``∂ℓ/∂r`` that moved ``W^t → W^{t+1}``
    (``W_at``: (T+1, d, m), ``W^0 … W^T``; ``a``: (m,) frozen or (T+1, m) per step)."""
    W_at = jnp.asarray(W_at)
    T = W_at.shape[0] - 1
    a_at = jnp.broadcast_to(jnp.asarray(a, W_at.dtype), (T + 1, W_at.shape[-1]))
    grad = jax.vmap(lambda yy, rr, aa: sample_grad(problem, yy, rr, aa), in_axes=(0, 0, None))   # over samples
    g = jax.vmap(lambda W, a_t: grad(y, X @ W, a_t))(W_at[:T], a_at[:T])                        # over steps: (T, n, m)
    return g.transpose(1, 0, 2).reshape(X.shape[0], -1)


def _range_basis(A):
    """Orthonormal columns spanning the range of ``A`` (rows × cols), by SVD, with the columns beyond its
    numerical rank (singular values ≤ max(shape)·eps·s_max, numpy's ``matrix_rank`` rule) set to zero, so
    ``U (Uᵀ v)`` is the projector on the range under ``jit`` too; and the rank. A plain QR keeps ``cols``
    columns whatever the rank (session 50 audit: a unit with a_j = 0 gives zero gradient columns, and the QR's
    arbitrary extra directions removed degrees of freedom from the fresh part: E‖X(I − P_S)‖² 3700 ± 10 for
    the real data's 3843 ± 11)."""
    U, sv, _ = jnp.linalg.svd(A, full_matrices=False)
    keep = sv > max(A.shape) * jnp.finfo(A.dtype).eps * sv[0]
    return U * keep, jnp.sum(keep)


def trajectory_span(problem: Problem, W_at) -> jax.Array:
    """Orthonormal basis of the span ``S`` of the teacher's coordinates and ``W^0 … W^T`` (``W_at``:
    (T+1, d, m)); every GD update lies in it. Concrete input: (d, rank S) (at most k + m(T+1) columns; fewer
    when the weights are degenerate, e.g. a unit that never moves); under ``jit``: (d, k + m(T+1)) with the
    columns beyond the rank set to zero."""
    W_at = jnp.asarray(W_at)
    d = W_at.shape[1]
    basis = jnp.concatenate([jnp.eye(d, problem.k, dtype=W_at.dtype), W_at.transpose(1, 0, 2).reshape(d, -1)], axis=1)
    U, rank = _range_basis(basis)
    try:
        return U[:, :int(rank)]
    except jax.errors.ConcretizationTypeError:
        return U


def trajectory_replica(problem: Problem, X, y, W_at, a, key) -> jax.Array:
    """A draw ``X'`` of the data from its law given the GD trajectory ``W_at`` = ``W^0 … W^T`` (T+1, d, m) and the
    labels ``y`` (module docstring): the teacher's coordinates and the span of ``W^0 … W^T`` kept, the rest
    fresh standard Gaussian ``G = jax.random.normal(key, X.shape)`` projected orthogonal (over samples) to every
    step's per-sample gradients (their numerical range: rank-deficient gradients, e.g. a unit with a_j = 0 or a
    second layer trained from 0, leave the fresh part its full n − rank degrees of freedom). ``a``: the second layer, (m,) if frozen or (T+1, m) per step (``save_weights_at``
    of ``dmft.simulate`` returns both). Needs ``d > k + m(T+1)`` and ``n > m·T``."""
    X = jnp.asarray(X)
    W_at = jnp.asarray(W_at, X.dtype)
    n, d = X.shape
    if W_at.ndim != 3 or W_at.shape[1:] != (d, problem.m) or W_at.shape[0] < 2:
        raise ProblemError(f"W_at must be (T+1, d={d}, m={problem.m}) with T ≥ 1, the weights after 0 … T steps "
                           f"(dmft.simulate(save_weights_at=range(T+1))); got shape {tuple(W_at.shape)}.")
    T = W_at.shape[0] - 1
    if d <= problem.k + problem.m * (T + 1) or n <= problem.m * T:
        raise ProblemError(f"trajectory_replica needs d > k + m(T+1) = {problem.k + problem.m * (T + 1)} and n > m·T = "
                           f"{problem.m * T} (got d={d}, n={n}): the trajectory's span would be all of R^d or the "
                           f"gradients all of R^n; use fewer steps (T={T}) or larger d.")
    Qs = trajectory_span(problem, W_at)                            # span S: teacher coordinates + W^0 … W^T
    Ug, _ = _range_basis(step_gradients(problem, X, y, W_at, a))   # span of the step gradients in R^n (its rank)
    G = jax.random.normal(key, X.shape, X.dtype)
    G_perp = G - Ug @ (Ug.T @ G)
    return (X @ Qs) @ Qs.T + G_perp - (G_perp @ Qs) @ Qs.T
