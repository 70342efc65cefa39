"""Batched small dense linear algebra as plain vectorized jnp ops (unrolled over the static
size m, batch axis innermost so that XLA vectorizes along it). On CPU, ``jnp.linalg.solve``
on 10^5 tiny matrices is several times slower than this."""

from __future__ import annotations

import jax.numpy as jnp


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
