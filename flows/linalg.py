"""Hessian spectra by autodiff: dense (small k) or Lanczos on Hessian-vector products."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def hvp_fn(f):
    """v ↦ ∇²f(x) v by forward-over-reverse autodiff."""
    g = jax.grad(f)
    return lambda x, v: jax.jvp(g, (x,), (v,))[1]


def lanczos(matvec, v0, m: int, ortho=None):
    """m-step Lanczos with full reorthogonalisation (under jit, lax.fori_loop).
    `ortho` (k,) optional unit vector projected out of every Krylov vector (tangent space).
    Returns the Ritz values (ascending)."""
    k = v0.shape[0]

    def proj(v):
        if ortho is not None:
            v = v - ortho * jnp.dot(ortho, v)
        return v

    v0 = proj(v0)
    v0 = v0 / jnp.linalg.norm(v0)
    V = jnp.zeros((m + 1, k)).at[0].set(v0)
    alphas = jnp.zeros(m)
    betas = jnp.zeros(m)

    def body(i, state):
        V, alphas, betas = state
        w = proj(matvec(V[i]))
        a = jnp.dot(w, V[i])
        mask = (jnp.arange(m + 1) <= i)[:, None]
        Vm = V * mask
        w = w - Vm.T @ (Vm @ w)
        w = w - Vm.T @ (Vm @ w)
        b = jnp.linalg.norm(w)
        V = V.at[i + 1].set(jnp.where(b > 1e-300, w / jnp.where(b > 0, b, 1.0), 0.0))
        return V, alphas.at[i].set(a), betas.at[i].set(b)

    V, alphas, betas = jax.lax.fori_loop(0, m, body, (V, alphas, betas))
    T = jnp.diag(alphas) + jnp.diag(betas[:-1], 1) + jnp.diag(betas[:-1], -1)
    return jnp.linalg.eigvalsh(T)


def tangent_basis(x):
    """(k, k−1) orthonormal basis of T = x^⊥ (x unit), from a Householder reflection."""
    k = x.shape[0]
    e1 = jnp.zeros(k).at[0].set(1.0)
    s = jnp.where(x[0] >= 0, 1.0, -1.0)
    h = x + s * e1
    h = h / jnp.linalg.norm(h)
    Q = jnp.eye(k) - 2.0 * jnp.outer(h, h)      # Q e1 = −s x ; columns 2..k span T
    return Q[:, 1:]


def dense_tangent_eigs(f, x):
    """All eigenvalues of ∇²f(x) restricted to T = x^⊥ (x unit), via a Householder basis."""
    B = tangent_basis(x)
    return jnp.linalg.eigvalsh(B.T @ jax.hessian(f)(x) @ B)


def dense_tangent_eigh(f, x):
    """Eigenvalues and eigenvectors (as (k, k−1) columns in the full space) of ∇²f(x) restricted to T = x^⊥."""
    B = tangent_basis(x)
    ev, V = jnp.linalg.eigh(B.T @ jax.hessian(f)(x) @ B)
    return ev, B @ V


def tangent_hessian_eigs(f, x, dense_max: int = 800, m: int = 60, key=None):
    """Eigenvalues of P ∇²f(x) P restricted to T = {v : vᵀx = 0} (x unit), ascending.
    Dense (all k−1 values) if k ≤ dense_max, else Lanczos Ritz values (extremes accurate)."""
    k = x.shape[0]
    if k <= dense_max:
        return np.asarray(jax.jit(dense_tangent_eigs, static_argnums=0)(f, x)), "dense"
    key = jax.random.PRNGKey(0) if key is None else key
    hv = hvp_fn(f)
    mv = lambda v: hv(x, v)
    ev = jax.jit(lambda v0: lanczos(mv, v0, min(m, k - 1), ortho=x))(jax.random.normal(key, (k,)))
    return np.asarray(ev), "lanczos"


def hessian_eigs(f, x, dense_max: int = 800, m: int = 60, key=None):
    """Eigenvalues of ∇²f(x) (dense if small, else Lanczos extremes), ascending."""
    k = x.shape[0]
    if k <= dense_max:
        return np.asarray(jnp.linalg.eigvalsh(jax.hessian(f)(x))), "dense"
    key = jax.random.PRNGKey(0) if key is None else key
    hv = hvp_fn(f)
    ev = jax.jit(lambda v0: lanczos(lambda v: hv(x, v), v0, min(m, k)))(jax.random.normal(key, (k,)))
    return np.asarray(ev), "lanczos"
