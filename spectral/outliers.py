"""Outliers along hard directions (THEORY §2) and the squared cosine of their eigenvector.

With ``ζ ∈ R^h`` the coordinates of ``x`` along the hard directions, ``B = D (I + S D/δ)^{-1}``,
the (h m)×(h m) symmetric matrix

    A(λ)_{ab} = E[ ζ_a ζ_b B ] − λ δ_ab I                               (THEORY §2)

is the limit of the Schur complement of the hard block of ``H − λ``; an outlier ``λ_0``
outside the bulk solves ``det A(λ_0) = 0`` (equivalently ``det(I + S E[(ζ²−1) B]) = 0``
since ``S^{-1} = E[B] − λ``), and

    cos² = −1 / (bᵀ A'(λ_0) b),   b the unit null vector of A(λ_0).

Derivation of the cosine formula (m × m, derived here). Split ``R^{dm} = (Θ_h ⊗ R^m) ⊕
(Θ_h^⊥ ⊗ R^m)``. The hard block of the resolvent ``G(z) = (H − z)^{-1}`` is the inverse of
the Schur complement: ``(Θ_hᵀ ⊗ I) G(z) (Θ_h ⊗ I) = A_d(z)^{-1} → A(z)^{-1}``. Near an
isolated eigenvalue ``λ_0`` with unit eigenvector ``u``, ``G(z) = u uᵀ/(λ_0 − z) + O(1)``, so
the hard block is ``c cᵀ/(λ_0 − z) + O(1)`` with ``c = (Θ_hᵀ ⊗ I) u``. On the other side,
``A(z) = A(λ_0) + (z − λ_0) A'(λ_0) + …`` with ``A(λ_0) b = 0`` gives, by first-order
perturbation of the null eigenvalue ``μ(z) = (z − λ_0) bᵀA'b``,
``A(z)^{-1} = b bᵀ/((z − λ_0) bᵀ A' b) + O(1)``. Matching the residues,
``c cᵀ = −b bᵀ/(bᵀA'b)``: the eigenvector's hard block is parallel to ``b`` and its squared
norm — the overlap with the hard subspace summed over the m blocks — is
``cos² = ‖c‖² = −1/(bᵀ A'(λ_0) b)``. ``A'`` includes ``S'(λ)``:

    A'(λ)_{ab} = −δ_ab I − (1/δ) E[ζ_a ζ_b B S' B],  S' = (I − L)^{-1} vec(S²)

(``dB = −(1/δ) B dS B``; differentiating ``S = F(S, λ)`` gives ``(I − L) S' = ∂_λF = S²``,
``L`` the linearization of ``F``, see ``spectral.stieltjes``). Since ``S' ≻ 0`` outside the
support, ``A' ≼ −I``: every eigenvalue of ``A`` decreases strictly in λ, so on each side
the root is unique per eigenvalue branch and ``0 < cos² ≤ 1``.

m = 1, D = T(y), h = 1 (Lu–Li / Mondelli–Montanari): with ``s = −δ/λ̃``, ``z = ψ(λ̃)``,
``A = φ(λ̃) − ψ(λ̃)``, ``dA/dz = (φ' − ψ')/ψ'`` and ``cos² = ψ'/(ψ' − φ')``
(checked numerically against ``spectral.spectral_method`` in the tests).

Sides: "bottom" (negative curvature, λ_0 below the left edge: the smallest eigenvalue of
``A`` crosses 0) and "top" (the largest eigenvalue of ``A`` crosses 0 above the right edge).
The equation is scanned only outside the bulk (inside it, real-axis sign changes of
``det A`` are artifacts).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from ._errors import NO_OUTLIER, SUCCESS, UNBOUNDED_SUPPORT, SpectralError, check_status, invalid_delta_status
from .law import BlockLaw, for_jit
from .stieltjes import (PROBE_PATIENCE, PROBE_STEPS, _check_delta, _check_probe_options, _check_search, _far_point, _f,
                        _real_point,
                        _resolve_convention, _sym, _edge_core_B, _linearization_from_B, blocks_B, far_start)


def A_matrix(S, lam, law: BlockLaw, delta):
    """``A(λ)_{ab} = E[ζ_a ζ_b D (I + S D/δ)^{-1}] − λ δ_ab I`` as an (h m)×(h m) matrix."""
    return _A_from_B(blocks_B(S, law.D, delta), lam, law)


def _A_from_B(B, lam, law: BlockLaw):
    """:func:`A_matrix` given the blocks ``B = B(S)`` (``spectral.stieltjes.blocks_B``)."""
    m, h = law.m, law.zeta.shape[1]
    A = jnp.einsum("n,na,nb,nij->aibj", law.weights, law.zeta, law.zeta, B).reshape(h * m, h * m)
    return _sym(A) - lam * jnp.eye(h * m)


def A_derivative(S, lam, law: BlockLaw, delta, B=None):
    """``A'(λ) = −I − (1/δ) E[ζ_a ζ_b B S' B]`` with ``S' = (I − L)^{-1} vec(S²)`` (``B``: the
    blocks B(S) if known)."""
    m, h = law.m, law.zeta.shape[1]
    B = blocks_B(S, law.D, delta) if B is None else B
    L = _linearization_from_B(S, B, law, delta)
    Sp = jnp.linalg.solve(jnp.eye(m * m) - L, (S @ S).reshape(-1)).reshape(m, m)   # dS/dλ
    BSB = jnp.einsum("nij,jk,nkl->nil", B, _sym(Sp), B)
    Ap = -jnp.einsum("n,na,nb,nij->aibj", law.weights, law.zeta, law.zeta, BSB).reshape(h * m, h * m) / delta
    return _sym(Ap) - jnp.eye(h * m), Sp


class OutlierResult(eqx.Module):
    """Outlier on ``side`` along the hard subspace. ``exists`` False ⇒ ``eigenvalue`` = nan,
    ``cosine2`` = 0 and ``status`` NO_OUTLIER (or UNBOUNDED_SUPPORT under the strict
    convention on an unbounded side). ``vector`` = b (hard block of the eigenvector,
    length h m); ``margin`` = extreme eigenvalue of A at the edge, or at ``level`` where that
    lies beyond the edge (sign decides existence)."""

    eigenvalue: jax.Array
    cosine2: jax.Array
    edge: jax.Array
    exists: jax.Array
    vector: jax.Array
    margin: jax.Array
    residual: jax.Array
    iterations: jax.Array
    status: jax.Array
    side: str = eqx.field(static=True, default="bottom")
    convention: str = eqx.field(static=True, default="strict")
    setting: dict = eqx.field(static=True, default=None)


def _branch_index(side, branch, size):
    """Position in the ascending eigenvalues of A of eigenvalue branch ``branch`` counted from
    the ``side``'s extreme (0: the extreme one: smallest for "bottom", largest for "top")."""
    return jnp.where(side == 0, branch, size - 1 - branch)


