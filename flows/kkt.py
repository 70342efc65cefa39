"""KKT points of the constrained NCF  max N(u) s.t. ‖u‖ = 1  (THEORY §5).

    KKT:                 ∇N(u*) = L N(u*) u*          (Euler: uᵀ∇N(u) = L N(u))
    second-order positive: N(u*) > 0 and Δ := L N(u*) − λ_max(P ∇²N(u*) P |_T) > 0,
                           P = I − u*u*ᵀ, T = {v : vᵀu* = 0}.
Found by projected ascent u̇ = (I − uuᵀ)∇N(u), discretised as the retraction
u ← (u + η∇N(u)) / ‖u + η∇N(u)‖ with a per-start adaptive η (accept if N increases),
vmapped over many random starts inside one lax.while_loop (η‖∇N‖ capped at 1).
"""
from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .errors import FlowError, check_data
from .linalg import dense_tangent_eigh, tangent_hessian_eigs
from .models import as_model, check_degree, require_theory
from .ncf import make_ncf, require_signal


class KKTPoint(eqx.Module):
    direction: Any            # unit-norm parameter pytree u*
    value: float              # N(u*)
    gap: float                # Δ = L N − λ_max(P∇²N P on T, symmetry-orbit directions excluded)
    multiplier: float         # L N(u*)  (the Lagrange multiplier)
    residual: float           # ‖∇N − L N u*‖ / ‖∇N‖  (multiplier check)
    tangent_max: float        # λ_max(P ∇²N P | T)
    second_order_positive: bool
    degree: float
    fraction: float           # fraction of starts converging here (nan for a single start)
    count: int
    nonzero: Any              # pytree of bool masks: |u_i| > zero_tol · max|u|
    n_nonzero: int
    active_units: Any         # per hidden layer bool array (feed-forward models) or None
    ranks: tuple              # numerical rank of each matrix leaf (σ_i > 1e-6 σ_1)
    sv_ratio: tuple           # σ_2/σ_1 of each matrix leaf (rank-one ⇔ ≈ 0)
    method: str               # 'dense' or 'lanczos' for Δ
    symmetry_dim: int         # tangent directions of a continuous symmetry orbit (λ = L N, J v = 0), left out of
                              # Δ and tangent_max (dense only; −1: not tested, Lanczos)


class KKTList(list):
    """A list of KKTPoint (best N first) with `.info` (search provenance and diagnostics)."""
    info: dict


def _ascent(Nf, U0, tol: float, max_iter: int):
    g = jax.grad(Nf)

    def stats(u):
        gu = g(u)
        gn = jnp.linalg.norm(gu)
        r = jnp.linalg.norm(gu - jnp.dot(u, gu) * u) / (gn + 1e-300)
        return gu, gn, r

    def step(u, eta, n, done):
        gu, gn, r = stats(u)
        # cap η‖∇N‖ ≤ 1: the retraction's tangent contraction is (1 + ηλ)/(1 + ηLN), which for
        # η → ∞ tends to λ/(LN) and can sit at −1 (no contraction); with ηLN ≤ 1 it is ≤ 1 − ηΔ/2.
        eta = jnp.minimum(eta, 1.0 / (gn + 1e-300))
        un = u + eta * gu
        un = un / jnp.linalg.norm(un)
        nn = Nf(un)
        acc = (nn >= n - 1e-13 * jnp.abs(n)) & ~done   # rounding-level decreases allowed
        u2 = jnp.where(acc, un, u)
        eta2 = jnp.where(acc, eta * 1.5, eta * 0.5)
        n2 = jnp.where(acc, nn, n)
        _, _, r2 = stats(u2)
        return u2, eta2, n2, done | (r2 < tol), r2

    vstep = jax.vmap(step)

    def init(u):
        u = u / jnp.linalg.norm(u)
        _, gn, r = stats(u)
        return u, 0.1 / (gn + 1e-300), Nf(u), r < tol, r

    U, eta, n, done, r = jax.vmap(init)(U0)

    def cond(s):
        return (s[0] < max_iter) & ~jnp.all(s[4])

    def body(s):
        it, U, eta, n, done, r = s
        U, eta, n, done, r = vstep(U, eta, n, done)
        return it + 1, U, eta, n, done, r

    it, U, eta, n, done, r = jax.lax.while_loop(cond, body, (0, U, eta, n, done, r))
    return U, n, r, done, it


@eqx.filter_jit
def _ascent_jit(model, loss, X, y, U0, like, tol, max_iter):
    _, unravel = ravel_pytree(like)
    N = make_ncf(model, X, y, loss)
    return _ascent(lambda x: N(unravel(x)), U0, tol, max_iter)


