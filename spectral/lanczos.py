"""Lanczos with full re-orthogonalization for extreme eigenpairs, and stochastic Lanczos
quadrature (SLQ) for the spectral density (THEORY §3). Matrix-free, jit/vmap-able
(``lax.while_loop``), any array shape for the vectors (e.g. W-shaped (d, m)).

Why not matfree: matfree's ``tridiag_sym`` runs a fixed number of matvecs chosen by the
user (no restart or convergence-checked top-k, matfree issue #125); here the loop stops on
the Ritz residual bound ``|β_j s_{j,i}| ≤ tol·‖T‖`` for the k wanted pairs, and reports
residuals, so the number of HVPs adapts to the spectrum (see benchmarks/bench_lanczos.py).

Ghosts and copies: with full (twice-applied classical Gram–Schmidt) re-orthogonalization the basis
stays orthonormal to machine precision, so no converged pair is duplicated: ``ghosts`` counts pairs of
converged Ritz *vectors* that are not orthogonal (0 always, so far). A multiple eigenvalue is another
matter: a single Krylov space holds one copy in exact arithmetic and finds further copies only through
rounding, so the k values returned could skip copies (triple −2 under a continuum on [0, 1], n = 40,
tol 1e-6: [−2, −2, 0, 0.028]). ``copies`` counts coinciding converged values (a multiplicity seen; their
vectors are orthonormal: inverse iteration re-orthogonalizes within clusters as LAPACK's ``stein`` does).
Where ``copies > 0``, ``deflate`` runs locked restarts: Lanczos again on P A P, P the projector off every
pair found so far, from a start vector in that complement; its pairs join the candidates and the k wanted
are re-selected, until a pass changes nothing (the example: [−2, −2, −2, 0] after two passes). Automatic
outside ``jit``; a fixed number of passes under ``jit``; ``deflation_passes`` records how many ran, and
``copies > 0`` with no pass warns. A multiple eigenvalue that rounding never reveals (copies = 0) is not
detected: pass ``deflate=p`` to check.

Breakdown (β_j ≈ 0: the Krylov space is invariant, e.g. a start vector inside an invariant subspace, or
an operator with few distinct eigenvalues) restarts from a random vector orthogonal to the basis, with
β_j = 0, so T becomes block diagonal and the search goes on in the complement; convergence is never
accepted at a breakdown. An operator with a few distinct eigenvalues then gets its copies back (−1, 0, 1
each ×10: six smallest = six −1's). ``residuals`` are the true ‖Av − θv‖ (k extra matvecs), not the bound.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import MAX_ITERS, NONFINITE, SUCCESS, check_status


class LanczosResult(eqx.Module):
    """``eigenvalues`` (k,) sorted ascending; ``eigenvectors`` (k, *shape) unit norm;
    ``residuals`` (k,) = ‖A v − θ v‖ (computed: k extra matvecs); ``ritz_bounds`` (k,) = |β s_j| (the
    stopping rule); ``converged`` (k,); ``iterations`` = matvecs used (plus k for the residuals);
    ``ghosts`` (pairs of converged Ritz vectors that are not orthogonal: duplicates); ``copies`` (coinciding
    converged values: a multiple eigenvalue, vectors orthonormal); ``deflation_passes`` (locked restarts run to
    recover missing copies); ``restarts`` = breakdowns (invariant Krylov subspaces) after which the basis went
    on from a fresh orthogonal vector. ``iterations`` and ``restarts`` sum over passes."""

    eigenvalues: jax.Array
    eigenvectors: jax.Array
    residuals: jax.Array
    converged: jax.Array
    iterations: jax.Array
    ghosts: jax.Array
    status: jax.Array
    ritz_bounds: jax.Array = None
    restarts: jax.Array = None
    which: str = eqx.field(static=True, default="both")
    copies: jax.Array = None
    deflation_passes: jax.Array = None


def _inverse_iteration(a, b, theta, scale, x, iters=3):
    """Unit eigenvector of the symmetric tridiagonal (diag ``a``, off-diag ``b``) for the
    eigenvalue ``theta``, by shifted inverse iteration (O(K) tridiagonal solves) from ``x``."""
    K = a.shape[0]
    dl = jnp.concatenate([jnp.zeros(1, a.dtype), b])
    du = jnp.concatenate([b, jnp.zeros(1, a.dtype)])
    shift = theta + 1e-13 * scale
    for _ in range(iters):
        x = jax.lax.linalg.tridiagonal_solve(dl, a - shift, du, x[:, None])[:, 0]
        x = x / jnp.linalg.norm(x)
    return x


CLUSTER = 1e-3  # Ritz values closer than CLUSTER·‖T‖ get mutually orthogonalized vectors (LAPACK stein's ORTOL)


def _cluster_vectors(a, b, th, scale):
    """Eigenvectors of the tridiagonal for the eigenvalues ``th`` (k,): inverse iteration (vmapped) from a start
    vector that differs per index, then Gram–Schmidt of each vector against the earlier ones of its cluster
    (as S L^{-T}, L the Cholesky factor of the cluster-masked Gram matrix: one small factorization; a
    sequential loop cost 2 s of compile time inside the Lanczos loop). Within a cluster of (nearly) equal eigenvalues every shift amplifies the whole invariant subspace
    alike, so distinct starts give independent vectors of it and the Gram–Schmidt an orthonormal basis
    (LAPACK ``stein`` re-orthogonalizes clusters the same way). Before (session 50): a triple eigenvalue
    found three times returned one vector three times (Gram off-diagonal 0.99999999)."""
    K, k = a.shape[0], th.shape[0]
    ar = jnp.arange(K, dtype=a.dtype)
    starts = (jnp.ones((k, K), a.dtype) + 1e-3 * jnp.sin(ar)[None, :]
              + 0.5 * jnp.sin((jnp.arange(k, dtype=a.dtype)[:, None] + 1.0) * 0.61 * (ar[None, :] + 1.0)))
    S = jax.vmap(lambda t, x0: _inverse_iteration(a, b, t, scale, x0), out_axes=1)(th, starts)

    # clusters: runs of consecutive θ (each end is sorted) closer than CLUSTER·‖T‖; within each, Gram–Schmidt
    # as a Cholesky factorization of the cluster-masked Gram matrix (block diagonal, so positive definite)
    cid = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(jnp.abs(jnp.diff(th)) > CLUSTER * scale).astype(jnp.int32)])
    G = (S.T @ S) * (cid[:, None] == cid[None, :]) + 1e-14 * jnp.eye(k, dtype=S.dtype)
    L = jnp.linalg.cholesky(G)
    return jax.lax.linalg.triangular_solve(L, S, left_side=False, lower=True, transpose_a=True)


def _sturm_counts(a, b2, xs, unroll: int = 8):
    """Number of eigenvalues ``< x`` of the symmetric tridiagonal (diag ``a``, squared
    off-diagonal ``b2``) for every shift in ``xs`` (P,) at once: negative pivots of the
    LDLᵀ factorizations of ``T − x`` (one scan over the K rows, vectorized over shifts)."""
    tiny = 1e-300

    def step(d, ab):
        ai, b2i = ab
        dn = ai - xs - b2i / d
        dn = jnp.where(dn == 0, -tiny, dn)
        return dn, dn < 0

    d0 = a[0] - xs
    d0 = jnp.where(d0 == 0, -tiny, d0)
    _, neg = jax.lax.scan(step, d0, (a[1:], b2), unroll=unroll)
    return (d0 < 0).astype(jnp.int32) + jnp.sum(neg, axis=0)


def tridiag_eigvals(a, b, idx, bits: int = 72, points: int = 63):
    """Eigenvalues number ``idx`` (0-based ascending, array) of the symmetric tridiagonal
    (``a``, ``b``) by Sturm multisection: each sweep counts eigenvalues below ``points``
    equally spaced shifts at once and keeps the sub-interval holding the wanted one, so
    ``bits`` bits of the Gershgorin interval cost ``bits / log2(points + 1)`` sequential
    sweeps (12 for the defaults) instead of ``bits`` bisection steps — the sequential depth
    is what costs on an accelerator (one tiny kernel per row and step). Cheap to compile,
    unlike ``eigh_tridiagonal``."""
    r = jnp.abs(jnp.concatenate([b, jnp.zeros(1, a.dtype)])) + jnp.abs(jnp.concatenate([jnp.zeros(1, a.dtype), b]))
    lo0, hi0 = jnp.min(a - r), jnp.max(a + r)
    span = hi0 - lo0 + 1e-300
    lo0, hi0 = lo0 - 1e-12 * span, hi0 + 1e-12 * span
    b2 = b**2
    sweeps = -(-bits // int(math.log2(points + 1)))
    frac = jnp.arange(1, points + 1, dtype=a.dtype) / (points + 1)

    def one(i):
        def body(_, lh):
            lo, hi = lh
            xs = lo + (hi - lo) * frac
            p = jnp.sum(_sturm_counts(a, b2, xs) <= i)  # shifts at or below the i-th eigenvalue
            grid = jnp.concatenate([lo[None], xs, hi[None]])
            return grid[p], grid[p + 1]

        lo, hi = jax.lax.fori_loop(0, sweeps, body, (lo0, hi0))
        return 0.5 * (lo + hi)

    return jax.vmap(one)(idx)


def _ritz(alpha, beta, j, K, which, k):
    """Wanted Ritz pairs of the leading j×j block of T (K×K buffer): eigenvalues by
    Sturm multisection (inactive rows decoupled at a sentinel above the spectrum),
    eigenvectors by inverse iteration. (Dense ``eigh`` of a K×K matrix is ~100 ms on CPU
    for K ≳ 100, and ``eigh_tridiagonal`` takes ~2 s to compile: Sturm multisection instead.) Returns (θ (k,), S (K, k), valid (k,))."""
    idx = jnp.arange(K)
    active = idx < j
    a = jnp.where(active, alpha, 0.0)
    b = jnp.where(idx[:-1] < j - 1, beta[:-1], 0.0)
    scale = jnp.max(jnp.abs(a)) + 2.0 * jnp.max(jnp.abs(b))
    scale = jnp.where(scale > 1e-200, scale, 1.0)      # T = 0 (a zero operator): unit scale, not a denormal shift
    sentinel = 4.0 * scale + 1.0
    a = jnp.where(active, a, sentinel)
    kb = k if which == "smallest" else (0 if which == "largest" else (k + 1) // 2)
    kt = k - kb
    idx = jnp.concatenate([jnp.arange(kb), jnp.maximum(j - kt, 0) + jnp.arange(kt)])
    th = tridiag_eigvals(a, b, idx)                    # inactive rows sit at the sentinel, above
    valid = (th < 2.0 * scale + 0.5) & (j >= k)
    S = _cluster_vectors(a, b, th, scale)
    S = jnp.where(active[:, None], S, 0.0)
    S = S / jnp.linalg.norm(S, axis=0, keepdims=True)
    return th, S, valid


def lanczos_extreme(matvec, dim, k, key, *, which="both", max_iters=None, tol=1e-10, v0=None,
                    check_every=4, throw=True, deflate=None) -> LanczosResult:
    """Extreme eigenpairs of the symmetric operator ``matvec`` by Lanczos with full
    re-orthogonalization and a residual-based stopping rule.

    ``dim``: int or the shape of the vectors (e.g. ``(d, m)`` for a W-shaped HVP).
    ``which``: "smallest", "largest" or "both" (``⌈k/2⌉`` smallest and ``⌊k/2⌋`` largest).
    Stops when every wanted Ritz pair has residual ``|β_j s_{j,i}| ≤ tol · max|θ|``
    (relative), checked every ``check_every`` steps, or at ``max_iters`` (default
    ``min(n, max(10 k, 150))``; the Krylov basis is preallocated, memory max_iters·n) matvecs.
    ``deflate``: passes of locked (deflated) restarts that recover missing copies of a multiple
    eigenvalue (module docstring). ``None`` (default): run them, until a pass changes nothing (at most k),
    only when the first pass found coinciding converged values (``copies > 0``) and the result is concrete
    (not under ``jit``/``vmap``); an int p: exactly up to p passes, also under ``jit`` (p static); 0: none.
    Under ``jit``, pass large arrays (X, D) as arguments of the jitted function rather than
    closing over them (closed-over arrays become XLA constants and are constant-folded).
    Pure function of its inputs: jit it, vmap it over keys (seeds) or operators.
    """
    shape = (dim,) if isinstance(dim, int) else tuple(dim)
    n = math.prod(shape)
    K = lanczos_iters(n, k, max_iters)
    if which not in ("smallest", "largest", "both"):
        raise ValueError(f"which must be 'smallest', 'largest' or 'both'; got {which!r}.")
    if not 1 <= k <= n:
        raise ValueError(f"k={k}: at most the operator's dimension {n} eigenpairs exist.")
    if not k <= K:
        raise ValueError(f"k={k} > max_iters={K}: the Krylov basis must hold at least k vectors; raise max_iters.")
    if deflate is not None and not (isinstance(deflate, int) and deflate >= 0):
        raise ValueError(f"deflate must be None (automatic), 0 (off) or a number of passes >= 1; got {deflate!r}.")
    q0 = jax.random.normal(key, (n,)) if v0 is None else jnp.asarray(v0)
    if v0 is not None and q0.size != n:
        raise ValueError(f"v0 has {q0.size} entries; the operator's vectors have shape {shape} ({n} entries).")
    q0 = q0.reshape(-1)
    _check_operator(matvec, shape, q0.dtype)
    mv = lambda q: matvec(q.reshape(shape)).reshape(-1)
    eps = float(jnp.finfo(q0.dtype).eps)
    if tol < 10 * eps:
        raise ValueError(f"tol={tol:g} is below what {q0.dtype} vectors resolve (10·eps = {10 * eps:.2g}): the basis "
                         "is orthonormal only to ~eps, and the Ritz bound then understates the true residual "
                         f"(float32, tol 1e-10: bound 1.7e-11, true 7.2e-7). Pass tol >= {10 * eps:.2g} or float64 v0.")
    q0 = q0 / jnp.linalg.norm(q0)
    out = _lanczos_loop(mv, q0, K, k, which, tol, int(check_every), key=jax.random.fold_in(key, 1))
    theta, vecs, res, bound, conv, its, status, restarts, scale = out
    passes, settled = 0, None
    auto = deflate is None
    limit = k if auto else deflate
    if auto and not (_concrete_positive(_copies(theta, conv, scale, tol)) and _concrete_positive(status == SUCCESS)):
        limit = 0
    found = [(theta, vecs, res, bound, conv)]
    while passes < limit:
        locked = jnp.concatenate([f[1] for f in found])           # every pair found so far, orthonormal
        if n - locked.shape[0] < k:
            break
        new = _deflated_pass(mv, locked, n, K, k, which, tol, int(check_every), jax.random.fold_in(key, 2 + passes))
        prev = theta
        found.append(new[:5])
        its, restarts = its + new[5], restarts + new[6]
        theta, vecs, res, bound, conv = _select(found, k, which)
        passes += 1
        if auto:
            settled = bool(jnp.max(jnp.abs(theta - prev)) <= jnp.maximum(tol * scale, 1e-12 * scale))
            if settled:
                break
    if passes:
        res = jax.lax.map(lambda tv: jnp.linalg.norm(mv(tv[1]) - tv[0] * tv[1]), (theta, vecs))  # true, on A itself
        status = jnp.where(~jnp.all(jnp.isfinite(theta)), NONFINITE, jnp.where(jnp.all(conv), SUCCESS, MAX_ITERS))
    copies = _copies(theta, conv, scale, tol)
    ghosts = _ghosts(vecs, conv)
    res_ = LanczosResult(eigenvalues=theta, eigenvectors=vecs.reshape((k,) + shape), residuals=res,
                         converged=conv, iterations=its, ghosts=ghosts, status=status, ritz_bounds=bound,
                         restarts=restarts, which=which, copies=copies, deflation_passes=jnp.asarray(passes))
    check_lanczos(status, tol, K, throw)
    _warn_if_degenerate(copies, ghosts, k, passes, settled)
    return res_


def _check_operator(matvec, shape, dtype):
    """``matvec`` maps vectors of ``shape`` to ``shape`` (traced once by ``jax.eval_shape``, nothing computed);
    otherwise a ValueError naming ``dim`` (session 50 audit: a wrong dim surfaced as an einsum error)."""
    try:
        out = jax.eval_shape(matvec, jax.ShapeDtypeStruct(shape, dtype))
    except Exception as exc:
        raise ValueError(f"matvec fails on a vector of shape {shape} (dim={shape if len(shape) > 1 else shape[0]!r}): "
                         f"{type(exc).__name__}: {str(exc)[:300]}. dim must be the shape of the operator's vectors, "
                         "e.g. W.shape = (d, m) for a Hessian-vector product.") from exc
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"matvec maps vectors of shape {shape} to shape {tuple(out.shape)}: dim must be the shape of "
                         "the operator's vectors (a symmetric operator maps a space to itself).")


def _concrete_positive(x) -> bool:
    try:
        return bool(int(x) > 0)
    except Exception:  # traced (jit / vmap): decided by the caller's deflate=
        return False


def _copies(theta, conv, scale, tol):
    """Adjacent converged values that coincide within the tolerance (relative to the operator's scale ‖T‖): a
    multiple eigenvalue seen (its copies)."""
    gap = jnp.abs(theta[1:] - theta[:-1]) <= jnp.maximum(tol * scale, 1e-12 * scale)
    return jnp.sum(gap & conv[1:] & conv[:-1])


def _ghosts(vecs, conv):
    """Pairs of converged Ritz vectors that are not orthogonal (|⟨v_i, v_j⟩| > 1e-6): a duplicated pair, not a
    copy of a multiple eigenvalue (whose vectors are orthogonal)."""
    G = jnp.abs(vecs @ vecs.T) * (conv[:, None] & conv[None, :])
    return jnp.sum(jnp.triu(G > 1e-6, 1))


def _deflated_pass(mv, locked, n, K, k, which, tol, check_every, key):
    """One Lanczos run on A restricted to the orthogonal complement of ``locked`` (rows): matvec P A P, start
    and restart vectors in the complement, so the pairs found are eigenpairs of A (up to the locked pairs'
    residuals) that the earlier passes did not hold — e.g. a copy of a multiple eigenvalue that a single
    Krylov space missed."""
    def proj(v):
        for _ in range(2):
            v = v - locked.T @ (locked @ v)
        return v

    mvp = lambda q: proj(mv(proj(q)))
    q0 = proj(jax.random.normal(key, (n,), locked.dtype))
    q0 = q0 / jnp.linalg.norm(q0)
    Kp = min(K, n - locked.shape[0])
    theta, vecs, res, bound, conv, its, status, restarts, _ = _lanczos_loop(
        mvp, q0, Kp, k, which, tol, check_every, key=jax.random.fold_in(key, 1), proj=proj, n_eff=n - locked.shape[0])
    return theta, vecs, res, bound, conv, its, restarts


def _select(found, k, which):
    """The k wanted pairs among all passes' pairs (ties keep the earlier pass)."""
    th = jnp.concatenate([f[0] for f in found])
    order = jnp.argsort(th, stable=True)
    if which == "smallest":
        pick = order[:k]
    elif which == "largest":
        pick = order[-k:]
    else:
        kb = (k + 1) // 2
        pick = jnp.concatenate([order[:kb], order[th.shape[0] - (k - kb):]])
    return tuple(jnp.concatenate([f[i] for f in found])[pick] for i in range(5))


def _warn_if_degenerate(copies, ghosts, k, passes, settled):
    try:
        c, g = int(copies), int(ghosts)
    except Exception:  # traced
        return
    import warnings

    if g > 0:
        warnings.warn(f"lanczos_extreme: {g} pair(s) of converged Ritz vectors are not orthogonal (ghost copies); "
                      "check with dense eigh at a small size.", RuntimeWarning, stacklevel=3)
    if c > 0 and passes == 0:
        warnings.warn(f"lanczos_extreme: {c} pair(s) of converged Ritz values coincide within the tolerance: a multiple "
                      "eigenvalue. A single Krylov space finds its copies only through rounding, so the "
                      f"{k} values returned may skip copies of it; pass deflate=None (automatic, outside jit) or "
                      "deflate=p to recover them by locked restarts.", RuntimeWarning, stacklevel=3)
    elif settled is False:
        warnings.warn(f"lanczos_extreme: the last of {passes} deflated pass(es) still changed the wanted values: more "
                      f"copies of a multiple eigenvalue may be missing (k = {k} passes at most); pass deflate=p with "
                      "a larger p.", RuntimeWarning, stacklevel=3)


def lanczos_iters(n: int, k: int, max_iters=None) -> int:
    """The matvec budget :func:`lanczos_extreme` uses: ``min(n, max_iters or max(10 k, 150))``."""
    return int(min(n, max_iters if max_iters is not None else max(10 * k, 150)))


def check_lanczos(status, tol, K: int, throw: bool = True):
    """:func:`lanczos_extreme`'s status check (raises :class:`SpectralError` on MAX_ITERS when ``throw``
    and ``status`` is concrete); for callers that run it under ``jit`` and check afterwards."""
    check_status(status, "lanczos_extreme", throw, messages={
        MAX_ITERS: (f"not every wanted Ritz pair reached the residual tolerance tol={tol:g} within max_iters={K} "
                    "matvecs (small gaps between the wanted eigenvalues and the rest converge slowly); "
                    "increase max_iters or loosen tol")})


ROW_BLOCK = 16  # basis rows per block in the re-orthogonalization


def _cgs(Q, w, j):
    """One classical Gram–Schmidt pass ``w − Q_{0..j}ᵀ (Q_{0..j} w)`` touching only the live
    row blocks of the preallocated basis (memory traffic ∝ j, not ∝ max_iters)."""
    B = ROW_BLOCK
    nb = j // B + 1

    def coef(b, h):
        return jax.lax.dynamic_update_slice_in_dim(h, jax.lax.dynamic_slice_in_dim(Q, b * B, B, 0) @ w, b * B, 0)

    h = jax.lax.fori_loop(0, nb, coef, jnp.zeros(Q.shape[0], Q.dtype))

    def sub(b, acc):
        return acc - jax.lax.dynamic_slice_in_dim(Q, b * B, B, 0).T @ jax.lax.dynamic_slice_in_dim(h, b * B, B, 0)

    return jax.lax.fori_loop(0, nb, sub, w)


def _lanczos_loop(mv, q0, K, k, which, tol, check_every=1, key=None, proj=None, n_eff=None):
    """The Lanczos run. ``proj``: projector applied to restart vectors (a deflated pass keeps its basis in the
    complement of the locked pairs, of dimension ``n_eff``)."""
    n = q0.shape[0]
    n_eff = n if n_eff is None else n_eff
    proj = (lambda v: v) if proj is None else proj
    dtype = q0.dtype
    Kp = -(-(K + 1) // ROW_BLOCK) * ROW_BLOCK  # rows padded to whole blocks (extra rows stay 0)
    Q = jnp.zeros((Kp, n), dtype).at[0].set(q0)
    alpha = jnp.zeros(K, dtype)
    beta = jnp.zeros(K, dtype)
    key = jax.random.key(0) if key is None else key

    def cond(st):
        Q, alpha, beta, j, done, restarts = st
        return (j < K) & ~done

    def fresh(Q, j):
        # a random unit vector orthogonal to rows 0..j: the next Krylov block starts there
        r = proj(jax.random.normal(jax.random.fold_in(key, j), (n,), dtype))
        r = _cgs(Q, _cgs(Q, r, j), j)
        return r / jnp.linalg.norm(r)

    def body(st):
        Q, alpha, beta, j, done, restarts = st
        q = Q[j]
        w = mv(q)
        a = jnp.vdot(q, w)
        # full re-orthogonalization (classical Gram–Schmidt, twice is enough) against rows 0..j
        w = _cgs(Q, w, j)
        w = proj(_cgs(Q, w, j))      # a deflated pass: rounding along the locked pairs removed (÷ a small β amplifies it)
        b = jnp.linalg.norm(w)
        jn = j + 1
        alpha = alpha.at[j].set(a)
        scale = jnp.max(jnp.abs(jnp.where(jnp.arange(K) < jn, alpha, 0.0))) + jnp.maximum(jnp.max(beta), b)
        # breakdown: span(Q_0..j) is invariant. Its Ritz pairs are exact, but eigenvalues outside it (a start
        # vector in an invariant subspace, or a multiple eigenvalue's other copies) are not in the Krylov space:
        # restart from a fresh orthogonal vector with β_j = 0 (T decouples) instead of stopping (user audit,
        # session 49: v0 = e1 on diag(1..20) returned 0, 0, 1 with status SUCCESS; v0 = e1 + e2 returned −861)
        breakdown = b <= 1e-14 * scale
        b = jnp.where(breakdown, 0.0, b)
        beta = beta.at[j].set(b)
        nxt = jax.lax.cond(breakdown & (jn < n_eff), lambda _: fresh(Q, j), lambda _: w / jnp.where(b > 0, b, 1.0), None)
        Q = Q.at[jn].set(nxt)

        def check(_):
            theta, S, on = _ritz(alpha, beta, jn, K, which, k)
            resid = jnp.abs(b * S[jn - 1])             # ‖A y − θ y‖ = |β_j s_{j,i}| (earlier blocks: β = 0)
            return (jn >= k) & jnp.all(on) & jnp.all(resid <= tol * scale)

        due = (jn % check_every == 0) | (jn == K)
        # never accept at a breakdown (the wanted pairs of the exhausted block are trivially exact)
        conv = jax.lax.cond(due & ~breakdown, check, lambda _: jnp.asarray(False), None)
        return Q, alpha, beta, jn, conv | ~jnp.isfinite(b), restarts + (breakdown & (jn < n_eff)).astype(jnp.int32)

    Q, alpha, beta, j, done, restarts = jax.lax.while_loop(
        cond, body, (Q, alpha, beta, jnp.asarray(0), jnp.asarray(False), jnp.asarray(0, jnp.int32)))
    theta, S, on = _ritz(alpha, beta, j, K, which, k)
    scale = jnp.max(jnp.abs(jnp.where(jnp.arange(K) < j, alpha, 0.0))) + jnp.max(beta)
    bound = jnp.abs(beta[j - 1] * S[j - 1])
    conv = on & (bound <= tol * scale)
    vecs = S.T @ Q[:K]                                 # Ritz vectors Q_j s_i (S rows ≥ j are 0)
    vecs = vecs / jnp.linalg.norm(vecs, axis=1, keepdims=True)
    order = jnp.argsort(theta)
    theta, vecs, bound, conv = theta[order], vecs[order], bound[order], conv[order]
    # the true residuals ‖A v − θ v‖ (k more matvecs): the bound assumes an orthonormal basis
    resid = jax.lax.map(lambda tv: jnp.linalg.norm(mv(tv[1]) - tv[0] * tv[1]), (theta, vecs))
    finite = jnp.all(jnp.isfinite(theta))
    status = jnp.where(~finite, NONFINITE, jnp.where(jnp.all(conv), SUCCESS, MAX_ITERS))
    return theta, vecs, resid, bound, conv, j, status, restarts, scale


def subspace_overlap(vectors, basis):
    """Squared overlap of each vector with a subspace, summed over the m blocks:
    ``‖Θᵀ V‖_F²`` for W-shaped vectors V (d, m) and ``basis`` Θ (d, k) orthonormal; for the
    ``dmft.sample_data`` convention (Θ* = first k axes) pass ``basis=k`` (int)."""
    if isinstance(basis, int):
        return jnp.sum(vectors[..., :basis, :] ** 2, axis=(-2, -1))
    return jnp.sum(jnp.einsum("da,...dm->...am", basis, vectors) ** 2, axis=(-2, -1))


# ------------------------------------------------------------------------------------
# stochastic Lanczos quadrature
# ------------------------------------------------------------------------------------


class SLQResult(eqx.Module):
    """Gauss quadrature of the spectral measure per probe: ``nodes`` (probes, order) Ritz
    values, ``weights`` (probes, order) squared first components (sum 1 per probe)."""

    nodes: jax.Array
    weights: jax.Array

    def density(self, grid, width):
        """Gaussian-smoothed density on ``grid`` (average over probes)."""
        g = jnp.asarray(grid)[:, None, None]
        ker = jnp.exp(-0.5 * ((g - self.nodes[None]) / width) ** 2) / (width * jnp.sqrt(2 * jnp.pi))
        return jnp.mean(jnp.sum(ker * self.weights[None], axis=-1), axis=-1)

    def cdf(self, x):
        """Averaged cumulative spectral distribution at ``x`` (no smoothing)."""
        x = jnp.asarray(x)[..., None, None]
        return jnp.mean(jnp.sum(jnp.where(self.nodes <= x, self.weights, 0.0), axis=-1), axis=-1)


def stochastic_lanczos_quadrature(matvec, dim, key, *, probes=8, order=80) -> SLQResult:
    """SLQ: ``order`` Lanczos steps (full re-orthogonalization) from each of ``probes``
    Rademacher vectors (vmapped); the tridiagonal's eigenpairs give the nodes/weights."""
    shape = (dim,) if isinstance(dim, int) else tuple(dim)
    n = math.prod(shape)
    for name, v in (("probes", probes), ("order", order)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"stochastic_lanczos_quadrature: {name} must be an int >= 1 (got {v!r}).")
    order = int(min(order, n))
    _check_operator(matvec, shape, jnp.float64)
    mv = lambda q: matvec(q.reshape(shape)).reshape(-1)

    def one(kk):
        q0 = jax.random.rademacher(kk, (n,), dtype=jnp.float64)
        q0 = q0 / jnp.linalg.norm(q0)
        Q = jnp.zeros((order + 1, n)).at[0].set(q0)

        def body(j, st):
            Q, alpha, beta = st
            q = Q[j]
            w = mv(q)
            a = jnp.vdot(q, w)
            mask = (jnp.arange(order + 1) <= j)[:, None]
            Qm = jnp.where(mask, Q, 0.0)
            w = w - Qm.T @ (Qm @ w)
            w = w - Qm.T @ (Qm @ w)
            b = jnp.linalg.norm(w)
            return Q.at[j + 1].set(w / jnp.where(b > 0, b, 1.0)), alpha.at[j].set(a), beta.at[j].set(b)

        Q, alpha, beta = jax.lax.fori_loop(0, order, body, (Q, jnp.zeros(order), jnp.zeros(order)))
        theta = tridiag_eigvals(alpha, beta[:-1], jnp.arange(order))
        scale = jnp.max(jnp.abs(alpha)) + 2.0 * jnp.max(beta) + 1e-300
        # cluster-orthogonalized vectors: copies of a multiple eigenvalue that rounding put in T would otherwise
        # share one vector and its first component (session 50: a triple eigenvalue got 0.43 ± 0.1 of its weight)
        S = _cluster_vectors(alpha, beta[:-1], theta, scale)
        w = S[0] ** 2
        return theta, w / jnp.sum(w)

    nodes, weights = jax.vmap(one)(jax.random.split(key, probes))
    return SLQResult(nodes=nodes, weights=weights)