def _ext_eig(A, side, branch=0):
    ev = jnp.linalg.eigvalsh(A)
    return ev[_branch_index(side, branch, A.shape[0])]


def _outlier_core(law, delta, side, tol, max_steps, damping, solver, bisections, substeps, level,
                  probe_steps=PROBE_STEPS, branch=0, probe_patience=PROBE_PATIENCE, search="secant"):
    # every solve below is warm-started with its start's blocks B(S) (they do not depend on λ), and A(λ)
    # is formed from the blocks of the solution: no per-sample solve is repeated
    edge, S_edge, rho, br, its_e, res_e, st_e, B_edge, _ = _edge_core_B(law, delta, side, tol, max_steps, damping,
                                                                        solver, bisections, substeps, probe_steps,
                                                                        probe_patience, search)
    far, _ = _far_point(law, delta, side)
    sgn = jnp.where(side == 0, 1.0, -1.0)          # sgn·μ(A) > 0 far outside, decreasing toward the edge
    # the outlier is sought beyond ``cut`` = the edge or ``level``, whichever is farther out
    # (level = −ridge asks for a negative eigenvalue of the Hessian including the ridge)
    cut = jnp.where(side == 0, jnp.minimum(edge, level), jnp.maximum(edge, level))
    far = jnp.where(side == 0, jnp.minimum(far, cut - jnp.abs(edge - far)), jnp.maximum(far, cut + jnp.abs(edge - far)))
    S_cut, _, _, _, _, B_cut = _real_point(law, cut, delta, S_edge, side, tol, max_steps, damping, solver, B0=B_edge)
    S_cut = jnp.where(cut == edge, S_edge, S_cut)
    B_cut = jnp.where(cut == edge, B_edge, B_cut)
    margin = _ext_eig(_A_from_B(B_cut, cut, law), side, branch)
    exists = (sgn * margin < 0) & (st_e == SUCCESS)

    # f(λ) = sgn·μ_ext(A(λ)) on the bracket [a, b] = [far (f > 0), cut (f < 0)]; the real S(λ) at a
    # new point is warm-started from the bracket end nearest in λ (both ends are on the physical branch)
    def evaluate(lam, a, b, Sa, Sb, Ba, Bb):
        # no root (only reached under all_outliers' vmap, where the lax.cond below is a select and this
        # branch's result is discarded): solve at the cut, which converges at once, not at a point far
        # from both ends, which would cost every batched step the full max_steps
        lam = jnp.where(exists, lam, b)
        near_a = jnp.abs(lam - a) < jnp.abs(lam - b)
        S0, B0 = jnp.where(near_a, Sa, Sb), jnp.where(near_a, Ba, Bb)
        S, its, res, _, ok, B = _real_point(law, lam, delta, S0, side, tol, max_steps, damping, solver, B0=B0)
        return sgn * _ext_eig(_A_from_B(B, lam, law), side, branch), S, B, its

    def bisect(carry, _):
        a, b, Sa, Sb, Ba, Bb, it = carry            # a: far side, b: edge side
        mid = 0.5 * (a + b)
        f, S, B, its = evaluate(mid, a, b, Sa, Sb, Ba, Bb)
        go_far = f > 0
        a, Sa, Ba = jnp.where(go_far, mid, a), jnp.where(go_far, S, Sa), jnp.where(go_far, B, Ba)
        b, Sb, Bb = jnp.where(go_far, b, mid), jnp.where(go_far, Sb, S), jnp.where(go_far, Bb, B)
        return (a, b, Sa, Sb, Ba, Bb, it + its), None

    def illinois(a, b, Sa, Sb, Ba, Bb, it, fa, fb):
        # regula falsi with the Illinois modification (the value kept at an end retained twice in a
        # row is halved), to the same final bracket as the bisection: |b − a| ≤ |far − cut|·2^-bisections;
        # the midpoint when the false-position point is not strictly inside or the bracket did not halve
        # over three steps, and after ``bisections`` steps (so at most 2·bisections steps)
        wtol = jnp.abs(b - a) * 2.0 ** (-bisections)

        # ``exists`` in the condition: under ``all_outliers``' vmap over branches the ``lax.cond`` below is a
        # select, so a branch without a root would otherwise run the search to the slowest branch's end
        def cond(c):
            return exists & (jnp.abs(c["b"] - c["a"]) > wtol) & (c["k"] < 2 * bisections)

        def body(c):
            a, b, fa, fb = c["a"], c["b"], c["fa"], c["fb"]
            w = b - a
            lam = b - fb * w / (fb - fa)                 # false position
            frac = (lam - a) / w
            use = jnp.isfinite(frac) & (frac > 0) & (frac < 1) & (jnp.abs(w) <= 0.5 * c["w3"]) & (c["k"] < bisections)
            lam = jnp.where(use, lam, a + 0.5 * w)
            f, S, B, its = evaluate(lam, a, b, c["Sa"], c["Sb"], c["Ba"], c["Bb"])
            go_far = f > 0                               # the new point replaces the far end a
            kept = jnp.where(go_far, 1, -1)              # which end stayed: +1 the edge end b, −1 the far end a
            fa2 = jnp.where(go_far, f, jnp.where(c["kept"] == -1, 0.5 * fa, fa))     # Illinois: halve an end
            fb2 = jnp.where(go_far, jnp.where(c["kept"] == 1, 0.5 * fb, fb), f)      # kept twice in a row
            a2, b2 = jnp.where(go_far, lam, a), jnp.where(go_far, b, lam)
            return dict(a=a2, b=b2, Sa=jnp.where(go_far, S, c["Sa"]), Sb=jnp.where(go_far, c["Sb"], S),
                        Ba=jnp.where(go_far, B, c["Ba"]), Bb=jnp.where(go_far, c["Bb"], B), it=c["it"] + its,
                        fa=fa2, fb=fb2, kept=kept, k=c["k"] + 1, w1=jnp.abs(b2 - a2), w2=c["w1"], w3=c["w2"])

        w0 = jnp.abs(b - a)
        c = jax.lax.while_loop(cond, body, dict(a=a, b=b, Sa=Sa, Sb=Sb, Ba=Ba, Bb=Bb, it=it, fa=fa, fb=fb,
                                                kept=jnp.asarray(0), k=jnp.asarray(0), w1=w0, w2=4 * w0, w3=4 * w0))
        return tuple(c[q] for q in ("a", "b", "Sa", "Sb", "Ba", "Bb", "it"))

    def locate(_):
        S_far, _, _, _, _, B_far = _real_point(law, far, delta, far_start(law, far), side, tol, max_steps, damping,
                                                 solver)
        if search == "bisection":
            return jax.lax.scan(bisect, (far, cut, S_far, S_cut, B_far, B_cut, its_e), None, length=bisections)[0]
        f_far = sgn * _ext_eig(_A_from_B(B_far, far, law), side, branch)
        return illinois(far, cut, S_far, S_cut, B_far, B_cut, its_e, f_far, sgn * margin)

    # no root beyond the cut (margin of the wrong sign): the bisection would only be discarded. Skip it
    # (a real branch in ``outlier``; under ``all_outliers``' vmap over branches a select, as before).
    # The reported numbers are unchanged; a NO_OUTLIER result's iterations are then the edge search's
    # and its residual that of the real solution at the cut (the final solve below starts there).
    a, b, Sa, Sb, Ba, Bb, its = jax.lax.cond(exists, locate, lambda _: (cut, cut, S_cut, S_cut, B_cut, B_cut, its_e),
                                             None)
    lam0 = 0.5 * (a + b)
    S0, _, res, _, ok, B0 = _real_point(law, lam0, delta, Sa, side, tol, max_steps, damping, solver, B0=Ba)
    A = _A_from_B(B0, lam0, law)
    ev, V = jnp.linalg.eigh(A)
    bvec = V[:, _branch_index(side, branch, A.shape[0])]
    Ap, _ = A_derivative(S0, lam0, law, delta, B0)
    cos2 = -1.0 / (bvec @ Ap @ bvec)               # residue of A(z)^{-1} at λ_0
    status = jnp.where(st_e != SUCCESS, st_e, jnp.where(exists, SUCCESS, NO_OUTLIER))
    return (jnp.where(exists, lam0, jnp.nan), jnp.where(exists, cos2, 0.0), edge, exists,
            jnp.where(exists, bvec, jnp.nan), margin, res, its, status)


