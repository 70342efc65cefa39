"""Causal discrete-time DMFT of full-batch GD (THEORY §1).

Order parameters for ``0 <= s <= t <= T`` (each ``m×m``): ``C_θ(t,s)``, ``R_θ(t,s)``,
``C_g(t,s) = E[g^t g^sᵀ]``, ``Γ(t,s) = E[∂g^t/∂ω^s]``; ``M^t`` (k×m) and ``a^t``.

Data side, one Monte Carlo path (``z, ε, y`` and a Gaussian sequence ``ω``):

    r^t = M^tᵀ z + ω^t − (1/δ) Σ_{s<t} η_s R_θ(t, s+1) g^s                  (1)
    g^t = ∇_r ℓ(y, F(r^t; a^t)),     G^t = ∇²_r ℓ(y, F(r^t; a^t))

Parameter side (one coordinate of √d W_⊥; linear, exact):

    θ^{t+1} = (1 − η_t λ) θ^t − η_t (u^t + Σ_{s≤t} Γ(t,s) θ^s),   E[u^t u^sᵀ] = C_g(t,s)/δ
    R_θ(t+1,s) = (1 − η_t λ) R_θ(t,s) − η_t Σ_{s≤s'≤t} Γ(t,s') R_θ(s',s),   R_θ(s,s) = I   (2)
    C_θ(t+1,t') = (1 − η_t λ) C_θ(t,t') − η_t (E[u^t θ^{t'ᵀ}] + Σ_{s≤t} Γ(t,s) C_θ(s,t'))      (3)
    E[u^t θ^{t'ᵀ}] = −(1/δ) Σ_{s<t'} η_s C_g(t,s) R_θ(t',s+1)ᵀ

Low-dimensional parameters:

    M^{t+1} = (1 − η_t λ) M^t − η_t E[z g^tᵀ]                                 (4)
    a^{t+1} = (1 − η_{a,t} λ_a) a^t − η_{a,t} E[∇_a ℓ(y, F(r^t; a^t))]         (5)

``Γ(t,s) = E[G^t P(t,s)]`` with the exact per-path Jacobian ``P(t,s) = ∂r^t/∂ω^s``:

    P(t,s) = 1{t=s} − (1/δ) Σ_{s≤s'<t} η_{s'} R_θ(t,s'+1) G^{s'} P(s',s)          (6)

computed for each ``t`` by a reverse (adjoint) sweep, so memory stays
``O(N T m²)`` instead of ``O(N T² m²)``: with ``B_s = G^t P(t,s)``, ``B_t = G^t`` and

    B_{s'} = −(η_{s'}/δ) [Σ_{s''>s'} B_{s''} R_θ(s'', s'+1)] G^{s'}.

The GD step may vary in time (``lr`` an array): every ``η`` above is then ``η_t``.
Everything at step ``t`` uses kernels up to ``t`` only: one forward pass, no fixed point.
``ω^t`` is drawn from a growing block-Cholesky factor of ``C_θ`` with persistent white
noise. Hard teacher coordinates (link even in ``z_j``) are sampled antithetically, and
the estimator of ``E[z gᵀ]`` sums each sign-flip pair first, so a zero hard overlap
stays exactly zero.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .data import fixed_test_set
from .problem import Problem, ProblemError, Tracer, check_finite_maps, describe_problem, warn_if_response_jumps

JUMP_FIX = ("Use a smooth surrogate (e.g. softplus(β r)/β for ReLU, pseudo-Huber for |e|) for the DMFT; "
            "setting['response_jump'] records the size.")
from .prox import per_sample_maps
from .small_linalg import eigvalsh_small

MIN_PATHS = 64


class DMFTError(RuntimeError):
    """The DMFT solve failed (non-finite kernels); the message names the step."""


class Trajectory(eqx.Module):
    """DMFT solution, indexed by step ``0..steps``.

    Observables: ``train_error``, ``test_error`` (steps+1,), ``overlap`` ``M^t`` (steps+1,k,m),
    ``gram`` ``W^tᵀW^t = MᵀM + C_θ(t,t)`` (steps+1,m,m), ``second_layer`` ``a^t``.
    Kernels (steps+1, steps+1, m, m): ``C_theta``, ``R_theta``, ``C_g``, ``Gamma``.
    ``samples``: {t: dict(z, y, eps, r)} of the effective data-side process at the
    requested times (the joint law of ``(z, y, r^t)`` behind the Hessian blocks).
    ``failed_step``: first step with non-finite values (``-1`` if none).
    ``max_step_curvature[t]``: max over paths of ``η_t λ_max(G^t)/δ``, the step of the
    effective single-sample GD; ``unstable_fraction[t]``: fraction of paths where it exceeds 2.
    Above 2 those (tail) paths oscillate and diverge: with unbounded curvature (e.g. square
    loss on ``y = z²``) fixed-η GD is locally unstable on rare samples in the n → ∞ limit,
    which finite-n GD never draws; reduce ``lr`` (a warning is issued).
    ``min_schur``: smallest eigenvalue of the conditional covariance of ``ω^t`` (clipped
    at 0 when negative by round-off; near 0 means the dynamics has frozen).
    ``factor_residual[t]``: ``max_{s≤t} |C_θ(t,s) − Σ_s' L(t,s') L(s,s')ᵀ|`` relative to
    ``tr C_θ(t,t)/m`` — how faithfully the factor that builds the fields ``ω`` reproduces ``C_θ``
    (≈ the jitter while the factor is accurate; rounding amplified through near-zero
    innovations shows here before the kernels overflow).
    """

    train_error: jax.Array
    test_error: jax.Array
    overlap: jax.Array
    gram: jax.Array
    second_layer: jax.Array
    C_theta: jax.Array
    R_theta: jax.Array
    C_g: jax.Array
    Gamma: jax.Array
    samples: dict
    failed_step: jax.Array
    min_schur: jax.Array
    max_step_curvature: jax.Array
    unstable_fraction: jax.Array
    factor_residual: jax.Array
    setting: Optional[dict] = eqx.field(static=True, default=None)   # static: strings and numbers pass jit / vmap

    @property
    def steps(self) -> int:
        return self.train_error.shape[-1] - 1


def _lr_schedule(lr, steps):
    lr = jnp.asarray(lr, dtype=float)
    if lr.ndim == 0:
        return jnp.full((steps + 1,), lr)
    if lr.shape[-1] != steps:
        raise ProblemError(f"lr as a schedule must have shape (steps,) = ({steps},); got {lr.shape}.")
    return jnp.concatenate([lr, lr[..., -1:]], axis=-1)


def _validate(problem, delta, lr, steps, paths, save_samples_at, n_groups, sweep=False):
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ProblemError(f"steps must be a positive int (got {steps!r}).")
    nd = np.ndim(delta)
    if sweep and (nd != 1 or np.shape(delta)[0] == 0):
        raise ProblemError(f"deltas must be a non-empty 1-d grid of δ values (got shape {np.shape(delta)}).")
    if not sweep and nd != 0:
        raise ProblemError(f"delta must be a scalar (got shape {np.shape(delta)}); for several δ use "
                           "dmft.solve_sweep(problem, deltas, ...), which shares one compilation and the random numbers.")
    if np.ndim(lr) > (2 if sweep else 1):
        raise ProblemError(f"lr must be a scalar or a schedule of shape (steps,) = ({steps},)"
                           + (" (or one of those per δ)" if sweep else "") + f"; got shape {np.shape(lr)}.")
    if not isinstance(paths, (int, np.integer)) or isinstance(paths, bool):
        raise ProblemError(f"paths must be an int (got {paths!r} of type {type(paths).__name__}); e.g. paths={int(paths) if isinstance(paths, float) and np.isfinite(paths) else 20000}.")
    if paths < MIN_PATHS:
        raise ProblemError(
            f"paths = {paths!r} is too small to estimate the kernels; use paths >= {MIN_PATHS} "
            "(Monte Carlo error ~ paths^-1/2; 10^4–10^5 for 2–3 digit accuracy)."
        )
    if paths % n_groups:
        raise ProblemError(
            f"paths = {paths} must be a multiple of {n_groups} (antithetic sign flips of the hard "
            f"teacher coordinates); use e.g. paths = {paths - paths % n_groups + n_groups}."
        )
    for name, v in (("delta", delta), ("lr", lr)):
        if not isinstance(v, Tracer):
            arr = np.asarray(v, dtype=float)
            if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise ProblemError(f"{name} must be finite and > 0 (got {arr}).")
    for t in save_samples_at:
        if isinstance(t, bool) or not float(t).is_integer():
            raise ProblemError(f"save_samples_at must hold integer steps; got {t!r}.")
        if not (0 <= int(t) <= steps):
            raise ProblemError(f"save_samples_at contains {t}, outside 0..steps = 0..{steps}.")


def _sign_patterns(k, hard):
    """(G, k) sign multipliers: all ±1 patterns on the hard coordinates, ordered so that the
    pattern axis reshapes to (2,)*h with axis i flipping hard[i]."""
    h = len(hard)
    pats = np.ones((2**h, k))
    for idx, bits in enumerate(itertools.product([1.0, -1.0], repeat=h)):
        for j, b in zip(hard, bits):
            pats[idx, j] = b
    return jnp.asarray(pats)


def _antithetic_inputs(problem, key, paths: int, hard: tuple, dt):
    """Fixed randomness of the data side shared by :func:`solve` and ``dmft.stationary``:
    teacher inputs with every sign pattern of the hard coordinates (groups of ``2^h``
    paths sharing ``z``'s other coordinates, the noise ``ε`` and the Gaussian fields), labels.
    Returns the keys of the field noise and fresh (test) noise, ``z`` (paths, k), ``ε``,
    ``y`` (paths,), and ``expand`` mapping per-group draws (Nb, ...) to all paths."""
    k = problem.k
    G = 2 ** len(hard)
    Nb = paths // G
    kz, ke, kxi, kf = jax.random.split(key, 4)
    zb = jax.random.normal(kz, (Nb, k), dt)
    z = _sign_patterns(k, hard)[:, None, :] * zb[None]  # (G, Nb, k)
    epsb = problem.teacher.sample_noise(ke, (Nb,)).astype(dt)
    eps = jnp.broadcast_to(epsb[None], (G,) + epsb.shape)
    y = problem.teacher.labels(z, eps)  # (G, Nb)

    def expand(noise_b):  # (Nb, ...) -> (paths, ...), shared across the antithetic group
        return jnp.broadcast_to(noise_b[None], (G,) + noise_b.shape).reshape((paths,) + noise_b.shape[1:])

    return kxi, kf, z.reshape(paths, k), eps.reshape((paths,) + epsb.shape[1:]), y.reshape(paths), expand


def _group_mean(x, n_hard):
    """Mean over paths laid out as (G, Nb, ...): sum the sign-flip axes one at a time (each a
    single exact pairwise add, so antisymmetric terms cancel exactly), then average."""
    G = x.shape[0]
    x = x.reshape((2,) * n_hard + x.shape[1:])
    for _ in range(n_hard):
        x = x[0] + x[1]
    return jnp.mean(x, axis=0) / G


# Relative jitter added to the innovation block of the block-Cholesky factor of C_θ. Where the
# first phase freezes the innovations (Schur complements) fall to rounding level. The factor stays
# exact for the jittered covariance (Trajectory.factor_residual = the jitter); changing the jitter
# re-assigns the near-zero innovation directions to other ξ's, i.e. re-draws part of the Monte Carlo
# sample without bias (benchmarks/results/field_factor.json: paired differences over keys have mean
# 0 within s.e.). At long horizons (t·η ≳ 100) rounding can compound through hundreds of near-zero
# blocks with 1e-13 (a measured blow-up at step 556; the residual flags it, `solve` warns/raises);
# 1e-8 does not. The default is kept for the committed results; spectral.threshold_gradient's
# dynamic route uses 1e-8 (smooth in δ and θ). docs/dmft.md, "Conditioning at late times".
CHOL_JITTER = 1e-13
# fold_in constant of the solve's key for the test set of ``test_samples`` (distinct from the split
# of _antithetic_inputs)
TEST_SET_FOLD = 0x7E57


def _divided_differences(ev, f, fprime):
    """Daleckii–Krein kernel ``(f(λ_i) − f(λ_j))/(λ_i − λ_j)``, ``f'`` on (near-)degenerate pairs."""
    li, lj = ev[:, None], ev[None, :]
    gap = li - lj
    same = jnp.abs(gap) <= 1e-10 * (1.0 + jnp.abs(li) + jnp.abs(lj))
    return jnp.where(same, fprime(0.5 * (li + lj)), (f(li) - f(lj)) / jnp.where(same, 1.0, gap))


@jax.custom_jvp
def _psd_part(A):
    """``V max(Λ, 0) Vᵀ`` of a symmetric A. Its JVP is the Daleckii–Krein formula, defined also
    at degenerate eigenvalues (e.g. ``Q_0 = I``), where differentiating ``eigh`` gives NaN."""
    ev, V = jnp.linalg.eigh(A)
    return (V * jnp.maximum(ev, 0.0)) @ V.T


@_psd_part.defjvp
def _psd_part_jvp(primals, tangents):
    (A,), (dA,) = primals, tangents
    ev, V = jnp.linalg.eigh(A)
    K = _divided_differences(ev, lambda x: jnp.maximum(x, 0.0), lambda x: (x > 0).astype(x.dtype))
    return (V * jnp.maximum(ev, 0.0)) @ V.T, V @ (K * (V.T @ dA @ V)) @ V.T


@jax.custom_jvp
def _sqrt_factor(C):
    """The symmetric square root ``S = V √max(Λ, 0) Vᵀ`` of a symmetric PSD ``C`` (``S Sᵀ = C``): the factor
    that turns iid N(0, I) draws into the fresh field N(0, C) of the test-error estimator. Its JVP is the
    Daleckii–Krein formula ``(√λ_i + √λ_j) (Vᵀ dS V)_ij = (Vᵀ dC V)_ij``, the exact derivative of this
    function, also at degenerate eigenvalues (e.g. ``Q_0 = I``).

    Why the symmetric root (session 51 user audit). Until then the forward pass used ``F = V √Λ`` (LAPACK's
    eigenvectors) while the JVP was that of ``S V₀``: a valid factor of the same law, but not the function
    evaluated, so ``jax.jvp`` of ``Trajectory.test_error`` for width m ≥ 2 disagreed with central differences
    of the same estimator at the same key (staircase, m = 2, 512 paths: −0.138 against −0.019), and
    ``F`` itself is not differentiable where eigenvalues coincide (its eigenvectors are arbitrary there).
    ``S`` has the same law ``S ξ ~ N(0, C)``, so test errors move only within their Monte Carlo error
    (m = 1: unchanged, S = F)."""
    ev, V = jnp.linalg.eigh(C)
    return (V * jnp.sqrt(jnp.maximum(ev, 0.0))) @ V.T


@_sqrt_factor.defjvp
def _sqrt_factor_jvp(primals, tangents):
    (C,), (dC,) = primals, tangents
    ev, V = jnp.linalg.eigh(C)
    rt = jnp.sqrt(jnp.maximum(ev, 0.0))
    den = rt[:, None] + rt[None, :]
    K = jnp.where(den > 0, 1.0 / jnp.where(den > 0, den, 1.0), 0.0)   # (√λ_i + √λ_j) (Vᵀ dS V)_ij = (Vᵀ dC V)_ij
    return (V * rt) @ V.T, V @ (K * (V.T @ dC @ V)) @ V.T


@eqx.filter_jit
def _solve_core(problem: Problem, delta, lr, key, steps: int, paths: int, hard: tuple, save_at: tuple,
                chol_jitter: float, test_samples: Optional[int] = None, groups: Optional[tuple] = None):
    m, k = problem.m, problem.k
    # sign-flip groups of the hard coordinates (Teacher.hard_groups): row j's E[z_j g] is exactly 0
    # while every row of some group containing j has been 0 at every step so far
    groups = tuple((j,) for j in hard) if groups is None else tuple(groups)
    member = np.zeros((max(len(groups), 1), k), bool)
    for i, g in enumerate(groups):
        member[i, list(g)] = True
    member = jnp.asarray(member)
    T = steps
    n_hard = len(hard)
    G = 2**n_hard
    Nb = paths // G
    dt = jnp.float64
    delta = jnp.asarray(delta, dt)
    eta = _lr_schedule(lr, steps)  # (T+1,)
    lam = problem.ridge
    lam_a = problem.ridge_second
    st = problem.student
    eta_a = eta * (st.second_layer_lr_scale if st.train_second_layer else 0.0)
    eye = jnp.eye(m, dtype=dt)

    # --- fixed randomness: teacher inputs, noise, labels (antithetic groups) -----------
    kxi, kf, zf, epsf, yf, expand = _antithetic_inputs(problem, key, paths, hard, dt)

    if test_samples is not None:
        # a test set of its own, fixed across time, dmft.simulate's: r = M^tᵀ z + F ξ with F Fᵀ = C_θ(t,t)
        zt, yt, xit = fixed_test_set(problem, jax.random.fold_in(key, TEST_SET_FOLD), test_samples, dt)

    def gmean(x):  # exact-symmetric mean over paths of x (paths, ...)
        return _group_mean(x.reshape((G, Nb) + x.shape[1:]), n_hard)

    f = per_sample_maps(problem)
    grad_r, hess_r, grad_a, loss_v = f["grad_r"], f["hess_r"], f["grad_a"], f["loss"]

    Tp = T + 1
    tidx = jnp.arange(Tp)
    zeros_k = jnp.zeros((Tp, Tp, m, m), dt)
    init = dict(
        C=zeros_k.at[0, 0].set(problem.init.q0.astype(dt)),
        R=zeros_k.at[0, 0].set(eye),
        Cg=zeros_k,
        Gam=zeros_k,
        L=zeros_k,
        M=jnp.zeros((Tp, k, m), dt).at[0].set(problem.init.overlap.astype(dt)),
        a=jnp.zeros((Tp,) + st.second_layer.shape, dt).at[0].set(st.second_layer.astype(dt)),
        xi=jnp.zeros((paths, Tp, m), dt),
        g=jnp.zeros((paths, Tp, m), dt),
        Gh=jnp.zeros((paths, Tp, m, m), dt),
        r=jnp.zeros((paths, Tp, m), dt),
        train=jnp.zeros((Tp,), dt),
        test=jnp.zeros((Tp,), dt),
        failed=jnp.array(-1),
        step_curv=jnp.zeros((Tp,), dt),
        unstable=jnp.zeros((Tp,), dt),
        resid=jnp.zeros((Tp,), dt),
        hard_zero=jnp.any(member, axis=0) if groups else jnp.zeros((k,), bool),   # rows still 0 at every step
        min_schur=jnp.array(jnp.inf, dt),
    )

    def block_row_solve(L, c_row, t):
        """Solve Σ_{s'≤s} L(t,s') L(s,s')ᵀ = C(t,s) for the row L(t, s<t) (block forward
        substitution as one triangular solve on the padded (Tp·m)² factor)."""
        mask = (tidx < t)[:, None, None, None] & (tidx < t)[None, :, None, None]
        Lm = jnp.where(mask, L, 0.0) + jnp.where((tidx >= t)[:, None, None, None] & (tidx[:, None] == tidx[None, :])[..., None, None], eye, 0.0)
        Lflat = Lm.transpose(0, 2, 1, 3).reshape(Tp * m, Tp * m)
        rhs = jnp.where((tidx < t)[:, None, None], c_row.transpose(0, 2, 1), 0.0)  # rows C(t,s)ᵀ
        sol = jax.scipy.linalg.solve_triangular(Lflat, rhs.reshape(Tp * m, m), lower=True)
        row = sol.reshape(Tp, m, m).transpose(0, 2, 1)  # L(t, s)
        return jnp.where((tidx < t)[:, None, None], row, 0.0)

    def step(carry, t):
        C, R, Cg, Gam, L = carry["C"], carry["R"], carry["Cg"], carry["Gam"], carry["L"]
        M_t, a_t = carry["M"][t], carry["a"][t]

        # ---- ω^t: extend the block factor of C_θ by row t -----------------------------
        row = block_row_solve(L, C[t], t)
        schur = C[t, t] - jnp.einsum("sij,skj->ik", row, row)
        schur = 0.5 * (schur + schur.T)
        min_schur = jnp.minimum(carry["min_schur"], jnp.linalg.eigvalsh(schur)[0])
        jitter = chol_jitter * (jnp.trace(C[t, t]) / m) + 1e-300   # static: callers resolve it (_jitter)
        Ltt = jnp.linalg.cholesky(_psd_part(schur) + jitter * eye)
        row = row.at[t].set(Ltt)
        L = L.at[t].set(row)
        # how faithfully the factor reproduces C_θ: max_s≤t |C(t,s) − Σ_s' L(t,s') L(s,s')ᵀ| / (tr C(t,t)/m)
        recon = jnp.einsum("pij,spkj->sik", row, L)
        resid = jnp.where((tidx <= t)[:, None, None], jnp.abs(C[t] - recon), 0.0)
        factor_residual = jnp.max(resid) / (jnp.trace(C[t, t]) / m + 1e-300)
        xi_t = expand(jax.random.normal(jax.random.fold_in(kxi, t), (Nb, m), dt))
        xi = carry["xi"].at[:, t].set(xi_t)
        omega = jnp.einsum("sij,nsj->ni", row, xi)

        # ---- (1): field with the memory (reaction) term -----------------------------
        Rmem = R[t, jnp.minimum(tidx + 1, T)]  # R_θ(t, s+1) for s = 0..T
        wmem = jnp.where(tidx < t, eta / delta, 0.0)
        mem = jnp.einsum("s,sij,nsj->ni", wmem, Rmem, carry["g"])
        r_t = zf @ M_t + omega - mem
        g_t = grad_r(yf, r_t, a_t)
        G_t = hess_r(yf, r_t, a_t)
        g_hist = carry["g"].at[:, t].set(g_t)
        G_hist = carry["Gh"].at[:, t].set(G_t)

        # ---- (6): Γ(t, s) by the reverse sweep over s' = t-1 .. 0 ------------------
        Gam_row = _gamma_row(t, G_hist, R, eta, delta) / paths
        Gam_row = jnp.where((tidx <= t)[:, None, None], Gam_row, 0.0)
        Gam = Gam.at[t].set(Gam_row)

        # ---- C_g(t, s) = E[g^t g^sᵀ], s ≤ t ---------------------------------------
        Cg_row = jnp.where((tidx <= t)[:, None, None], jnp.einsum("ni,nsj->sij", g_t, g_hist) / paths, 0.0)
        Cg = Cg.at[t].set(Cg_row).at[:, t].set(jnp.swapaxes(Cg_row, -1, -2))

        # ---- observables at step t ---------------------------------------------------
        train = jnp.mean(loss_v(yf, r_t, a_t))
        ct = 0.5 * (C[t, t] + C[t, t].T)
        sq = _sqrt_factor(ct)
        if test_samples is None:  # default: the paths' own (z, y) with a fresh field per step
            xi_f = expand(jax.random.normal(jax.random.fold_in(kf, t), (Nb, m), dt))
            r_fresh = zf @ M_t + xi_f @ sq.T
            test = jnp.mean(loss_v(yf, r_fresh, a_t))
        else:
            test = jnp.mean(loss_v(yt, zt @ M_t + xit @ sq.T, a_t))

        # ---- (4), (5): overlap and second layer ------------------------------------
        Ezg = gmean(zf[:, :, None] * g_t[:, None, :])
        # Exact symmetry: while every row M_S of a sign-flip group S (the link invariant under
        # z_S -> -z_S, e.g. S = {j} for a link even in z_j) has been exactly 0 at every step so far,
        # the law of the effective process is invariant under the flip, so E[z_j g] = 0 exactly for
        # j in S. The antithetic estimator is zero only up to round-off (~1e-19, vectorized kernels
        # are not bitwise identical across the pair), which the dynamics would amplify above
        # threshold; we impose the exact value.
        hard_zero = carry["hard_zero"] & jnp.all(M_t == 0.0, axis=1)
        group_zero = jnp.all(jnp.where(member, hard_zero[None, :], True), axis=1) & jnp.any(member, axis=1)
        forced = jnp.any(member & group_zero[:, None], axis=0)
        Ezg = jnp.where(forced[:, None], 0.0, Ezg)
        M_next = (1 - eta[t] * lam) * M_t - eta[t] * Ezg
        a_next = (1 - eta_a[t] * lam_a) * a_t - eta_a[t] * jnp.mean(grad_a(yf, r_t, a_t), axis=0)

        # ---- (2): R_θ(t+1, s), s ≤ t+1 ---------------------------------------------
        lower = (tidx <= t)[:, None, None]
        GR = jnp.einsum("pij,psjk->sik", jnp.where(lower, Gam_row, 0.0), jnp.where((tidx <= t)[:, None, None, None], R, 0.0))
        R_next = jnp.where(lower, (1 - eta[t] * lam) * R[t] - eta[t] * GR, 0.0)
        R_next = R_next.at[t + 1].set(eye, mode="drop")

        # ---- (3): C_θ(t+1, t'), t' ≤ t+1 --------------------------------------------
        # E[u^t θ^{t'ᵀ}] = −(1/δ) Σ_{s<t'} η_s C_g(t,s) R_θ(t', s+1)ᵀ, for all t' (R row t+1 new)
        R_full = R.at[t + 1].set(R_next, mode="drop")
        wsum = jnp.where(tidx <= t, eta / delta, 0.0)  # s ≤ t (s < t' ≤ t+1)
        Rshift = R_full[:, jnp.minimum(tidx + 1, T)]  # [t', s] -> R(t', s+1)
        valid_s = (tidx[None, :] < tidx[:, None])  # s < t'
        EuT = -jnp.einsum("s,sij,tskj,ts->tik", wsum, Cg_row, Rshift, valid_s.astype(dt))
        GC = jnp.einsum("sij,stjk->tik", jnp.where(lower, Gam_row, 0.0), jnp.where((tidx <= t)[:, None, None, None], C, 0.0))
        C_next = (1 - eta[t] * lam) * C[t] - eta[t] * (EuT + GC)  # C(t+1, t') for t' ≤ t
        C_next = jnp.where(lower, C_next, 0.0)
        # C(t+1, t+1) from the just-computed column C(s, t+1) = C(t+1, s)ᵀ
        col = jnp.swapaxes(C_next, -1, -2)  # C(t', t+1)
        GCc = jnp.einsum("sij,sjk->ik", jnp.where(lower, Gam_row, 0.0), col)
        Cdiag = (1 - eta[t] * lam) * col[t] - eta[t] * (EuT[jnp.minimum(t + 1, T)] + GCc)
        Cdiag = 0.5 * (Cdiag + Cdiag.T)
        C_next = C_next.at[t + 1].set(Cdiag, mode="drop")
        C_new = C.at[t + 1].set(C_next, mode="drop")
        C_new = C_new.at[:, t + 1].set(jnp.swapaxes(C_next, -1, -2), mode="drop")

        # per-path local stability of the effective single-sample GD: step η_t λ_max(G^t)/δ
        # (> 2 means that path oscillates and diverges; with unbounded curvature this happens
        # for rare tail paths, which then dominate the averages)
        lmax = eigvalsh_small(jax.lax.stop_gradient(G_t))[:, -1]   # diagnostic; per path: unrolled jnp, not batched LAPACK
        curv = eta[t] * lmax / delta
        finite = (
            jnp.all(jnp.isfinite(Gam_row)) & jnp.all(jnp.isfinite(Cg_row)) & jnp.all(jnp.isfinite(C_next))
            & jnp.all(jnp.isfinite(M_next)) & jnp.isfinite(train) & jnp.all(jnp.isfinite(a_next))
        )
        failed = jnp.where((carry["failed"] < 0) & ~finite, t, carry["failed"])
        new = dict(
            C=C_new,
            R=R_full,
            Cg=Cg,
            Gam=Gam,
            L=L,
            M=carry["M"].at[t + 1].set(M_next, mode="drop"),
            a=carry["a"].at[t + 1].set(a_next, mode="drop"),
            xi=xi,
            g=g_hist,
            Gh=G_hist,
            r=carry["r"].at[:, t].set(r_t),
            train=carry["train"].at[t].set(train),
            test=carry["test"].at[t].set(test),
            failed=failed,
            step_curv=carry["step_curv"].at[t].set(jnp.max(curv)),
            unstable=carry["unstable"].at[t].set(jnp.mean(curv > 2.0)),
            resid=carry["resid"].at[t].set(factor_residual),
            hard_zero=hard_zero,
            min_schur=min_schur,
        )
        return new, None

    out, _ = jax.lax.scan(step, init, jnp.arange(Tp))
    Mh = out["M"]
    gram = jnp.einsum("tki,tkj->tij", Mh, Mh) + out["C"][tidx, tidx]
    samples = {
        int(t): dict(z=zf, y=yf, eps=epsf, r=out["r"][:, int(t)])
        for t in save_at
    }
    return Trajectory(
        train_error=out["train"],
        test_error=out["test"],
        overlap=Mh,
        gram=gram,
        second_layer=out["a"],
        C_theta=out["C"],
        R_theta=out["R"],
        C_g=out["Cg"],
        Gamma=out["Gam"],
        samples=samples,
        failed_step=out["failed"],
        min_schur=out["min_schur"],
        max_step_curvature=out["step_curv"],
        unstable_fraction=out["unstable"],
        factor_residual=out["resid"],
    )


def _gamma_chunking(paths: int, Tp: int, m: int, block: int = 8, cache_bytes: int = 2**20):
    """(padded length Tq, paths per chunk, number of chunks) of :func:`_gamma_row`'s sweep: on CPU
    chunks of about ``cache_bytes`` of one path-block history, on accelerators one chunk."""
    Tq = Tp + block
    if jax.default_backend() != "cpu":  # accelerators: one chunk, the GEMMs are wide enough
        cache_bytes = 2**31
    cs = int(max(16, min(paths, cache_bytes // (Tq * m * m * 8))))
    return Tq, cs, -(-paths // cs)


def _gamma_row(t, G_hist, R, eta, delta, block: int = 8, cache_bytes: int = 2**20):
    """Σ_paths G^t P(t, s) for s = 0..T via the adjoint sweep (6).

    Per path, ``B_t = G^t`` and ``B_{s'} = −(η_{s'}/δ) [Σ_{s''>s'} B_{s''} R_θ(s'', s'+1)] G^{s'}``
    for ``s' = t−1..0``; ``B_s = G^t P(t,s)``. Blocked: for each block of ``block`` steps the
    contributions of the already-computed ``B_{s''}`` (``s''`` above the block) come from one
    GEMM, and only the within-block terms are sequential. Paths are processed in
    cache-sized chunks on CPU (zero-padded: a zero ``G`` contributes nothing), in one chunk
    on accelerators. Time is padded by ``block`` in front so blocks never start below 0.
    """
    paths, Tp, m, _ = G_hist.shape
    b = block
    Tq, cs, nch = _gamma_chunking(paths, Tp, m, block, cache_bytes)
    pad = nch * cs - paths
    Gp = jnp.concatenate([G_hist, jnp.zeros((pad,) + G_hist.shape[1:], G_hist.dtype)]) if pad else G_hist
    Gp = jnp.pad(Gp, ((0, 0), (b, 0), (0, 0), (0, 0)))  # padded time index u = s + b
    Gc = Gp.reshape((nch, cs, Tq, m, m))
    Rp = jnp.pad(R.transpose(0, 2, 1, 3), ((b, 0), (0, 0), (b, 0), (0, 0)))  # [u'', j, c', k] = R(s'', c)[j, k]
    etap = jnp.pad(eta, (b, 0))
    nb = (t + b - 1) // b

    def chunk(G):
        B = jnp.zeros((cs, m, Tq, m), G.dtype)
        B = jax.lax.dynamic_update_slice(B, G[:, t + b][:, :, None, :], (0, 0, t + b, 0))

        def block_body(q, B):
            hi = t - q * b  # block covers s' in [hi - b, hi); padded start LO = hi
            LO = hi
            Rcols = jax.lax.dynamic_slice(Rp, (0, 0, LO + 1, 0), (Tq, m, b, m))  # R(s'', s'+1), s' in block
            far = (B.reshape(cs * m, Tq * m) @ Rcols.reshape(Tq * m, b * m)).reshape(cs, m, b, m)
            Rin_all = jax.lax.dynamic_slice(Rp, (LO, 0, LO + 1, 0), (b, m, b, m))  # R(lo+kk, lo+jj+1)
            Gblk = jax.lax.dynamic_slice(G, (0, LO, 0, 0), (cs, b, m, m))
            eblk = jax.lax.dynamic_slice(etap, (LO,), (b,))

            def inner(i, Bblk):
                jj = b - 1 - i
                acc = far[:, :, jj, :] + jnp.einsum("nikj,kjl->nil", Bblk, Rin_all[:, :, jj, :])
                Bj = -(eblk[jj] / delta) * jnp.einsum("nij,njk->nik", acc, Gblk[:, jj])
                Bj = jnp.where(hi - b + jj >= 0, Bj, 0.0)
                return Bblk.at[:, :, jj, :].set(Bj)

            Bblk = jax.lax.fori_loop(0, b, inner, jnp.zeros((cs, m, b, m), G.dtype))
            return jax.lax.dynamic_update_slice(B, Bblk, (0, 0, LO, 0))

        return jax.lax.fori_loop(0, nb, block_body, B).sum(0)

    S = jax.lax.map(chunk, Gc).sum(0)  # (m, Tq, m)
    return S[:, b:, :].transpose(1, 0, 2)

def solve(
    problem: Problem,
    delta,
    lr,
    steps: int,
    paths: int,
    key,
    *,
    save_samples_at: tuple = (),
    throw: bool = True,
    check_inputs: bool = True,
    chol_jitter: float = None,
    test_samples: int = None,
) -> Trajectory:
    """Solve the discrete-time DMFT of full-batch GD for ``steps`` steps (THEORY §1).

    ``delta = n/d`` and ``lr`` (scalar, or a schedule of shape ``(steps,)``) are traced, so
    ``jax.vmap(lambda d: solve(problem, d, lr, steps, paths, key, throw=False))(deltas)``
    sweeps δ with common random numbers and a single compilation (:func:`solve_sweep`
    does this and checks the results). ``paths`` Monte Carlo paths (static) give errors
    ``O(paths^-1/2)``. ``save_samples_at``: steps whose effective-process samples
    ``(z, y, eps, r^t)`` are returned in ``.samples``. With ``throw=True`` (default)
    non-finite kernels raise :class:`DMFTError` naming the first bad step. ``chol_jitter``: relative
    jitter of the innovation blocks of the block-Cholesky factor of ``C_θ`` (default: the module
    constant ``CHOL_JITTER`` = 1e-13; docs/dmft.md, "Conditioning at late times"). ``test_samples``
    (static int): estimate the test error on a test set of its own, fixed across time, as
    ``dmft.simulate`` does (default None: the paths' own ``(z, y)`` with a fresh field per step,
    ``paths`` samples). The test error is a low-dimensional average given ``(M^t, C_θ(t,t), a^t)``,
    so more test samples are cheap (``O(test_samples·m)`` per step against the solve's
    ``O(paths·t·m³)``) and cut its Monte Carlo error where the loss is heavy-tailed
    (docs/dmft.md, "Test error estimator").
    """
    hard = problem.teacher.hard_coordinates()
    groups = _hard_groups(problem, "dmft.solve")
    _validate(problem, delta, lr, steps, paths, tuple(save_samples_at), 2 ** len(hard))
    save_at = tuple(sorted(int(t) for t in save_samples_at))
    jump = None
    if check_inputs:
        check_finite_maps(problem)
        jump = warn_if_response_jumps(problem, "dmft.solve", JUMP_FIX)
    # δ and lr as arrays: traced, so new values never recompile
    delta_a, lr_a = jnp.asarray(delta, dtype=float), jnp.asarray(lr, dtype=float)
    # the jitter is passed as a static argument (read now, not at trace time), so changing
    # CHOL_JITTER between calls recompiles instead of silently reusing the cached program
    jit_ = _jitter(chol_jitter)
    nt = _test_samples(test_samples)
    traj = _solve_core(problem, delta_a, lr_a, key, int(steps), int(paths), hard, save_at, jit_, nt, groups)
    traj = _nan_if_invalid_traced(traj, problem, delta_a, lr_a)
    setting = dict(
        delta=_maybe_float(delta), lr=_maybe_float(lr), steps=int(steps), paths=int(paths),
        **_problem_setting(problem, key), response_jump=jump,
        antithetic_coordinates=list(hard), symmetry_groups=[list(g) for g in groups], jacobian="exact-adjoint", dtype="float64",
        field_factor="block-cholesky", chol_jitter=jit_, **_test_setting(nt),
    )
    return _checked(dataclasses.replace(traj, setting=setting), throw, problem)


def _factor_breakdowns(traj: Trajectory):
    """Per point (one for a single solve, one per sweep point): the first step where the field factor
    stops reproducing C_θ (residual above 10× its own jitter + 1e-10, or non-finite) and the residual
    there, or None. Empty inside jit (traced values)."""
    if isinstance(traj.factor_residual, Tracer):
        return []
    fr = np.asarray(traj.factor_residual).reshape(-1, np.shape(traj.factor_residual)[-1])
    jit = float((traj.setting or {}).get("chol_jitter", CHOL_JITTER))
    out = []
    for row in fr:
        bad = np.flatnonzero(~(row <= 10 * jit + 1e-10))
        out.append((int(bad[0]), float(row[bad[0]])) if bad.size else None)
    return out


def _breakdown_hint(b) -> str:
    return (f"the field factor stopped reproducing C_θ at step {b[0]} (factor_residual {b[1]:.3g}): rounding amplified "
            "through near-zero innovations of a frozen first phase; pass chol_jitter=1e-8 (docs/dmft.md, "
            "'Conditioning at late times').")


def warn_if_unfaithful(traj: Trajectory):
    """Warn when the field factor broke at a step where the kernels were still finite (values from
    there on are unreliable without being NaN)."""
    import warnings

    fs = None if isinstance(traj.failed_step, Tracer) else np.asarray(traj.failed_step).reshape(-1)
    for i, b in enumerate(_factor_breakdowns(traj)):
        if b is not None and not (fs is not None and 0 <= fs[i] <= b[0]):
            where = f" (sweep point {i})" if fs is not None and fs.size > 1 else ""
            warnings.warn(f"DMFT{where}: from step {b[0]} values are unreliable: " + _breakdown_hint(b),
                          RuntimeWarning, stacklevel=3)
            return


def _nan_if_invalid_traced(traj: Trajectory, problem: Problem, delta, lr) -> Trajectory:
    """Inside a caller's ``jit`` / ``vmap`` δ, lr and the problem's parameters cannot be checked before the run
    (:func:`_validate` refuses concrete bad values). There an invalid value — δ ≤ 0, an lr ≤ 0 at some step,
    a negative ridge, or any of them non-finite — makes every output NaN and ``failed_step`` 0, instead of
    finite numbers that look valid (session 51 audit: δ = −1 gave a train error of 5e87 with failed_step −1,
    lr = −0.3 a plausible 1.53, ridge = −1 a plausible 1.66)."""
    vals = [delta, lr, problem.ridge, problem.ridge_second]
    if not any(isinstance(v, Tracer) for v in vals):
        return traj
    bad = ~(jnp.isfinite(delta) & (delta > 0)) | jnp.any(~(jnp.isfinite(lr) & (lr > 0)))
    for r in (problem.ridge, problem.ridge_second):
        bad = bad | jnp.any(~(jnp.isfinite(r) & (jnp.asarray(r) >= 0)))
    nan = lambda x: jnp.where(bad, jnp.nan, x) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x  # noqa: E731
    out = jax.tree_util.tree_map(nan, traj)
    return dataclasses.replace(out, failed_step=jnp.where(bad, 0, traj.failed_step))


def _checked(traj: Trajectory, throw: bool, problem: Problem = None) -> Trajectory:
    if throw:
        raise_if_failed(traj)
    warn_if_unstable(traj)
    warn_if_unfaithful(traj)
    warn_if_diverging(traj)
    if problem is not None:
        warn_if_rising(traj, problem)
    return traj


RISE_REL = 0.05     # a rise of the train error above its running minimum by this fraction (and by 1e-3 of its start)


def rise_step(train_error):
    """Per trajectory (rows of ``train_error`` (..., steps+1)): the first step at which the train error exceeds its
    running minimum by more than ``RISE_REL`` of it and by more than 1e-3 of its initial value (−1: never), and that
    minimum's step."""
    te = np.asarray(train_error, float)
    te = te.reshape(-1, te.shape[-1])
    with np.errstate(all="ignore"):
        run_min = np.minimum.accumulate(np.where(np.isfinite(te), te, np.inf), axis=1)
        bad = (te > (1 + RISE_REL) * run_min) & (te - run_min > 1e-3 * np.abs(te[:, :1]))
    first = np.where(bad.any(axis=1), bad.argmax(axis=1), -1)
    at_min = np.array([int(np.argmin(row[:max(f, 1)])) for row, f in zip(te, first)])
    return first, at_min


def warn_if_rising(traj: Trajectory, problem: Problem):
    """Full-batch GD whose step is below 2/λ_max of the Hessian decreases its objective at every step (the descent
    lemma); without ridge the objective is the train error, and the DMFT is the n, d → ∞ limit of that GD. A rise well
    above the running minimum therefore means either a step beyond the edge of stability (a catapult, which
    :func:`warn_if_unstable` sees only per path) or a Monte Carlo solve that has departed from its limit (measured,
    session 55: ~10 % of keys at 10 000–50 000 paths in a phase-retrieval quadratic case, where GD never rises;
    docs/dmft.md "Agreement with GD").
    Skipped with a ridge (the objective then adds it) and inside jit / vmap."""
    import warnings

    if isinstance(traj.train_error, Tracer) or np.shape(traj.train_error)[-1] < 3:
        return
    try:
        if float(np.max(np.abs(problem.ridge))) != 0.0 or float(np.max(np.abs(problem.ridge_second))) != 0.0:
            return
    except Exception:       # traced ridge: nothing concrete to compare
        return
    first, at_min = rise_step(traj.train_error)
    i = np.nonzero(first >= 0)[0]
    if i.size:
        te = np.asarray(traj.train_error, float).reshape(-1, np.shape(traj.train_error)[-1])[i[0]]
        t0, t1 = int(at_min[i[0]]), int(first[i[0]])
        where = "" if np.ndim(traj.train_error) == 1 else f" (sweep points {i.tolist()})"
        warnings.warn(f"DMFT{where}: the train error rises from {te[t0]:.4g} at step {t0} to {te[t1]:.4g} at step {t1} "
                      f"(max {np.nanmax(te[t1:]):.4g} later). Gradient descent with a step below 2/λ_max of the Hessian "
                      "decreases its loss at every step, so either lr is beyond the edge of stability, or this Monte "
                      "Carlo solve has departed from the n → ∞ limit (docs/dmft.md, 'Agreement with GD'): compare "
                      "independent keys before using these curves.", RuntimeWarning, stacklevel=3)


DIVERGENCE_FACTOR = 1e6   # train error above this multiple of its initial value, and still growing: GD diverges


def divergence_step(train_error) -> np.ndarray:
    """Per trajectory (rows of ``train_error`` (..., steps+1)), the first step at which the train error is
    non-finite or above ``DIVERGENCE_FACTOR`` × its initial value (−1: never): from there GD (and the DMFT that
    follows it) has left the problem, and nothing computed at later times describes it."""
    te = np.asarray(train_error, float)
    te = te.reshape(-1, te.shape[-1])
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(te) | (te > DIVERGENCE_FACTOR * np.maximum(te[:, :1], 1e-12))
    return np.where(bad.any(axis=1), bad.argmax(axis=1), -1)


def warn_if_diverging(traj: Trajectory):
    """Collective instability: GD diverges when η exceeds 2/λ_max of the Hessian, a property of the whole
    spectrum that the per-path check of :func:`warn_if_unstable` cannot see (user audit: a linear student at
    η = 1.9, η·λ_max(Σ̂) > 2, ended at train error 1e62 with no message). The numbers are faithful to a
    diverging GD; this says so."""
    import warnings

    if isinstance(traj.train_error, Tracer):
        return
    te = np.asarray(traj.train_error, float).reshape(-1, np.shape(traj.train_error)[-1])
    if te.shape[1] < 4:
        return
    with np.errstate(all="ignore"):
        grow = (te[:, -1] > DIVERGENCE_FACTOR * np.maximum(te[:, 0], 1e-12)) & (te[:, -1] > te[:, -2]) & (te[:, -2] > te[:, -3])
    if np.any(grow):
        i = np.nonzero(grow)[0]
        where = "" if te.shape[0] == 1 else f" (sweep points {i.tolist()})"
        warnings.warn(f"DMFT{where}: the train error grows without bound ({te[i[0], 0]:.3g} at step 0, {te[i[0], -1]:.3g} at "
                      f"the last step, ×{te[i[0], -1] / te[i[0], -2]:.3g} per step): GD diverges, the step η is above "
                      "2/λ_max of the Hessian (a collective instability); reduce lr.", RuntimeWarning, stacklevel=3)


def warn_if_unstable(traj: Trajectory):
    import warnings

    if isinstance(traj.unstable_fraction, Tracer):  # inside a user's jit/vmap: nothing to report
        return
    uf = np.asarray(traj.unstable_fraction)
    if uf.size and np.nanmax(uf) > 0:
        t = int(np.argmax(np.any(uf.reshape(-1, uf.shape[-1]) > 0, axis=0)))
        warnings.warn(
            f"DMFT: from step {t} some Monte Carlo paths have a local GD step η·λ_max(D)/δ > 2 "
            f"(max fraction {np.nanmax(uf):.2g}; max step {np.nanmax(np.asarray(traj.max_step_curvature)):.3g}): "
            "those tail paths diverge and can dominate the kernels. Fixed-η GD with unbounded curvature is "
            "locally unstable on rare samples in the n → ∞ limit; reduce lr.",
            RuntimeWarning, stacklevel=3)


def raise_if_failed(traj: Trajectory):
    if isinstance(traj.failed_step, Tracer):
        raise DMFTError("throw=True needs concrete results: inside jit/vmap call solve(..., throw=False) and "
                        "check .failed_step yourself")
    fs = np.asarray(traj.failed_step)
    bad = np.argwhere(fs.reshape(-1) >= 0)
    if not bad.size:
        return
    i = int(bad[0, 0])
    step = int(fs.reshape(-1)[i])
    b = _factor_breakdowns(traj)[i]
    why = (" Before that, " + _breakdown_hint(b)) if b is not None and b[0] < step else \
        " At long horizons with a converged first phase pass chol_jitter=1e-8 (docs/dmft.md, 'Conditioning at late times')."
    if step == 0:   # nothing has moved yet: the problem's maps, not lr (session 50 audit: NaN labels on rare inputs)
        why = (" At step 0 nothing has moved yet, so lr is not the cause: some label, output or loss derivative is "
               "non-finite on the sampled inputs (e.g. a link that returns NaN beyond |z| = 3.5, which the 256 draws of "
               "check_finite_maps miss): run dmft.check_finite_maps(problem, samples=10**6). Inside jit / vmap, an "
               "invalid traced input gives the same (δ ≤ 0, an lr ≤ 0, a negative ridge, or a non-finite one).")
    where = "" if fs.ndim == 0 else f" for sweep point {tuple(int(x) for x in np.unravel_index(i, fs.shape))}"
    fix = "" if step == 0 else " reduce lr, check the loss/activation growth, or shorten steps."
    raise DMFTError(f"DMFT kernels became non-finite{where} at step {step} (overflow or NaN in g, Γ, C_g or C_θ):"
                    + fix + why)


def solve_sweep(problem: Problem, deltas, lr, steps: int, paths: int, key, *, save_samples_at=(), throw=True,
                chol_jitter: float = None, test_samples: int = None, lr_per_delta: Optional[bool] = None):
    """δ sweep with common random numbers: one compilation, ``vmap`` over ``deltas``
    (and over ``lr`` if it has the same leading length). Results have a leading δ axis.

    ``lr``: a scalar or a ``(steps,)`` schedule shared by every δ, or one value / one schedule per δ
    (leading axis ``len(deltas)``). ``lr_per_delta`` says which; by default it is read from the
    shape, and a 1-D ``lr`` of length ``steps == len(deltas)`` (either reading fits) is refused
    unless ``lr_per_delta`` is given. The setting records the reading (``lr_axis``)."""
    hard = problem.teacher.hard_coordinates()
    groups = _hard_groups(problem, "dmft.solve_sweep")
    deltas = jnp.asarray(deltas, dtype=float)
    _validate(problem, deltas, lr, steps, paths, tuple(save_samples_at), 2 ** len(hard), sweep=True)
    check_finite_maps(problem)
    jump = warn_if_response_jumps(problem, "dmft.solve_sweep", JUMP_FIX)
    save_at = tuple(sorted(int(t) for t in save_samples_at))
    lr_arr = jnp.asarray(lr, dtype=float)
    lr_axis = _sweep_lr_axis(lr_arr.shape, len(deltas), int(steps), lr_per_delta)
    jit_ = _jitter(chol_jitter)  # static, read now (see solve)
    nt = _test_samples(test_samples)
    fn = jax.vmap(lambda d, e: _solve_core(problem, d, e, key, int(steps), int(paths), hard, save_at, jit_, nt, groups),
                  in_axes=(0, lr_axis))
    traj = fn(deltas, lr_arr)
    setting = dict(deltas=np.asarray(deltas).tolist(), lr=_maybe_float(lr),
                   lr_axis="per delta" if lr_axis == 0 else "shared", steps=int(steps), paths=int(paths),
                   **_problem_setting(problem, key), response_jump=jump,
        antithetic_coordinates=list(hard), symmetry_groups=[list(g) for g in groups], jacobian="exact-adjoint",
                   dtype="float64", common_random_numbers=True, field_factor="block-cholesky", chol_jitter=jit_,
                   **_test_setting(nt))
    return _checked(dataclasses.replace(traj, setting=setting), throw, problem)


def _hard_groups(problem: Problem, where: str) -> tuple:
    """``Teacher.hard_groups`` (static for the solve), with a warning for declared hard coordinates that no
    label-preserving sign flip covers (their rows are forced to 0 as declared, unverified)."""
    bad = problem.teacher.unverified_hard()
    if bad:
        import warnings

        warnings.warn(f"{where}: Teacher.hard declares {list(bad)}, but the link is not invariant under flipping "
                      "those coordinates (alone, jointly with other coordinates, or with the noise), so E[z_j | y] = 0 "
                      "is not guaranteed; their overlap rows are forced to 0 as declared while they are 0. If the "
                      "declaration is wrong, leave Teacher.hard = None (detected).", RuntimeWarning, stacklevel=3)
    return problem.teacher.hard_groups()


def _sweep_lr_axis(shape, n_deltas: int, steps: int, lr_per_delta):
    """0 when ``lr`` carries a leading δ axis, None when it is shared (scalar or ``(steps,)`` schedule)."""
    shared = shape == () or shape == (steps,)
    per = len(shape) in (1, 2) and shape[0] == n_deltas and (len(shape) == 1 or shape[1] == steps)
    if lr_per_delta is None:
        if shared and per:
            raise ProblemError(
                f"lr has shape {shape}: with steps = len(deltas) = {steps} it can be one schedule shared by every δ "
                "or one lr per δ; say which with lr_per_delta=False (shared schedule) or lr_per_delta=True.")
        lr_per_delta = per
    if lr_per_delta and not per:
        raise ProblemError(f"lr_per_delta=True needs lr of shape (len(deltas),) = ({n_deltas},) or (len(deltas), steps) = "
                           f"({n_deltas}, {steps}); got {shape}.")
    if not lr_per_delta and not shared:
        raise ProblemError(f"a shared lr must be a scalar or a (steps,) = ({steps},) schedule; got shape {shape} "
                           f"(one lr per δ: shape ({n_deltas},) or ({n_deltas}, {steps})).")
    return 0 if lr_per_delta else None


def key_record(key):
    """A PRNG key's data as a list (typed or raw uint32 keys) for a setting record; None where traced."""
    try:
        typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        return np.asarray(jax.random.key_data(key) if typed else key).tolist()
    except Exception:  # traced (e.g. vmapped over keys)
        return None


def _problem_setting(problem: Problem, key) -> dict:
    """Ridge penalties, the PRNG key and the problem for the setting record (None where traced)."""
    return dict(ridge=_maybe_float(problem.ridge), ridge_second=_maybe_float(problem.ridge_second), key=key_record(key),
                problem=describe_problem(problem))



def _jitter(chol_jitter):
    """The jitter for this call: the argument, else the module constant read now (static)."""
    j = CHOL_JITTER if chol_jitter is None else chol_jitter
    try:
        j = float(j)
    except (TypeError, ValueError):
        raise DMFTError(f"chol_jitter must be a float in [0, 1e-2]; got {chol_jitter!r}.") from None
    if not (0.0 <= j <= 1e-2):
        raise DMFTError(f"chol_jitter must be in [0, 1e-2] (relative to tr C_θ(t,t)/m; default 1e-13); got {j!r}.")
    return j


def _test_samples(n):
    """``test_samples`` checked: None (the default estimator) or a positive int (static)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ProblemError(f"test_samples must be None (default: the paths' own z with fresh fields) or an int >= 1; "
                           f"got {n!r}.")
    return int(n)


def _test_setting(nt):
    """The setting's record of the test-error estimator (absent for the default, as before it existed)."""
    if nt is None:
        return {}
    return dict(test_samples=nt, test_estimator="own test set fixed across time (z, eps, xi), as dmft.simulate")


def _maybe_float(x):
    if isinstance(x, Tracer):
        return None
    a = np.asarray(x, dtype=float)
    return float(a) if a.ndim == 0 else a.tolist()
