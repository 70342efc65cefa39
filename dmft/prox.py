"""Per-sample proximal map of the stationary DMFT (S1) with an implicit-function derivative.

``prox(b) = argmin_r φ(r)``, ``φ(r) = ½(r − b)ᵀV^{-1}(r − b) + ℓ(y, F(r; a))``; its
stationarity condition is ``r + V g(r; a) = b`` with ``g = ∇_r ℓ``. The minimizer is found by
Newton on ``∇²φ = V^{-1} + D`` with a positive-definite shift (Levenberg–Marquardt, batched
m×m eigendecompositions by unrolled Jacobi, :mod:`dmft.small_linalg` — not LAPACK, whose
batched CPU kernels can deadlock XLA's thread pool) and backtracking on φ; the derivative is never taken through that
loop: differentiating the stationarity condition gives

    (I + V D) dr = db − dV g − V (∂g/∂a da + ∂g/∂θ dθ)     (D = ∇²_r ℓ at r, θ the problem's parameters)

which is the ``jax.custom_jvp`` rule (one m×m solve per sample). Where the loss∘readout is
non-convex the minimizer can jump between branches as b moves; the rule gives the
derivative of the branch found (the stationary solver reports the fraction of samples
whose stationarity residual is not met).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .problem import Problem, sample_grad, sample_grad_a, sample_hessian
from .small_linalg import eigh_batched, solve_batched

STEP_FRACTIONS = (1.0, 0.5, 0.25, 0.125, 1.0 / 32)


_eigh, _solve = eigh_batched, solve_batched   # module attributes: a test swaps _eigh for LAPACK


def _sym(x):
    return 0.5 * (x + jnp.swapaxes(x, -1, -2))


def per_sample_maps(problem: Problem) -> dict:
    """Per-sample maps vmapped over samples ``(y (N,), r (N, m))`` with a shared second layer
    ``a``, all by autodiff: ``grad_r`` (N, m), ``hess_r`` (N, m, m), ``grad_a``, ``hess_a``, ``loss`` (N,)."""
    v = lambda f: jax.vmap(f, in_axes=(0, 0, None))
    return dict(
        grad_r=v(lambda y, r, a: sample_grad(problem, y, r, a)),
        hess_r=v(lambda y, r, a: _sym(sample_hessian(problem, y, r, a))),
        grad_a=v(lambda y, r, a: sample_grad_a(problem, y, r, a)),
        hess_a=v(lambda y, r, a: jax.hessian(problem.sample_loss, argnums=2)(y, r, a)),
        loss=v(problem.sample_loss),
    )


def make_prox(problem: Problem, y, newton_steps: int):
    """``prox(b, V, a, r0) -> r`` for samples with labels ``y`` (N,), fields ``b`` (N, m),
    ``V`` (m, m) symmetric positive definite, second layer ``a``, Newton warm start ``r0``
    (N, m). Differentiable in ``(b, V, a)`` and in the floating-point leaves of ``problem``
    (parametric activations and losses) by the implicit-function rule (module docstring);
    ``r0`` only selects the branch."""
    dyn, static = eqx.partition(problem, eqx.is_inexact_array)

    def maps(dyn_):
        return per_sample_maps(eqx.combine(dyn_, static))

    def newton(b, V, a, r0, dyn_):
        f = maps(dyn_)
        grad_r, hess_r, loss_b = f["grad_r"], f["hess_r"], f["loss"]
        Vinv = _sym(jnp.linalg.inv(V))

        def phi(r):
            dr = r - b
            return 0.5 * jnp.einsum("ni,ij,nj->n", dr, Vinv, dr) + loss_b(y, r, a)

        def body(r, _):
            gphi = (r - b) @ Vinv + grad_r(y, r, a)
            ev, U = _eigh(Vinv + hess_r(y, r, a))
            shift = jnp.maximum(1e-8 * jnp.abs(jnp.max(ev, -1, keepdims=True)) - jnp.min(ev, -1, keepdims=True), 0.0) * 2.0
            step = jnp.einsum("nij,nj->ni", U, jnp.einsum("nji,nj->ni", U, gphi) / (ev + shift))
            f0 = phi(r)
            cands = jnp.stack([r - s * step for s in STEP_FRACTIONS])
            fc = jnp.stack([phi(c) for c in cands])
            fc = jnp.where(jnp.isfinite(fc), fc, jnp.inf)
            rn = jnp.take_along_axis(cands, jnp.argmin(fc, axis=0)[None, :, None], axis=0)[0]
            keep = jnp.min(fc, axis=0) <= f0
            # near the minimizer φ stops resolving progress (its changes fall below rounding,
            # residual floor ~1e-8): there accept the full step when φ does not increase beyond
            # rounding and the gradient norm halves (quadratic convergence to ~1e-15)
            g_full = (cands[0] - b) @ Vinv + grad_r(y, cands[0], a)
            full = (fc[0] <= f0 + 1e-13 * (1.0 + jnp.abs(f0))) & (
                jnp.sum(g_full**2, -1) < 0.25 * jnp.sum(gphi**2, -1))
            rn = jnp.where(full[:, None], cands[0], rn)
            return jnp.where((keep | full)[:, None], rn, r), None

        return jax.lax.scan(body, r0, None, length=newton_steps)[0]

    @jax.custom_jvp
    def prox_(b, V, a, r0, dyn_):
        return newton(b, V, a, r0, dyn_)

    @prox_.defjvp
    def prox_jvp(primals, tangents):
        b, V, a, r0, dyn_ = primals
        db, dV, da, _, ddyn = tangents
        r = prox_(b, V, a, r0, dyn_)
        f = maps(dyn_)
        g = f["grad_r"](y, r, a)
        # ∂g/∂a·da + ∂g/∂θ·dθ (θ: the problem's parameters, e.g. an activation's temperature)
        g_dot = jax.jvp(lambda aa, dd: maps(dd)["grad_r"](y, r, aa), (a, dyn_), (da, ddyn))[1]
        rhs = db - g @ dV.T - g_dot @ V.T
        J = jnp.eye(V.shape[-1], dtype=V.dtype) + jnp.einsum("ij,njk->nik", V, f["hess_r"](y, r, a))
        return r, _solve(J, rhs[..., None])[..., 0]

    def prox(b, V, a, r0):
        return prox_(b, V, a, r0, dyn)

    return prox