_outlier_core_jit = eqx.filter_jit(_outlier_core)


def _all_outliers_core(law, delta, side, tol, max_steps, damping, solver, bisections, substeps, level, probe_steps,
                       branches, probe_patience=PROBE_PATIENCE, search="secant"):
    """``_outlier_core`` for every eigenvalue branch of A at once (vmap over ``branches``; the edge
    solve does not depend on the branch, so it is computed once)."""
    return jax.vmap(lambda b: _outlier_core(law, delta, side, tol, max_steps, damping, solver, bisections, substeps,
                                            level, probe_steps, b, probe_patience, search))(branches)


_all_outliers_core_jit = eqx.filter_jit(_all_outliers_core)


def outlier(law: BlockLaw, delta, side="bottom", *, convention=None, n=None, tol=1e-12, max_steps=60,
            damping=0.5, solver="newton", bisections=44, substeps=2, level=None, probe_steps=PROBE_STEPS,
            probe_patience=PROBE_PATIENCE, search="secant", throw=True) -> OutlierResult:
    """Outlier of the limiting Hessian spectrum along the hard subspace on ``side`` and the
    squared cosine of its eigenvector with that subspace. ``law.zeta`` must hold the hard
    coordinates. No outlier is a valid answer (``exists=False``, status NO_OUTLIER), not an
    error; ``throw`` only raises on failures (edge not found, non-convergence).

    ``level``: only count an outlier beyond it (below it for ``side="bottom"``), e.g.
    ``level=-ridge`` for a *negative* eigenvalue of ``H + ridge·I`` (THEORY §2's δ*(t)
    criterion). The margin is then ``μ_ext(A(cut))`` at ``cut = min(edge, level)`` (max for
    "top"): still continuous in δ and negative iff such an outlier exists. Default: the edge.
    :func:`all_outliers` gives every outlier on the side (this one is its branch 0).
    ``probe_steps``, ``probe_patience``: the edge search's (:func:`spectral.bulk_edge`).
    ``search``: how the edge and the outlier's root are bracketed: "secant" (default: the edge search of
    :func:`spectral.bulk_edge`, and regula falsi with the Illinois rule for the root, each with bisection
    safeguards) or "bisection"; both stop at the same bracket width. ``bisections``: of the edge search
    and of the outlier's bracket (final bracket = initial · 2^-bisections). The margin at the edge moves like
    the square root of the edge's error (A has a square-root singularity there): on a 16 384-path
    phase-retrieval law, 24 / 32 / 44 / 52 bisections gave margins −0.18719 / −0.188882 / −0.188897 /
    −0.188898 for edges 1.5e-10 (32) and 2e-12 (44) from the 52-bisection one; the outlier (−0.42949688)
    agreed to 4e-10 from 32 on (``benchmarks/bench_finite_n_branches.py`` uses 32)."""
    return _outliers(law, delta, side, convention, n, tol, max_steps, damping, solver, bisections, substeps, level,
                     probe_steps, throw, every_branch=False, probe_patience=probe_patience, search=search)


