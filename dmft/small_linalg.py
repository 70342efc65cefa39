"""Batched small dense linear algebra (m×m blocks, one per sample or Monte Carlo path) as
plain vectorized jnp ops over the static size m (Gauss–Jordan unrolled, Jacobi in a fori_loop).

Two reasons not to call LAPACK here. Speed: on CPU, ``jnp.linalg.solve`` on 10^5 tiny
matrices is several times slower than the unrolled version. Correctness: jaxlib 0.10's CPU
LAPACK kernels split a large batch across XLA's intra-op thread pool and *block a pool
worker* until the pieces finish (``ParallelBatchMap``); when two such calls run concurrently
(independent ops of one program) every worker can end up waiting, and the program deadlocks
at 0% CPU. Measured (session 14): the stationary DMFT with 16384 paths hung in about half of
the runs on a 2-core machine, inside ``lapack_dsyevd_ffi`` (gdb), from the per-path ``eigh``
of the proximal Newton step; with these routines it does not. Session 52: the same hang again
at 65 536 paths (logistic + ridge, δ = 2; 5 of 9 fresh runs, ``--xla_cpu_multi_thread_eigen=false``
did not prevent it: 2 of 4), from per-path LAPACK calls added to ``dmft/stationary.py`` later (its
Jacobian solve, the curvature diagnostic, and the interpolation test evaluated twice — two
concurrent ``eigvalsh``); 0 of 8 after. Use these routines for every per-sample batched
factorization (``tests/test_small_linalg.py`` checks the compiled prox, dynamic-DMFT and
stationary programs for batched LAPACK calls); ``SMALL_MAX_M`` bounds the unrolling (compile
size grows like m²). Batches over δ or keys of single m×m matrices are harmless: the kernel splits
a batch only above ~2·10⁵ flops, and the test suite's programs stay below (largest seen: 40).
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp

SMALL_MAX_M = 8


def solve_small(M, R):
    """Solve ``M X = R`` for batches ``M`` (N, m, m), ``R`` (N, m, p): Gauss–Jordan with
    partial pivoting (row swaps by arithmetic selection, no gathers), unrolled over m."""
    m = M.shape[-1]
    if m == 1:
        return R / M
    if m == 2:
        a, b, c, d = M[..., 0, 0], M[..., 0, 1], M[..., 1, 0], M[..., 1, 1]
        det = a * d - b * c
        r0, r1 = R[..., 0, :], R[..., 1, :]
        x0 = (d[..., None] * r0 - b[..., None] * r1) / det[..., None]
        x1 = (a[..., None] * r1 - c[..., None] * r0) / det[..., None]
        return jnp.stack([x0, x1], axis=-2)
    A = jnp.moveaxis(jnp.concatenate([M, R.astype(jnp.result_type(M, R))], axis=-1), 0, -1)  # (m, m+p, N)
    rows = [A[i] for i in range(m)]                                        # each (m+p, N)
    for k in range(m):
        mags = jnp.stack([jnp.abs(rows[j][k]) for j in range(k, m)])       # (m-k, N)
        piv = jnp.argmax(mags, axis=0)
        P = [(piv == (j - k)).astype(A.dtype) for j in range(k, m)]       # one-hot selectors
        rk = rows[k]
        rp = sum(P[j - k] * rows[j] for j in range(k, m))                 # pivot row
        for j in range(k + 1, m):                                          # swap: row piv <- row k
            rows[j] = rows[j] + P[j - k] * (rk - rows[j])
        rp = rp / rp[k]
        rows[k] = rp
        for j in range(m):
            if j != k:
                rows[j] = rows[j] - rows[j][k] * rp
    X = jnp.stack([r[m:] for r in rows])                                   # (m, p, N)
    return jnp.moveaxis(X, -1, 0)


def eigh_small(A, max_sweeps: int = 30):
    """Eigenvalues ``w`` (N, m) and orthonormal eigenvectors ``U`` (N, m, m) (columns) of a
    batch of symmetric ``A`` (N, m, m): cyclic Jacobi (rotations zeroing one off-diagonal pair
    at a time, Golub & Van Loan §8.5; a ``fori_loop`` over the pairs), sweeps until the off-diagonal part is below rounding of
    ``‖A‖`` in every matrix (m = 2: one rotation is exact). Eigenvalues are **not** sorted."""
    m = A.shape[-1]
    A = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    U = jnp.broadcast_to(jnp.eye(m, dtype=A.dtype), A.shape)
    if m == 1:
        return A[..., 0, :], U
    pairs = [(p, q) for p in range(m - 1) for q in range(p + 1, m)]
    eps = jnp.finfo(A.dtype).eps

    def rotate(A, U, p, q):
        apq, app, aqq = A[..., p, q], A[..., p, p], A[..., q, q]
        nz = apq != 0
        theta = (aqq - app) / (2.0 * jnp.where(nz, apq, 1.0))
        t = jnp.where(theta >= 0, 1.0, -1.0) / (jnp.abs(theta) + jnp.sqrt(1.0 + theta * theta))
        t = jnp.where(nz, t, 0.0)
        c = 1.0 / jnp.sqrt(1.0 + t * t)
        s = (t * c)[..., None]
        c = c[..., None]
        Ap, Aq = A[..., :, p], A[..., :, q]                       # A <- A J (columns p, q)
        A = A.at[..., :, p].set(c * Ap - s * Aq).at[..., :, q].set(s * Ap + c * Aq)
        Ap, Aq = A[..., p, :], A[..., q, :]                       # A <- Jᵀ A (rows p, q)
        A = A.at[..., p, :].set(c * Ap - s * Aq).at[..., q, :].set(s * Ap + c * Aq)
        A = A.at[..., p, q].set(0.0).at[..., q, p].set(0.0)
        Up, Uq = U[..., :, p], U[..., :, q]                       # U <- U J
        U = U.at[..., :, p].set(c * Up - s * Uq).at[..., :, q].set(s * Up + c * Uq)
        return A, U

    if m == 2:
        A, U = rotate(A, U, 0, 1)
    else:
        P = jnp.asarray([p for p, _ in pairs])
        Q = jnp.asarray([q for _, q in pairs])

        def sweep(A, U):
            # a fori_loop over the pairs (traced p, q: dynamic slices), not unrolled: the same
            # rotations in the same order, bit-identical results, and the compile time no longer
            # grows with m² (measured, 16384 matrices: m = 8 compile 9.6 s -> 1.3 s, m = 4
            # 1.9 s -> 0.8 s at equal run time; m = 5 runs 1.4× slower, m = 8 1.1×)
            return jax.lax.fori_loop(0, len(pairs), lambda i, c: rotate(*c, P[i], Q[i]), (A, U))

        off = lambda A: jnp.sum(jnp.square(A), axis=(-2, -1)) - jnp.sum(jnp.square(jnp.diagonal(A, axis1=-2, axis2=-1)), -1)
        scale = jnp.sum(jnp.square(A), axis=(-2, -1))

        def cond(c):
            A, _, k = c
            return (k < max_sweeps) & jnp.any(off(A) > (eps * eps) * scale)

        def body(c):
            A, U, k = c
            A, U = sweep(A, U)
            return A, U, k + 1

        A, U, _ = jax.lax.while_loop(cond, body, (A, U, 0))
    return jnp.diagonal(A, axis1=-2, axis2=-1), U


LAPACK_SPLIT_FLOPS = 200_000   # jaxlib 0.10 CPU: a batched LAPACK call above this many flops is split over the pool


def _warn_if_lapack_may_split(A, what):
    """Above ``SMALL_MAX_M`` the per-sample batch goes to LAPACK: warn (at trace time) where jaxlib may split it
    across the intra-op pool on CPU, the condition of the hang described in the module docstring."""
    m, N = A.shape[-1], math.prod(A.shape[:-2])
    if N * m**3 >= LAPACK_SPLIT_FLOPS and jax.default_backend() == "cpu":
        warnings.warn(f"{what}: {N} per-sample {m}x{m} matrices go to LAPACK (m > SMALL_MAX_M = {SMALL_MAX_M}); on a CPU "
                      "backend jaxlib splits such a batch over the intra-op pool and two concurrent calls can hang the "
                      "program (dmft/small_linalg.py). Fewer paths or a GPU avoid it; raise dmft.small_linalg.SMALL_MAX_M "
                      "to unroll instead (compile time grows like m²).", RuntimeWarning, stacklevel=3)


def eigvalsh_small(A):
    """Eigenvalues of a batch of symmetric ``A`` (N, m, m), ascending (N, m); pure jnp for
    m ≤ ``SMALL_MAX_M`` (:func:`eigh_small`), LAPACK above."""
    if A.shape[-1] > SMALL_MAX_M:
        _warn_if_lapack_may_split(A, "eigvalsh")
        return jnp.linalg.eigvalsh(A)
    return jnp.sort(eigh_small(A)[0], axis=-1)


def eigh_batched(A):
    """:func:`eigh_small` for m ≤ ``SMALL_MAX_M``, LAPACK above (unsorted below, ascending above)."""
    if A.shape[-1] > SMALL_MAX_M:
        _warn_if_lapack_may_split(A, "eigh")
        return jnp.linalg.eigh(A)
    return eigh_small(A)


def solve_batched(M, R):
    """:func:`solve_small` for m ≤ ``SMALL_MAX_M``, LAPACK above: for every per-sample batch of solves."""
    if M.shape[-1] > SMALL_MAX_M:
        _warn_if_lapack_may_split(M, "solve")
        return jnp.linalg.solve(M, R)
    return solve_small(M, R)