@eqx.filter_jit
def _ncf_stats(model, loss, X, y, u, L):
    """N(u), ‖∇N − L N u‖/‖∇N‖ for unit u (pytree)."""
    flat, unravel = ravel_pytree(u)
    N = make_ncf(model, X, y, loss)
    Nf = lambda x: N(unravel(x))
    val, gN = jax.value_and_grad(Nf)(flat)
    gn = jnp.linalg.norm(gN)   # ∇N = 0 (e.g. y ≡ 0): no multiplier to check, nan (not the 0 of 0/1e-300)
    return val, jnp.where(gn > 0, jnp.linalg.norm(gN - L * val * flat) / jnp.where(gn > 0, gn, 1.0), jnp.nan)


@eqx.filter_jit
def _dense_tangent_eigs(model, loss, X, y, u):
    """Tangent eigenvalues of ∇²N at u, and ‖J v‖/‖J‖ for each eigenvector v (J = ∂H(X; u)/∂u): a direction
    that leaves the outputs unchanged to first order."""
    flat, unravel = ravel_pytree(u)
    N = make_ncf(model, X, y, loss)
    ev, V = dense_tangent_eigh(lambda x: N(unravel(x)), flat)
    J = jax.jacfwd(lambda x: model(unravel(x), X))(flat)
    return ev, jnp.linalg.norm(J @ V, axis=0) / (jnp.linalg.norm(J, 2) + 1e-300)


def _matrix_stats(direction):
    ranks, ratios = [], []
    for leaf in jax.tree_util.tree_leaves(direction):
        a = np.asarray(leaf)
        if a.ndim == 2 and min(a.shape) > 1:
            s = np.linalg.svd(a, compute_uv=False)
            ranks.append(int(np.sum(s > 1e-6 * s[0])) if s[0] > 0 else 0)
            ratios.append(float(s[1] / s[0]) if s[0] > 0 else float("nan"))
    return tuple(ranks), tuple(ratios)


def analyze_kkt(model, X, y, u, loss="square", degree=None, zero_tol: float = 1e-6,
                fraction=float("nan"), count: int = 1, dense_max: int = 800) -> KKTPoint:
    """N, multiplier check, Δ, sparsity and rank structure of a (near-)KKT direction u."""
    model = as_model(model)
    L = check_degree(model, X) if degree is None else degree
    flat, unravel = ravel_pytree(u)
    flat = flat / jnp.linalg.norm(flat)
    u = unravel(flat)
    y = jnp.asarray(y, dtype=jnp.float64)
    val, res = map(float, _ncf_stats(model, loss, X, y, u, float(L)))
    sym = np.zeros(0, dtype=bool)
    if flat.shape[0] <= dense_max:
        ev, jv = map(np.asarray, _dense_tangent_eigs(model, loss, X, y, u))
        method = "dense"
        # continuous symmetry (e.g. W_l → W_l A, W_{l+1} → Aᵀ W_{l+1}, A orthogonal, in deep linear nets): N is
        # constant on the orbit, so its tangent directions have λ = L N exactly (the constrained second variation
        # vᵀ∇²N v − L N = 0) and leave H(X; ·) unchanged to first order. They made Δ ≈ 0 (±1e-15) for every KKT point
        # of deep_linear(width ≥ 2) (user audit, session 49); Δ is taken on their complement.
        sym = (np.abs(ev - L * val) <= 1e-6 * max(abs(L * val), 1e-300)) & (jv <= 1e-6)
    else:
        N = make_ncf(model, X, y, loss)
        ev, method = tangent_hessian_eigs(lambda x: N(unravel(x)), flat, dense_max=dense_max)
    rest = ev[~sym] if sym.size else ev
    tmax = float(rest[-1]) if rest.size else float("nan")
    gap = L * val - tmax
    direction = unravel(flat)
    amax = float(jnp.max(jnp.abs(flat)))
    nonzero = jax.tree_util.tree_map(lambda a: np.asarray(jnp.abs(a) > zero_tol * amax), direction)
    nnz = int(sum(int(m.sum()) for m in jax.tree_util.tree_leaves(nonzero)))
    active = None
    if hasattr(model, "unit_norms"):
        active = [np.asarray(un > zero_tol * amax) for un in model.unit_norms(direction)]
    ranks, ratios = _matrix_stats(direction)
    return KKTPoint(direction=direction, value=val, gap=float(gap), multiplier=float(L * val),
                    residual=res, tangent_max=tmax, second_order_positive=bool(val > 0 and gap > 1e-8 * max(1.0, abs(L * val))),
                    degree=float(L), fraction=float(fraction), count=int(count), nonzero=nonzero,
                    n_nonzero=nnz, active_units=active, ranks=ranks, sv_ratio=ratios, method=method,
                    symmetry_dim=int(sym.sum()) if method == "dense" else -1)