def all_outliers(law: BlockLaw, delta, side="bottom", *, convention=None, n=None, tol=1e-12, max_steps=60,
                 damping=0.5, solver="newton", bisections=44, substeps=2, level=None, probe_steps=PROBE_STEPS,
                 probe_patience=PROBE_PATIENCE, search="secant", throw=True) -> OutlierResult:
    """Every outlier on ``side`` along the hard subspace, one per eigenvalue branch of ``A``.

    ``A(λ)`` is (h m)×(h m) and each of its eigenvalues decreases strictly in λ outside the
    support (module docstring), so on each side the equation ``det A(λ) = 0`` has at most h·m
    roots, one per branch: branch ``j`` (counted from the side's extreme: the ``j``-th smallest
    eigenvalue of ``A`` for "bottom", the ``j``-th largest for "top") has a root beyond the
    edge iff it is already past zero at the edge (``margin[j]``). Branch 0 is :func:`outlier`'s
    result (same numbers). With a width-m student and one hard direction there can be up to m
    outliers (e.g. the m = 2 quadratic student under a Huber loss on phase retrieval: two, both
    found at finite d, ``benchmarks/bench_spectral_dmft_state.py``); the j-th eigenvalue below the
    edge of the finite-d Hessian is compared with branch j, its eigenvector's hard weight with
    ``cosine2[j]``.

    Returns an :class:`OutlierResult` whose array fields have a leading axis of length h·m
    (``edge`` repeated), ordered from the extreme inward, so ``eigenvalue`` is sorted away from
    the bulk first; ``exists.sum()`` is the number of outliers. Arguments as in :func:`outlier`.
    """
    return _outliers(law, delta, side, convention, n, tol, max_steps, damping, solver, bisections, substeps, level,
                     probe_steps, throw, every_branch=True, probe_patience=probe_patience, search=search)


