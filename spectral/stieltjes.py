"""Bulk of the limiting Hessian spectrum: the block Stieltjes equation (THEORY §2).

    S(λ) = ( E[ D (I + S D/δ)^{-1} ] − λ I )^{-1}                      (THEORY §2, "Bulk")

``S(λ) = lim (1/d) Σ_a [(H − λ)^{-1}]_{aa} ∈ C^{m×m}`` for ``H = (1/n) Σ x_i x_iᵀ ⊗ D_i``;
density ``ρ(λ) = +(1/π) Im tr S(λ + i0) / m`` (S = ∫ μ(dx)/(x − z): Im S > 0 above the axis).

Notation used in the code (all from the equation above):
    K_i = (I + S D_i/δ)^{-1},   B_i = D_i K_i  (symmetric when S, D_i are),
    F(S) = (E[B] − λ I)^{-1}    (the fixed-point map),
    dF(S)[X] = (1/δ) S E[B X B] S   (its derivative; L = matrix of dF on vec X).
Newton on ``G(S) = S − F(S)`` uses ``(I − L) vec ΔS = vec G``; the physical branch is the
attracting one: ``ρ(L) < 1`` (``dF`` is a positive map), with ``Im S > 0`` above the axis,
``S`` positive (negative) definite below (above) the support. The bulk edge is where the
real branch folds: ``ρ(L) → 1``.

Solvers (``solver=``): "newton" (Newton with damped-iteration fallback, default) or
"damped" (damped fixed-point iteration only). Complex ``λ + iε``: continuation in ``ε``
from far above the axis down to ``ε``. Real axis: continuation in ``λ`` from far outside
the support. Every result carries iterations, residual, status.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import (invalid_delta_status, MAX_ITERS, NO_EDGE, NONFINITE, SUCCESS, UNBOUNDED_SUPPORT, WRONG_BRANCH,
                      SpectralError, check_status, is_concrete)
from dmft.small_linalg import eigvalsh_small, solve_batched

from .law import SIDES, BlockLaw, for_jit, truncate

# ------------------------------------------------------------------------------------
# the map F and its derivative
# ------------------------------------------------------------------------------------


def _sym(S):
    return 0.5 * (S + S.T)


def blocks_B(S, D, delta):
    """``B_i = D_i (I + S D_i/δ)^{-1}`` for all samples (N, m, m)."""
    m = D.shape[-1]
    M = jnp.eye(m, dtype=S.dtype)[None] + jnp.einsum("ij,njk->nik", S, D) / delta  # I + S D/δ
    # X M = D  <=>  Mᵀ Xᵀ = Dᵀ = D
    Mt = jnp.swapaxes(M, 1, 2)
    X = solve_batched(Mt, D.astype(S.dtype))   # per sample: unrolled jnp, not LAPACK (dmft/small_linalg.py)
    return jnp.swapaxes(X, 1, 2)


def _map_from_B(B, lam, law: BlockLaw):
    """``F`` given the blocks ``B`` at S: ``(E[B] − λ I)^{-1}``."""
    EB = jnp.tensordot(law.weights, B, axes=(0, 0))
    return _sym(jnp.linalg.inv(EB - lam * jnp.eye(law.m, dtype=B.dtype)))


def _linearization_from_B(S, B, law: BlockLaw, delta):
    m = law.m
    K = jnp.einsum("n,nik,nlj->ijkl", law.weights.astype(B.dtype), B, B).reshape(m * m, m * m)
    P = jnp.einsum("ik,lj->ijkl", S, S).reshape(m * m, m * m)
    return (P @ K) / delta


def fixed_point_map(S, lam, law: BlockLaw, delta):
    """``F(S) = (E[D (I + S D/δ)^{-1}] − λ I)^{-1}``."""
    return _map_from_B(blocks_B(S, law.D, delta), lam, law)


def linearization(S, law: BlockLaw, delta):
    """Matrix ``L`` (m², m²) of ``X ↦ (1/δ) S E[B X B] S`` on row-major ``vec X``."""
    return _linearization_from_B(S, blocks_B(S, law.D, delta), law, delta)


def _spectral_radius(L):
    return jnp.max(jnp.abs(jnp.linalg.eigvals(L)))


def _rel_res(S, F):
    return jnp.linalg.norm(S - F) / jnp.maximum(jnp.linalg.norm(S), 1e-300)


# ------------------------------------------------------------------------------------
# one solve (Newton with damped fallback) at a fixed λ (real or complex)
# ------------------------------------------------------------------------------------


def _solve_at(law, lam, delta, S0, tol, max_steps, damping, solver, branch_ok, patience=None, B0=None):
    """Iterate from S0 until the relative residual ``‖S − F(S)‖/‖S‖ < tol``.
    Newton candidate ``S − (I − L)^{-1}(S − F(S))`` accepted when it stays on the physical
    branch within a trust region (‖ΔS‖ ≤ ‖S‖), else a damped step ``(1−α) S + α F(S)``.
    ``patience``: also stop (unconverged) after that many consecutive steps without a new smallest
    residual (None: only ``tol`` and ``max_steps`` stop it; see ``PROBE_PATIENCE``). ``B0``: the blocks
    ``B(S0)`` if known (they depend on S only, not on λ: a warm start from an earlier solve's S
    passes that solve's B and saves one per-sample solve).
    Returns (S, iterations, residual, B(S))."""
    m = law.m
    I2 = jnp.eye(m * m, dtype=S0.dtype)
    Bmap = lambda S: blocks_B(S, law.D, delta)
    # the blocks B(S) of the last F evaluation are carried: Newton's L at S reuses them
    # (one per-sample solve per step instead of two; same numbers)

    def cond(st):
        S, F, B, it, res, best, stalled = st
        go = (res > tol) & (it < max_steps) & jnp.isfinite(res)
        return go if patience is None else go & (stalled < patience)

    def body(st):
        S, F, B, it, res, best, stalled = st
        S_D = _sym((1.0 - damping) * S + damping * F)           # damped fixed-point step
        if solver == "newton":
            L = _linearization_from_B(S, B, law, delta)           # dF/dS
            dS = jnp.linalg.solve(I2 - L, (S - F).reshape(-1))   # (I − L) vec ΔS = vec(S − F)
            S_N = _sym(S - dS.reshape(m, m))
            # trust region: accept Newton when it stays on the physical branch and the step is
            # not larger than ‖S‖ (one F evaluation per step: under vmap both branches run)
            take_N = branch_ok(S_N) & jnp.all(jnp.isfinite(S_N)) & (
                jnp.linalg.norm(dS) <= jnp.linalg.norm(S) + 1e-300)
            S_new = jnp.where(take_N, S_N, S_D)
        else:
            S_new = S_D
        B_new = Bmap(S_new)
        F_new = _map_from_B(B_new, lam, law)
        res_new = _rel_res(S_new, F_new)
        stalled = jnp.where(res_new < best, 0, stalled + 1)
        return S_new, F_new, B_new, it + 1, res_new, jnp.minimum(best, res_new), stalled

    B0 = Bmap(S0) if B0 is None else B0
    F0 = _map_from_B(B0, lam, law)
    res0 = _rel_res(S0, F0)
    S, F, B, it, res, _, _ = jax.lax.while_loop(cond, body, (S0, F0, B0, jnp.asarray(0), res0, res0, jnp.asarray(0)))
    return S, it, res, B


# ------------------------------------------------------------------------------------
# complex λ + iε : density
# ------------------------------------------------------------------------------------


class StieltjesResult(eqx.Module):
    """Solution of the block Stieltjes equation at ``z = λ + iε`` (arrays broadcast over the
    λ/δ grid). ``density = +Im tr S / (π m)``. ``status``: 0 = converged on the physical
    branch (see ``spectral.message``). ``setting`` records law source and solver."""

    S: jax.Array
    lam: jax.Array
    eps: jax.Array
    delta: jax.Array
    density: jax.Array
    iterations: jax.Array
    residual: jax.Array
    converged: jax.Array
    status: jax.Array
    setting: dict = eqx.field(static=True, default=None)


def _im_psd(S, tol=1e-12):
    ImS = jnp.imag(_sym(S))
    return jnp.linalg.eigvalsh(ImS)[0] >= -tol * (1.0 + jnp.max(jnp.abs(ImS)))


def _stieltjes_one(law, lam, delta, eps, tol, max_steps, damping, solver, stages, spread):
    m = law.m
    scale = spread * (1.0 + 1.0 / jnp.sqrt(delta)) ** 2 + jnp.abs(lam) + 1.0
    eps_big = jnp.maximum(eps, 4.0 * scale)
    ratio = (eps_big / eps) ** (1.0 / max(stages - 1, 1))
    EB0 = jnp.tensordot(law.weights, law.D, axes=(0, 0))
    z0 = lam + 1j * eps_big
    S0 = jnp.linalg.inv(EB0 - z0 * jnp.eye(m))                   # S ≈ (E[D] − z)^{-1} for |z| large

    def stage(carry, j):
        S, it_tot = carry
        e = eps_big / ratio**j                                   # continuation ε_j → ε
        z = lam + 1j * e
        tol_j = jnp.where(j == stages - 1, tol, jnp.maximum(tol, 1e-6))
        S, it, res, _ = _solve_at(law, z, delta, S, tol_j, max_steps, damping, solver, _im_psd)
        return (S, it_tot + it), res

    (S, its), ress = jax.lax.scan(stage, (S0.astype(jnp.complex128), jnp.asarray(0)),
                                  jnp.arange(stages))
    res = ress[-1]
    conv = res <= tol
    branch = _im_psd(S)
    finite = jnp.all(jnp.isfinite(S))
    status = jnp.where(~finite, NONFINITE, jnp.where(~conv, MAX_ITERS,
                                                     jnp.where(~branch, WRONG_BRANCH, SUCCESS)))
    # S = ∫ μ(dx)/(x − z) has Im S > 0 for Im z > 0, so the density is +Im tr S/(π m)
    # (THEORY writes −(1/π) Im tr S; that sign belongs to the opposite convention s = ∫ μ/(z − x)).
    dens = jnp.imag(jnp.trace(S)) / (jnp.pi * m)
    return S, dens, its, res, conv & branch & finite, status


def _check_delta(delta):
    if is_concrete(delta):
        dn = np.asarray(delta)
        if not np.all(np.isfinite(dn)) or np.any(dn <= 0):
            raise SpectralError(f"delta (= n/d) must be finite and > 0; got {dn}. Pass the sample "
                                "ratio delta = n/d > 0.")


def stieltjes(law: BlockLaw, lam, delta, eps=1e-3, *, tol=1e-10, max_steps=100, damping=0.5,
              solver="newton", stages=5, throw=True) -> StieltjesResult:
    """Solve ``S = (E[D (I + S D/δ)^{-1}] − z I)^{-1}`` at ``z = λ + iε`` for every ``λ`` (and
    ``δ``) of the broadcast grid, by one vmapped, jitted solve (continuation in ``ε``;
    Newton with damped fallback). ``throw=True`` raises :class:`SpectralError` if any point
    fails; ``throw=False`` returns the status per point.

    Sign convention: ``S`` here is ``(E[·] − z)^{-1}`` as in THEORY, which has ``Im S > 0``
    for ``Im z > 0`` (the resolvent of ``H − z``), and the density is ``Im tr S/(π m)``.
    """
    if solver not in ("newton", "damped"):
        raise SpectralError(f"solver must be 'newton' or 'damped'; got {solver!r}.")
    _check_delta(delta)
    if is_concrete(eps) and np.any(np.asarray(eps) <= 0):
        raise SpectralError("eps (distance from the real axis) must be > 0; use bulk_edge for the real axis.")
    lam_b, delta_b, eps_b = jnp.broadcast_arrays(jnp.asarray(lam, float), jnp.asarray(delta, float),
                                                 jnp.asarray(eps, float))
    shape = lam_b.shape
    # λ points are vmapped in batches (lax.map(batch_size=...)) so that the per-sample
    # intermediates (batch · N · m² complex) stay within a few GB on any device
    per_point = max(1, law.size * law.m * law.m * 16 * 12)
    batch = int(max(1, min(lam_b.size, 4_000_000_000 // per_point)))
    S, dens, its, res, conv, status = _stieltjes_grid(for_jit(law), lam_b.ravel(), delta_b.ravel(), eps_b.ravel(),
                                                      tol, max_steps, damping, solver, stages, batch)
    out = StieltjesResult(S=S.reshape(shape + S.shape[1:]), lam=lam_b, eps=eps_b, delta=delta_b,
                          density=dens.reshape(shape), iterations=its.reshape(shape),
                          residual=res.reshape(shape), converged=conv.reshape(shape),
                          status=invalid_delta_status(status.reshape(shape), delta_b),
                          setting=dict(law=law.source, m=law.m, samples=law.size, solver=solver,
                                       tol=tol, stages=stages, damping=damping))
    check_status(out.status, "stieltjes", throw)
    return out


@eqx.filter_jit
def _stieltjes_grid(law, lam, delta, eps, tol, max_steps, damping, solver, stages, batch=None):
    ev = eigvalsh_small(jax.lax.stop_gradient(law.D))   # bracket only
    spread = jnp.max(ev) - jnp.min(ev)
    f = lambda l, d, e: _stieltjes_one(law, l, d, e, tol, max_steps, damping, solver, stages, spread)
    if batch is None or batch >= lam.shape[0]:
        return jax.vmap(f)(lam, delta, eps)
    return jax.lax.map(lambda args: f(*args), (lam, delta, eps), batch_size=batch)


def density(law: BlockLaw, lam, delta, eps=1e-3, **kw):
    """Bulk density ``+(1/π) Im tr S(λ + iε)/m`` (``Im S > 0`` above the axis; see :func:`stieltjes`)."""
    return stieltjes(law, lam, delta, eps, **kw).density


# ------------------------------------------------------------------------------------
# real axis outside the support: S(λ) and the edges
# ------------------------------------------------------------------------------------


def _definite(S, side):
    ev = jnp.linalg.eigvalsh(_sym(S))
    return jnp.where(side == 0, ev[0] > 0, ev[-1] < 0)


def _real_point(law, lam, delta, S0, side, tol, max_steps, damping, solver, patience=None, B0=None):
    """Real solve at λ outside the support from S0 (``B0`` = B(S0) if known); ok = converged ∧
    definite ∧ ρ(L) < 1. Returns (S, iterations, residual, ρ, ok, B(S))."""
    ok_branch = lambda S: _definite(S, side)
    S, it, res, B = _solve_at(law, lam, delta, S0, tol, max_steps, damping, solver, ok_branch, patience, B0)
    rho = _spectral_radius(_linearization_from_B(S, B, law, delta))
    ok = (res <= tol) & _definite(S, side) & (rho < 1.0) & jnp.all(jnp.isfinite(S))
    return S, it, res, rho, ok, B


def _far_point(law, delta, side):
    """A λ far outside the support on ``side`` (0 bottom, 1 top) and a point inside its hull."""
    ev = eigvalsh_small(jax.lax.stop_gradient(law.D))   # bracket only
    c_lo, c_hi = jnp.min(ev), jnp.max(ev)
    f = (1.0 + 1.0 / jnp.sqrt(delta)) ** 2
    span = (c_hi - c_lo) * f + 1.0
    lo_bound = jnp.minimum(c_lo, 0.0) * f                      # spectrum of H ≥ min(c_lo,0)(1+δ^{-1/2})²
    hi_bound = jnp.maximum(c_hi, 0.0) * f
    far = jnp.where(side == 0, lo_bound - span, hi_bound + span)
    inside = jnp.tensordot(law.weights, jnp.trace(law.D, axis1=1, axis2=2), axes=(0, 0)) / law.m  # spectral mean
    return far, inside


def far_start(law, lam):
    """Starting S far outside the support: ``(E[D] − λ I)^{-1}`` (the map F at S = 0)."""
    return jnp.linalg.inv(jnp.tensordot(law.weights, law.D, axes=(0, 0)) - lam * jnp.eye(law.m))


def real_stieltjes_path(law, delta, side, lam_target, S_far, lam_far, substeps, tol, max_steps,
                        damping, solver, patience=None):
    """Continuation in λ from (lam_far, S_far) to lam_target in ``substeps`` steps. With ``patience``
    (a bisection probe: only ``ok`` matters when a step fails) a stalled solve stops early and the
    steps after a failed one do not iterate; without it every step runs (bit-identical to before).
    Returns (S, iterations, residual, ρ, ok) at lam_target."""
    return _stieltjes_path_B(law, delta, side, lam_target, S_far, lam_far, substeps, tol, max_steps, damping,
                             solver, patience)[:5]


def _stieltjes_path_B(law, delta, side, lam_target, S_far, lam_far, substeps, tol, max_steps, damping, solver,
                      patience=None, B_far=None):
    """:func:`real_stieltjes_path` that takes ``B_far`` = B(S_far) if known, carries the blocks from
    one substep to the next, and also returns B(S)."""
    def step(carry, s):
        S, B, it_tot, ok_all = carry
        l = lam_far + (lam_target - lam_far) * (s + 1) / substeps
        steps = max_steps if patience is None else jnp.where(ok_all, max_steps, 0)
        S, it, res, rho, ok, B = _real_point(law, l, delta, S, side, tol, steps, damping, solver, patience, B)
        return (S, B, it_tot + it, ok_all & ok), (res, rho)

    B0 = blocks_B(S_far, law.D, delta) if B_far is None else B_far
    (S, B, its, ok), (res, rho) = jax.lax.scan(step, (S_far, B0, jnp.asarray(0), jnp.asarray(True)),
                                               jnp.arange(substeps))
    return S, its, res[-1], rho[-1], ok, B


class EdgeResult(eqx.Module):
    """Bulk edge on ``side``: ``edge`` (±inf under the strict convention where the support
    is unbounded), ``S`` (real, at the last point outside the support), ``rho`` = spectral
    radius of dF/dS there (→ 1 at the fold), ``bracket`` = width of the final bracket, ``probes`` =
    probes of the edge search (``search``), ``iterations`` = Newton steps of all its solves."""

    edge: jax.Array
    S: jax.Array
    rho: jax.Array
    bracket: jax.Array
    iterations: jax.Array
    residual: jax.Array
    status: jax.Array
    probes: jax.Array
    side: str = eqx.field(static=True, default="bottom")
    convention: str = eqx.field(static=True, default="strict")
    setting: dict = eqx.field(static=True, default=None)

    @property
    def converged(self):
        return self.status == SUCCESS


# Newton steps allowed to a bisection probe of the edge search (the solves at the far point, the
# edge and the outlier keep ``max_steps``). Half of the 44 probes lie inside the support, where no
# real solution exists and the solve only stops at its step limit: with 60 steps they were most of
# the cost of an outlier solve. A probe outside the support converges from the warm start at the
# last good point in a few steps (measured: outlier margins, edges, eigenvalues and cos² bit-identical
# with 20 and 60 on phase-retrieval DMFT laws, m = 4, 512 samples, δ = 2, 3, 5; 2.5× faster).
# An outside probe that needed more would count as inside: the edge would then sit a little
# farther out, never inside the support (see ``rho`` of the result, → 1 at the edge).
PROBE_STEPS = 20

# A probe inside the support has no real solution: its Newton iterates wander and used all
# PROBE_STEPS, twice (one per continuation substep): 82 % of the Newton steps of an edge search
# (session 37, phase-retrieval DMFT laws, m = 4, 4096 samples). Every probe outside converged with a
# new smallest residual at *every* step. So a probe's solve stops after PROBE_PATIENCE steps in a
# row without a new smallest residual (and a failed substep skips the next, which cannot make the
# probe succeed). Measured: the same bisection decisions, hence bit-identical edges, S, outliers,
# cos² and margins, on 192 edges/outliers (PR DMFT laws m = 4 finite-n at d = 250 / 500 / 2000,
# bounded GeLU / softplus / Huber laws m = 2 on both sides, toy laws m = 1–3); 2.3–2.6× fewer
# iterations; an ``outlier`` call on a 32 768-sample law 15.7 → 8.4 s, and 6.2 s with the blocks B(S)
# carried between solves (``_real_point``; docs/spectral.md).
PROBE_PATIENCE = 3


def _check_probe_options(probe_steps, probe_patience=PROBE_PATIENCE):
    if isinstance(probe_steps, bool) or not isinstance(probe_steps, (int, np.integer)) or probe_steps < 1:
        raise SpectralError(f"probe_steps must be a positive integer (Newton steps per edge-bisection probe); "
                            f"got {probe_steps!r}. Use the default {PROBE_STEPS} or e.g. max_steps.")
    if probe_patience is not None and (isinstance(probe_patience, bool) or not isinstance(probe_patience, (int, np.integer))
                                       or probe_patience < 1):
        raise SpectralError(f"probe_patience must be a positive integer (steps without a new smallest residual "
                            f"before a bisection probe counts as inside the support) or None (off); got "
                            f"{probe_patience!r}. Use the default {PROBE_PATIENCE}.")


# Bracket searches (``search=``): of the bulk edge here, of an outlier's root in ``spectral.outliers``.
# For the edge, both keep the predicate of a probe ("the real solution continued
# from the last good point exists on the physical branch") and stop with a bracket [good, bad] no wider
# than the initial one times 2^-bisections; the edge is the last good point.
#   "bisection": the midpoint every time (exactly ``bisections`` probes).
#   "secant" (default): at a square-root edge S(λ) − S_e ∝ √|λ_e − λ|, so g = (1 − ρ(L))² vanishes
#   linearly there; the zero e of the line through the last two good (λ, g) estimates the edge, and the
#   next probe aims at e − τ (τ = the change of e at its last update: a new good point just outside the
#   edge; never past half-way from the good point to e), or, once τ is below half the tolerance or a good
#   point's g stopped falling (its rounding floor next to the fold), at e + max(τ, wtol/4): a bad point
#   that closes the bracket. (Probing at e itself lands inside: g is linear only very near the fold.)
#   Safeguards: a target outside the bracket, no halving of the bracket nor of τ over three probes, or
#   ``bisections`` probes spent → the midpoint; so at most 2·bisections probes, the same final bracket.
SEARCHES = ("secant", "bisection")


def _check_search(search):
    if search not in SEARCHES:
        raise SpectralError(f"search must be one of {SEARCHES}; got {search!r}. Use 'secant' "
                            "(default, fewer probes) or 'bisection' (the midpoint every time).")


def _edge_core(law, delta, side, tol, max_steps, damping, solver, bisections, substeps, probe_steps=PROBE_STEPS,
               probe_patience=PROBE_PATIENCE, search="secant"):
    """Edge search: (edge, S, ρ, bracket, iterations, residual, status, probes)."""
    out = _edge_core_B(law, delta, side, tol, max_steps, damping, solver, bisections, substeps, probe_steps,
                       probe_patience, search)
    return out[:7] + out[8:]


def _edge_core_B(law, delta, side, tol, max_steps, damping, solver, bisections, substeps, probe_steps=PROBE_STEPS,
                 probe_patience=PROBE_PATIENCE, search="secant"):
    """:func:`_edge_core` that also returns the blocks B(S) at the edge (before ``probes``)."""
    far, inside = _far_point(law, delta, side)
    S_far, it0, res0, rho0, ok0, B_far = _real_point(law, far, delta, far_start(law, far), side, tol, max_steps,
                                                       damping, solver)

    # a probe: continue the real solution from the last good point (its blocks B(S) ride along with S:
    # they do not depend on λ, so no probe recomputes those of its start)
    def probe(lam, good, S_good, B_good):
        return _stieltjes_path_B(law, delta, side, lam, S_good, good, substeps, tol, min(probe_steps, max_steps),
                                 damping, solver, probe_patience, B_good)

    if search == "bisection":
        def body(carry, _):
            good, bad, S_good, B_good, it_tot = carry
            mid = 0.5 * (good + bad)
            S, its, res, rho, ok, B = probe(mid, good, S_good, B_good)
            good = jnp.where(ok, mid, good)
            bad = jnp.where(ok, bad, mid)
            S_good = jnp.where(ok, S, S_good)
            B_good = jnp.where(ok, B, B_good)
            return (good, bad, S_good, B_good, it_tot + its), None

        (good, bad, S_good, B_good, its), _ = jax.lax.scan(body, (far, inside, S_far, B_far, it0), None,
                                                           length=bisections)
        probes = jnp.asarray(bisections)
    else:
        good, bad, S_good, B_good, its, probes = _secant_edge_search(probe, far, inside, S_far, B_far, it0, rho0,
                                                                    bisections)
    res = _rel_res(S_good, _map_from_B(B_good, good, law))
    rho = _spectral_radius(_linearization_from_B(S_good, B_good, law, delta))
    # the inside point must really be inside: if the branch never failed the search is void
    moved = jnp.abs(good - far) > 0
    status = jnp.where(~ok0 | ~moved, NO_EDGE, SUCCESS)
    return good, S_good, rho, jnp.abs(bad - good), its, res, status, B_good, probes


def _secant_edge_search(probe, far, inside, S_far, B_far, it0, rho0, bisections):
    """The "secant" edge search (see ``SEARCHES``): (good, bad, S_good, B_good, iterations, probes)."""
    w0 = jnp.abs(inside - far)
    wtol = w0 * 2.0 ** (-bisections)
    nan = jnp.full_like(w0, jnp.nan)

    def cond(c):
        return (jnp.abs(c["bad"] - c["good"]) > wtol) & (c["k"] < 2 * bisections)

    def body(c):
        good, bad, e, tau = c["good"], c["bad"], c["e"], c["tau"]
        w = bad - good
        toward = jnp.sign(w)                                   # from outside toward the support
        close = (tau < 0.5 * wtol) | c["settled"]              # e has settled: close the bracket
        target = jnp.where(close, e + toward * jnp.maximum(tau, 0.25 * wtol),
                           e - toward * jnp.minimum(tau, 0.5 * jnp.abs(e - good)))
        frac = (target - good) / w
        slow = (jnp.abs(w) > 0.5 * c["w3"]) & ~(tau < 0.5 * c["t3"])
        use = jnp.isfinite(frac) & (frac > 0) & (frac < 1) & (close | ~slow) & (c["k"] < bisections)
        lam = jnp.where(use, target, good + 0.5 * w)
        S, its, res, rho, ok, B = probe(lam, good, c["S_good"], c["B_good"])
        g = (1.0 - rho) ** 2
        line = ok & (c["g_good"] > g) & (g > 0)                # a new good point with g still falling
        e_new = lam + g * (lam - good) / jnp.where(line, c["g_good"] - g, 1.0)
        # a good point whose g did not fall (g at its rounding floor, next to the edge): e is kept (or
        # moved up to that point if the point passed it) and the bracket is closed from the inside next
        flat = ok & ~line
        e_kept = jnp.where(toward * (e - lam) > 0, e, lam)
        e2 = jnp.where(line, e_new, jnp.where(flat, e_kept, e))
        tau2 = jnp.where(line, jnp.abs(e_new - e), tau)
        good2, bad2 = jnp.where(ok, lam, good), jnp.where(ok, bad, lam)
        return dict(good=good2, bad=bad2, S_good=jnp.where(ok, S, c["S_good"]), B_good=jnp.where(ok, B, c["B_good"]),
                    its=c["its"] + its, g_good=jnp.where(ok, g, c["g_good"]), e=e2, tau=tau2, k=c["k"] + 1,
                    settled=jnp.where(ok, flat & jnp.isfinite(e2), c["settled"]),
                    w1=jnp.abs(bad2 - good2), w2=c["w1"], w3=c["w2"], t1=tau2, t2=c["t1"], t3=c["t2"])

    c = jax.lax.while_loop(cond, body, dict(good=far, bad=inside, S_good=S_far, B_good=B_far, its=it0,
                                            g_good=(1.0 - rho0) ** 2, e=nan, tau=nan, k=jnp.asarray(0),
                                            settled=jnp.asarray(False), w1=w0,
                                            w2=4 * w0, w3=4 * w0, t1=nan, t2=nan, t3=nan))
    return c["good"], c["bad"], c["S_good"], c["B_good"], c["its"], c["k"]


_edge_core_jit = eqx.filter_jit(_edge_core)


def _resolve_convention(law, side, convention, n, what):
    if side not in SIDES:
        raise SpectralError(f"side must be 'bottom' or 'top'; got {side!r}.")
    if convention not in (None, "strict", "finite-n"):
        raise SpectralError(f"convention must be None, 'strict' or 'finite-n'; got {convention!r}.")
    if convention == "finite-n":
        if n is None:
            raise SpectralError("convention='finite-n' needs n (the number of samples, n = delta*d).")
        if isinstance(n, bool) or not np.isfinite(n) or float(n) != int(n) or n < 1:
            raise SpectralError(f"convention='finite-n': n must be a positive integer (the number of samples, "
                                f"n = round(delta*d)); got n={n!r}.")
        return truncate(law, n, side), "finite-n"
    if side in law.unbounded:
        if convention is None:
            raise SpectralError(
                f"{what}: the support of D is unbounded on side={side!r} (law.unbounded = "
                f"{law.unbounded}), so the limiting spectrum has no {side} edge. Pass "
                "convention='strict' (result: no edge, no outlier) or convention='finite-n' with "
                "n=delta*d (law truncated at its 1-1/n quantile).")
        return law, "strict-unbounded"
    return law, "strict"


def bulk_edge(law: BlockLaw, delta, side="bottom", *, convention=None, n=None, tol=1e-12,
              max_steps=60, damping=0.5, solver="newton", bisections=44, substeps=2,
              probe_steps=PROBE_STEPS, probe_patience=PROBE_PATIENCE, search="secant",
              throw=True) -> EdgeResult:
    """Edge of the bulk on ``side`` ("bottom": left edge, "top": right edge).

    A bracket search on λ between a point far outside the support and the spectral mean, with the
    predicate "the real solution continued from outside exists on the physical branch"
    (converged, ``S`` definite, ``ρ(dF/dS) < 1``), until the bracket is 2^-bisections of the initial
    one. ``search``: "secant" (default; probes aimed at the zero of (1 − ρ)², linear at a
    square-root edge, with bisection safeguards: 18–30 probes instead of 44 and 2× fewer Newton steps
    on 55 laws, the edge within 3.3e-12 of the bisection's; see ``SEARCHES``, docs/spectral.md and
    ``benchmarks/bench_bracket_search.py``) or "bisection" (the midpoint every time, ``bisections``
    probes). ``convention``: None (error if the side is
    unbounded), "strict" (edge = ∓inf on an unbounded side, status UNBOUNDED_SUPPORT),
    "finite-n" (law truncated at its 1 − 1/n quantile, :func:`spectral.truncate`).
    ``probe_steps``: Newton steps per bisection probe (``PROBE_STEPS``), ``max_steps`` for the
    other solves. ``probe_patience``: a probe stops, counted as inside the support, after that many
    Newton steps in a row without a new smallest residual (``PROBE_PATIENCE``; None: probes inside the
    support run to ``probe_steps``, the slower behaviour before it, same edges).
    """
    _check_delta(delta)
    _check_probe_options(probe_steps, probe_patience)
    _check_search(search)
    law_used, conv = _resolve_convention(law, side, convention, n, "bulk_edge")
    s = 0 if side == "bottom" else 1
    setting = dict(law=law_used.source, m=law.m, samples=law_used.size, delta=_f(delta), side=side,
                   solver=solver, bisections=bisections, max_steps=max_steps, probe_steps=min(probe_steps, max_steps),
                   probe_patience=probe_patience, search=search,
                   convention="strict" if conv == "strict-unbounded" else conv)
    if conv == "strict-unbounded":
        m = law.m
        return EdgeResult(edge=jnp.asarray(-jnp.inf if s == 0 else jnp.inf), S=jnp.zeros((m, m)),
                          rho=jnp.asarray(jnp.nan), bracket=jnp.asarray(0.0), iterations=jnp.asarray(0),
                          residual=jnp.asarray(jnp.nan), status=jnp.asarray(UNBOUNDED_SUPPORT),
                          probes=jnp.asarray(0), side=side, convention="strict", setting=setting)
    edge, S, rho, br, its, res, status, probes = _edge_core_jit(
        for_jit(law_used), jnp.asarray(delta, float), jnp.asarray(s), tol, max_steps, damping, solver, bisections,
        substeps, probe_steps, probe_patience, search)
    out = EdgeResult(edge=edge, S=S, rho=rho, bracket=br, iterations=its, residual=res,
                     status=invalid_delta_status(status, delta), probes=probes, side=side, convention=conv, setting=setting)
    check_status(out.status, f"bulk_edge(side={side!r})", throw)
    return out


def _f(x):
    try:
        return float(x)
    except Exception:
        return None