def _signature(flat):
    return np.sort(np.abs(np.asarray(flat)))


def kkt_points(model, X, y, loss="square", starts: int = 64, key=None, params_like=None,
               tol: float = 1e-9, max_iter: int = 20000, positive_only: bool = True,
               experimental: bool = False, zero_tol: float = 1e-6, dedup_tol: float = 1e-5,
               max_analyze: int = 20, dense_max: int = 800) -> KKTList:
    """KKT points of max N(u) on the unit sphere from `starts` random starts (vmapped).

    `model`: a flows model (feedforward/two_layer/...; random starts from model.init) or a
    bare callable H(params, X) with `params_like=`. Points are deduplicated up to neuron
    permutation and sign symmetries (same N and same sorted |u|) and up to continuous symmetries
    (same N and same outputs H(X; u)). Returns a KKTList (best N
    first); `.info` holds counts of collapsed (N ≤ 0) and unconverged starts."""
    model = as_model(model, params_like)
    require_theory(model, experimental, "kkt_points")
    check_data(X, y, loss)
    if isinstance(starts, bool) or not isinstance(starts, (int, np.integer)) or starts < 1:
        raise FlowError(f"starts={starts!r}: the number of random starts must be an integer >= 1 (default 64).")
    X = jnp.asarray(X, dtype=jnp.float64)
    L = check_degree(model, X)
    key = jax.random.PRNGKey(0) if key is None else key
    p0 = model.init(key, X.shape[1])
    _, unravel = ravel_pytree(p0)
    keys = jax.random.split(key, starts)
    U0 = jax.vmap(lambda k: ravel_pytree(model.init(k, X.shape[1]))[0])(keys)
    y = jnp.asarray(y, dtype=jnp.float64)
    U, n, r, done, it = _ascent_jit(model, loss, X, y, U0, p0, tol, max_iter)
    U, n, r, done = map(np.asarray, (U, n, r, done))
    scale = max(np.max(np.abs(n)), 1e-300)
    collapsed = n <= 1e-10 * scale
    # outputs H(X; u): points on one orbit of a continuous symmetry (deep linear nets: W_l A, Aᵀ W_{l+1}) have the
    # same outputs but different sorted |u| (deep_linear(2, 3) listed 32 "unique" points of one N: session 49)
    H = np.asarray(jax.vmap(lambda x: model(unravel(x), X))(jnp.asarray(U)))
    hscale = max(float(np.max(np.abs(H))), 1e-300)
    groups: list[list[int]] = []
    reps: list[int] = []
    for i in np.argsort(-n):
        if positive_only and collapsed[i]:
            continue
        si = _signature(U[i])
        for g, j in zip(groups, reps):
            if abs(n[i] - n[j]) <= dedup_tol * scale and (
                    np.max(np.abs(si - _signature(U[j]))) <= np.sqrt(dedup_tol)
                    or np.max(np.abs(H[i] - H[j])) <= np.sqrt(dedup_tol) * hscale):
                g.append(int(i))
                break
        else:
            groups.append([int(i)])
            reps.append(int(i))
    out = KKTList()
    for g, j in list(zip(groups, reps))[:max_analyze]:
        best = min(g, key=lambda i: r[i])
        out.append(analyze_kkt(model, X, y, unravel(jnp.asarray(U[best])), loss, degree=L,
                               zero_tol=zero_tol, fraction=len(g) / starts, count=len(g),
                               dense_max=dense_max))
    out.info = dict(starts=starts, iterations=int(it), converged=int(done.sum()),
                    collapsed=int(collapsed.sum()), unique=len(groups), degree=L,
                    tol=tol, loss=loss if isinstance(loss, str) else "user")
    if positive_only and not groups:
        raise FlowError(f"kkt_points: all {starts} starts collapsed to N(u*) <= 0 (no positive KKT "
                        "point): the labels are uncorrelated with every direction of this model; "
                        "check y / loss, or raise starts=.")
    return out


def kkt_from(model, params0, X, y, loss="square", tol: float = 1e-10, max_iter: int = 50000,
             degree=None, dense_max: int = 800) -> KKTPoint:
    """The KKT point reached by projected ascent (the directional NCF flow) from params0."""
    model = as_model(model)
    check_data(X, y, loss)
    X = jnp.asarray(X, dtype=jnp.float64)
    L = check_degree(model, X) if degree is None else degree
    flat, unravel = ravel_pytree(params0)
    y = jnp.asarray(y, dtype=jnp.float64)
    require_signal(loss, y)
    U, n, r, done, it = _ascent_jit(model, loss, X, y, flat[None], params0, tol, max_iter)
    return analyze_kkt(model, X, y, unravel(U[0]), loss, degree=L, dense_max=dense_max)