def _outliers(law, delta, side, convention, n, tol, max_steps, damping, solver, bisections, substeps, level,
              probe_steps, throw, every_branch, probe_patience=PROBE_PATIENCE, search="secant"):
    what = "all_outliers" if every_branch else "outlier"
    if law.zeta is None:
        raise SpectralError(f"{what} needs the hard coordinates: build the law with zeta=... (the "
                            "coordinates of x along the hard directions, e.g. z[:, hard]).")
    _check_delta(delta)
    _check_probe_options(probe_steps, probe_patience)
    _check_search(search)
    law_used, conv = _resolve_convention(law, side, convention, n, what)
    s = 0 if side == "bottom" else 1
    hm = law.zeta.shape[1] * law.m
    setting = dict(law=law_used.source, m=law.m, hard_dims=int(law.zeta.shape[1]), samples=law_used.size,
                   delta=_f(delta), side=side, solver=solver, bisections=bisections, max_steps=max_steps,
                   probe_steps=min(probe_steps, max_steps), probe_patience=probe_patience, search=search,
                   level=None if level is None else _f(level),
                   convention="strict" if conv == "strict-unbounded" else conv)
    if every_branch:
        setting["branches"] = hm
    if conv == "strict-unbounded":
        setting["note"] = ("support unbounded on this side: in the strict limit there is no edge and no "
                           "outlier (use convention='finite-n' for the truncated law)")
        lead = (hm,) if every_branch else ()
        return OutlierResult(eigenvalue=jnp.full(lead, jnp.nan), cosine2=jnp.zeros(lead),
                             edge=jnp.full(lead, -jnp.inf if s == 0 else jnp.inf), exists=jnp.zeros(lead, bool),
                             vector=jnp.full(lead + (hm,), jnp.nan), margin=jnp.full(lead, jnp.nan),
                             residual=jnp.full(lead, jnp.nan), iterations=jnp.zeros(lead, int),
                             status=jnp.full(lead, UNBOUNDED_SUPPORT), side=side, convention="strict",
                             setting=setting)
    lev = (jnp.inf if s == 0 else -jnp.inf) if level is None else level
    args = (for_jit(law_used), jnp.asarray(delta, float), jnp.asarray(s), tol, max_steps, damping, solver, bisections,
            substeps, jnp.asarray(lev, float), probe_steps)
    out = (_all_outliers_core_jit(*args, jnp.arange(hm), probe_patience, search) if every_branch
           else _outlier_core_jit(*args, 0, probe_patience, search))
    res = OutlierResult(*out, side=side, convention=conv, setting=setting)
    res = dataclasses.replace(res, status=invalid_delta_status(res.status, delta))
    check_status(res.status, f"{what}(side={side!r})", throw, ok=(SUCCESS, NO_OUTLIER))
    return res
