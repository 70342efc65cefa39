"""Finite-d Hessians of the empirical risk (THEORY §2/§3), matrix-free.

The W-block of the Hessian of ``R̂(W, a) = (1/n) Σ ℓ(y_i, F(Wᵀx_i; a)) + (λ/2)‖W‖²`` is
exactly ``H = (1/n) Σ_i (x_i x_iᵀ) ⊗ D_i + λ I`` with ``D_i = ∇²_r ℓ(y_i, F(r_i; a))``,
``r_i = Wᵀx_i`` (R̂ depends on W only through the r_i). Two HVPs, both from autodiff:

- ``method="autodiff"``: ``jvp(grad R̂)`` (forward-over-reverse), any risk;
- ``method="blocks"``: ``D_i`` once by autodiff, then ``V ↦ (1/n) Xᵀ[(X V) D] + λV``
  (two n×d×m matmuls: the cost of one gradient).

Vectors are W-shaped ``(d, m)``; flattening is row-major, so the dense matrix is
``(1/n) Σ kron(x_i x_iᵀ, D_i)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._errors import SpectralError
from .law import sample_blocks


def check_state(problem, X, y, W):
    """Shapes of a finite-d state, named before any tracing: X (n, d), y (n,), W (d, m) (session 50 audit: a
    transposed W or a short y gave dot_general / vmap size errors)."""
    X_shape, y_shape, W_shape = jnp.shape(X), jnp.shape(y), jnp.shape(W)
    if len(X_shape) != 2:
        raise SpectralError(f"X must be the (n, d) data matrix; got shape {X_shape}.")
    n, d = X_shape
    if y_shape != (n,):
        raise SpectralError(f"y must have shape (n,) = ({n},), one label per row of X; got {y_shape}.")
    if W_shape != (d, problem.m):
        raise SpectralError(f"W must have shape (d, m) = ({d}, {problem.m}); got {W_shape}.")


def finite_blocks(problem, X, y, a, W):
    """``D_i = ∇²_r ℓ(y_i, F(Wᵀx_i; a))`` (n, m, m) at a finite-d state, by autodiff."""
    check_state(problem, X, y, W)
    return sample_blocks(problem, y, X @ W, a)


def block_matvec(X, D, ridge=0.0):
    """``V ↦ (1/n) Σ_i x_i (D_i x_iᵀV)ᵀ + ridge·V`` for W-shaped V (d, m)."""
    n = X.shape[0]

    def mv(V):
        R = X @ V                                   # (n, m): x_iᵀ V
        return X.T @ jnp.einsum("nij,nj->ni", D, R) / n + ridge * V

    return mv


def hessian_vector_product(problem, X, y, a, W, *, method="autodiff"):
    """Closure ``V -> H V`` (V of shape W.shape = (d, m)) for the Hessian of
    ``dmft.empirical_risk`` in W at ``(W, a)``, ridge included."""
    import dmft

    check_state(problem, X, y, W)
    if method == "autodiff":
        g = jax.grad(lambda W_: dmft.empirical_risk(problem, W_, a, X, y))

        def hvp(V):
            return jax.jvp(g, (W,), (V,))[1]

        return hvp
    if method == "blocks":
        D = finite_blocks(problem, X, y, a, W)
        return block_matvec(X, D, problem.ridge)
    raise SpectralError(f"method must be 'autodiff' or 'blocks'; got {method!r}.")


def risk_gradient(problem, X, y, a):
    """``W -> ∇_W R̂`` (the cost floor an HVP is compared with)."""
    import dmft

    return jax.grad(lambda W_: dmft.empirical_risk(problem, W_, a, X, y))


def dense_block_matrix(X, D, ridge=0.0):
    """Dense ``(1/n) Σ_i kron(x_i x_iᵀ, D_i) + ridge·I`` of size (d m, d m) (oracle, small d)."""
    n, d = X.shape
    m = D.shape[-1]
    H = jnp.einsum("na,nb,nij->aibj", X, X, D) / n if d * m <= 2000 else _dense_blocks_loop(X, D)
    return H.reshape(d * m, d * m) + ridge * jnp.eye(d * m)


def _dense_blocks_loop(X, D):
    n, d = X.shape
    m = D.shape[-1]
    cols = [[(X.T * D[:, i, j]) @ X / n for j in range(m)] for i in range(m)]   # m² matmuls n d²
    return jnp.stack([jnp.stack(c, axis=-1) for c in cols], axis=-2).transpose(0, 2, 1, 3)


def dense_hessian(problem, X, y, a, W):
    """Dense W-Hessian of the empirical risk (d m × d m) via the exact block form."""
    D = finite_blocks(problem, X, y, a, W)
    return dense_block_matrix(X, D, problem.ridge)
