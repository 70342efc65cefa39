"""Derivatives of the threshold with respect to the problem's parameters (issue #7).

The stationary route (``spectral.stationary_threshold``) defines, for one Monte Carlo key
(common random numbers), a margin ``m(δ, θ)`` as a chain of three solves:

    x*(δ, θ)          stationary DMFT fixed point: residual R(x; δ, θ) = 0           (S1)–(S5)
    D_i(x*, θ)        per-sample Hessian blocks of its law (r = prox(b), autodiff)
    S*, λ_c           block Stieltjes equation G(S; λ_c) = S − F(S, λ_c) = 0 at the cut
                      λ_c = level (a fixed λ below the edge: "level" cut), or at the bulk edge
                      (the fold of the real branch: G = 0 and det(I − L(S)) = 0, "edge" cut)
    m = μ_min A(S*, λ_c)   (THEORY §2 outlier matrix; m < 0 ⇔ a hard outlier beyond the cut)

and the threshold of that key is the root ``m(δ_NN(θ), θ) = 0``. Each solve is done by its
own (non-differentiable) solver; derivatives never go through the iterations: every solution
is re-attached to its equation by the implicit function theorem,

    dx = −(∂R/∂x)^{-1} (∂R/∂θ dθ + ∂R/∂δ dδ)          (a ``jax.custom_jvp`` rule, below)

and likewise for ``S*`` (Jacobian ``I − L``) and for the fold ``(S*, λ_edge)`` (the bordered
Jacobian of ``(G, det(I − L))`` in ``(S, λ)``, regular at a simple fold). The per-sample prox
already carries its own implicit rule (``dmft.prox``). Then

    dδ_NN/dθ = − (∂m/∂θ) / (∂m/∂δ)                     (total derivatives along the solves)

computed by forward mode (one JVP per parameter). The root itself is found by Newton in δ
with the same ``∂m/∂δ``, warm-starting each fixed point from the previous one.

The derivative does not exist (and a :class:`ThresholdGradientError` says why) when the
fixed point is not converged to ``residual_tol`` (the first phase does not converge, or
Levenberg–Marquardt stalls), when the cut switches between the edge and the level at the root
(edge ≈ level: the margin has a kink in δ and θ), when ``∂m/∂δ`` vanishes (a tangential
root), or when the smallest eigenvalue of ``A`` is degenerate. Parameters must enter smoothly
(``dmft.families``: C² activations and losses); a kink in ``ℓ''`` (Huber) or in ``σ''`` makes
the Monte Carlo average non-differentiable and its derivative miss the population's boundary
term.

The derivative is that of the per-key threshold (fixed samples); averaging over keys gives the
derivative of the Monte Carlo estimate of δ_NN. It is checked against central finite
differences of the same per-key threshold (``tests/test_threshold_gradient.py``,
``benchmarks/bench_threshold_gradient.py``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .law import BlockLaw, law_from_samples, sample_blocks
from .outliers import A_matrix
from .stieltjes import (_linearization_from_B, _map_from_B, blocks_B, bulk_edge, fixed_point_map,
                        real_stieltjes_path)


# relative Cholesky jitter of the dynamic DMFT on the dynamic route (dmft.solve.CHOL_JITTER explains:
# with the default 1e-13 late-time fields carry amplified rounding noise, non-smooth in δ and θ)
DYNAMIC_CHOL_JITTER = 1e-8


class ThresholdGradientError(ValueError):
    """The threshold or its derivative does not exist at this point (message says why)."""


@dataclasses.dataclass
class ThresholdGradient:
    """Per-key threshold ``delta_nn`` and ``gradient`` = dδ_NN/dθ (same pytree as the
    parameters). ``margin_delta`` = ∂m/∂δ and ``margin_params`` = ∂m/∂θ (total, through the
    fixed point) at the root; ``cut`` = "edge" or "level"; ``diagnostics``: Newton history in
    δ, fixed-point residuals, edge/level gap, outlier eigenvalue gap, wall time."""

    delta_nn: float
    gradient: Any
    margin_delta: float
    margin_params: Any
    cut: str
    edge: float
    level: Optional[float]
    diagnostics: dict
    setting: dict
    state: Optional[dict] = None    # stationary (Q, V, M, a) at the root: a warm start for nearby parameters


# ----------------------------------------------------------------------------------------
# implicit re-attachment of a solution to its equation
# ----------------------------------------------------------------------------------------


def _sym_pack(S):
    i, j = np.triu_indices(S.shape[-1])
    return S[..., i, j]


def _sym_unpack(v, m):
    i, j = np.triu_indices(m)
    S = jnp.zeros((m, m), v.dtype).at[i, j].set(v)
    return S + S.T - jnp.diag(jnp.diag(S))


def implicit(residual: Callable, solution, theta):
    """Return ``solution`` (a pytree solving ``residual(solution, theta) = 0``) with the
    derivative of the implicit function: ``d sol = −J^+ ∂_θ residual·dθ``, ``J`` = Jacobian of the
    flattened residual in the flattened solution (least-squares solve: redundant equations and
    unknowns that do not enter, e.g. symmetric duplicates, are allowed). The tangent of
    ``solution`` itself is ignored (it comes from a solver)."""
    sol = jax.lax.stop_gradient(solution)
    u0, unravel = ravel_pytree(sol)

    @jax.custom_jvp
    def attach(u, th):
        return u

    @attach.defjvp
    def attach_jvp(primals, tangents):
        u, th = primals
        _, dth = tangents
        flat_res = lambda uu, tt: ravel_pytree(residual(unravel(uu), tt))[0]
        # J = ∂res/∂u (columns: unit tangents of u) and rhs = ∂res/∂θ·dθ from one vmapped jvp
        # (one trace of the residual, not two: the residual holds the per-sample prox)
        n = u.shape[0]
        tu = jnp.concatenate([jnp.eye(n, dtype=u.dtype), jnp.zeros((1, n), u.dtype)])
        tth = jax.tree.map(lambda d: np.zeros((n + 1,) + np.shape(d), d.dtype) if d.dtype == jax.dtypes.float0 else
                           jnp.concatenate([jnp.zeros((n,) + jnp.shape(d), d.dtype), d[None]]), dth)
        cols = jax.vmap(lambda a, b: jax.jvp(flat_res, (u, th), (a, b))[1])(tu, tth)   # (n + 1, n_res)
        J, rhs = cols[:n].T, cols[n]
        du = -jnp.linalg.lstsq(J, rhs, rcond=1e-12)[0]
        return u, du

    return unravel(attach(u0, theta))


# ----------------------------------------------------------------------------------------
# the block Stieltjes pieces of spectral.stieltjes / spectral.outliers on a traced sample law
# ----------------------------------------------------------------------------------------


def _law(D, zeta=None):
    """Equal-weight law of traced samples (no validation: shapes come from the solvers)."""
    return BlockLaw(D=D, weights=jnp.full((D.shape[0],), 1.0 / D.shape[0], D.dtype), zeta=zeta)


def _stieltjes_residual(S, lam, D, delta, B=None):
    law = _law(D)
    G = S - (fixed_point_map(S, lam, law, delta) if B is None else _map_from_B(B, lam, law))
    return _sym_pack(0.5 * (G + G.T))


def _fold_residual(v, D, delta):
    """Unknowns v = (upper(S), λ): G(S, λ) = 0 and det(I − L(S)) = 0 (the fold = bulk edge).
    The per-sample blocks B(S) are formed once for both equations."""
    m = D.shape[-1]
    S, lam = _sym_unpack(v[:-1], m), v[-1]
    B = blocks_B(S, D, delta)
    return jnp.concatenate([_stieltjes_residual(S, lam, D, delta, B),
                            jnp.linalg.det(jnp.eye(m * m) - _linearization_from_B(S, B, _law(D), delta))[None]])


def _A_min(S, lam, D, zeta, delta):
    """Smallest eigenvalue of THEORY §2's A(λ) and its gap to the next."""
    ev = jnp.linalg.eigvalsh(A_matrix(S, lam, _law(D, zeta), delta))
    return ev[0], ev[1] - ev[0] if ev.shape[0] > 1 else jnp.inf


@jax.jit
def _fold_newton_step(v, D, delta):
    r = _fold_residual(v, D, delta)
    J = jax.jacfwd(_fold_residual)(v, D, delta)
    return v - jnp.linalg.solve(J, r), jnp.max(jnp.abs(r))


def _polish_fold(S, lam, D, delta, steps=8):
    """Newton on the bordered fold system from the bisection's edge (S there is ~1e-7 off:
    the real branch has a square-root singularity at the edge)."""
    v = jnp.concatenate([_sym_pack(S), jnp.asarray([lam])])
    hist = []
    for _ in range(steps):
        v_new, r = _fold_newton_step(v, D, jnp.asarray(delta, float))
        hist.append(float(r))
        if hist[-1] < 1e-14:
            break
        v = v_new
    return _sym_unpack(v[:-1], S.shape[-1]), v[-1], hist


# ----------------------------------------------------------------------------------------
# the margin as a differentiable function of (θ, δ)
# ----------------------------------------------------------------------------------------


class _Context:
    """Everything fixed for one key: family, samples, route and solver settings.
    ``route``: "stationary" (δ_NN, the t → ∞ fixed point) or "dynamic" (δ*(t): the dynamic
    DMFT at step ``t`` of ``steps`` GD steps of size ``lr``, differentiated through its scan)."""

    def __init__(self, family, key, paths, newton_steps, level, hard, route="stationary", lr=None, steps=None, t=None):
        self.family, self.key, self.paths, self.newton_steps = family, key, int(paths), int(newton_steps)
        self.level, self.hard = level, hard
        self.route, self.lr, self.steps, self.t = route, lr, steps, t

    def equations(self, params, delta):
        from dmft.stationary import _equations

        return _equations(self.family(params), delta, self.key, self.paths, self.hard, self.newton_steps)

    def trajectory(self, params, delta):
        from dmft.solve import _solve_core

        return _solve_core(self.family(params), jnp.asarray(delta, float), jnp.asarray(self.lr, float), self.key,
                           int(self.steps), self.paths, self.hard, (int(self.t),), DYNAMIC_CHOL_JITTER)

    def level_value(self, params):
        if self.level == "auto":
            return -self.family(params).ridge
        return jnp.asarray(self.level, float)

    def law_of_trajectory(self, params, traj):

        pb = self.family(params)
        smp, a = traj.samples[int(self.t)], traj.second_layer[int(self.t)]
        y, r, z = (smp.y, smp.r, smp.z) if hasattr(smp, "y") else (smp["y"], smp["r"], smp["z"])
        D = sample_blocks(pb, y, r, a)
        return 0.5 * (D + jnp.swapaxes(D, 1, 2)), z[:, list(self.hard)]

    def law(self, params, delta, x_star):
        """(D, ζ) of the route's law as a differentiable function of (θ, δ)."""
        hard = list(self.hard)
        if self.route == "dynamic":
            return self.law_of_trajectory(params, self.trajectory(params, delta))
        x = implicit(lambda xx, th: self.equations(th[0], th[1])["residual"](xx), x_star, (params, delta))
        E = self.equations(params, delta)
        ev = E["evaluate"](E["unpack"](x))
        return ev["D"], E["z"][:, hard]


def _margin_fn(ctx: _Context, cut: str, x_star, S_star, lam_star):
    """``(params, delta) -> (margin, eigen-gap)`` with every solve attached implicitly at the
    given primal solutions (computed by the caller at the same point)."""

    def f(params, delta):
        D, zeta = ctx.law(params, delta, x_star)
        if cut == "level":
            lam = ctx.level_value(params)
            s = implicit(lambda ss, th: _stieltjes_residual(_sym_unpack(ss, D.shape[-1]), th[0], th[1], th[2]),
                         _sym_pack(S_star), (lam, D, delta))
            S = _sym_unpack(s, D.shape[-1])
        else:
            v = implicit(lambda vv, th: _fold_residual(vv, th[0], th[1]),
                         jnp.concatenate([_sym_pack(S_star), jnp.asarray([lam_star])]), (D, delta))
            S, lam = _sym_unpack(v[:-1], D.shape[-1]), v[-1]
        return _A_min(S, lam, D, zeta, delta)

    return f


@eqx.filter_jit
def _margin_derivatives(family, key, static, cut, x_star, S_star, lam_star, params, delta, with_params=True):
    """(margin, eigen-gap), ∂m/∂δ and ∂m/∂θ (flattened; zero-length without ``with_params``), all
    by forward mode through the implicit rules (and, on the dynamic route, through the DMFT scan);
    one compilation per (family, route, cut, with_params).
    ``static`` = (paths, newton_steps, level, hard, route, lr, steps, t)."""
    ctx = _Context(family, key, *static[:4], route=static[4], lr=static[5], steps=static[6], t=static[7])
    f = _margin_fn(ctx, cut, x_star, S_star, lam_star)
    p_flat, unravel = ravel_pytree(params)
    g = lambda pf, d: f(unravel(pf), d)
    n = p_flat.shape[0] if with_params else 0
    tang_p = jnp.concatenate([jnp.zeros((1, p_flat.shape[0])), jnp.eye(p_flat.shape[0])[:n]])
    tang_d = jnp.concatenate([jnp.ones((1,)), jnp.zeros((n,))])
    (val, gap), (dval, _) = jax.vmap(lambda tp, td: jax.jvp(g, (p_flat, delta), (tp, td)), out_axes=(None, 0))(tang_p, tang_d)
    return val, gap, dval[0], dval[1:]


# ----------------------------------------------------------------------------------------
# primal evaluation at one (θ, δ)
# ----------------------------------------------------------------------------------------


def _edge_and_level(ctx, params, delta, law):
    level = float(ctx.level_value(params)) if ctx.level is not None else None
    edge = bulk_edge(law, float(delta), side="bottom", convention="strict", throw=False)
    if int(edge.status) != 0:
        raise ThresholdGradientError(f"bulk edge not found at δ={float(delta):.6g} (status {int(edge.status)}).")
    return float(edge.edge), edge.S, level


def _primal(ctx, params, delta, start, residual_tol, max_iters):
    """Stationary fixed point (or dynamic DMFT state at step t), law, edge and cut at (θ, δ).
    Raises where nothing is defined."""
    import dmft
    from dmft.stationary import CONVERGED

    pb = ctx.family(params)
    if ctx.route == "dynamic":
        traj = ctx.trajectory(params, delta)
        failed = int(np.asarray(traj.failed_step)) if getattr(traj, "failed_step", None) is not None else -1
        if 0 <= failed <= int(ctx.t):
            raise ThresholdGradientError(f"the DMFT became non-finite at step {failed} (δ={float(delta):.6g}): reduce lr.")
        D, zeta = ctx.law_of_trajectory(params, traj)
        law = law_from_samples(np.asarray(D), zeta=np.asarray(zeta), unbounded=())
        edge, S_edge, level = _edge_and_level(ctx, params, delta, law)
        return dict(x=None, law=law, edge=edge, S_edge=S_edge, level=level, start=None, residual=0.0,
                    train_error=float(np.asarray(traj.train_error)[int(ctx.t)]))
    st = dmft.stationary(pb, float(delta), paths=ctx.paths, key=ctx.key, start=start, max_iters=max_iters,
                         newton_steps=ctx.newton_steps)
    res = float(st.residual)
    if int(st.status) != CONVERGED or res > residual_tol:
        raise ThresholdGradientError(
            f"stationary DMFT at δ={float(delta):.6g} not converged ({st.message()}; residual {res:.1e} > "
            f"residual_tol {residual_tol:.0e}): the threshold's derivative needs the fixed point; the first phase may not "
            "converge here, or raise max_iters / change the warm start.")
    E = ctx.equations(params, delta)
    x = E["pack"](dict(Q=st.q, V=st.response, M=st.overlap, a=st.second_layer))
    smp = st.samples
    law = law_from_samples(np.asarray(sample_blocks(pb, smp["y"], smp["r"], st.second_layer)),
                           zeta=np.asarray(smp["z"])[:, list(ctx.hard)], unbounded=())
    edge, S_edge, level = _edge_and_level(ctx, params, delta, law)
    return dict(x=x, law=law, edge=edge, S_edge=S_edge, level=level,
                start=dict(Q=st.q, V=st.response, M=st.overlap, a=st.second_layer), residual=res,
                train_error=float(st.train_error))


def _cut_solution(ctx, prim, delta, cut):
    D = jnp.asarray(prim["law"].D)
    if cut == "edge":
        S, lam, hist = _polish_fold(prim["S_edge"], prim["edge"], D, float(delta))
        return S, float(lam), dict(fold_newton_residuals=hist)
    lam = prim["level"]
    # continuation from the edge outward to the level (the physical branch, ρ(L) < 1)
    S, it, res, rho, ok = real_stieltjes_path(prim["law"], float(delta), 0, lam, prim["S_edge"], prim["edge"], 4, 1e-14,
                                              200, 0.5, "newton")
    if not bool(ok):
        raise ThresholdGradientError(f"the Stieltjes solve at the level λ={lam:.4g} failed (residual {float(res):.1e}).")
    return S, lam, dict(level_residual=float(res))


def threshold_gradient(family: Callable, params, *, delta0: float, key, paths: int, warmup=None, start=None, level="auto",
                       route: str = "stationary", lr: Optional[float] = None, steps: Optional[int] = None,
                       time_step: Optional[int] = None,
                       newton_steps: int = 30, max_iters: int = 400, residual_tol: float = 1e-9, tol: float = 1e-10,
                       max_newton: int = 25, kink_tol: float = 1e-3, margin_tol: Optional[float] = None,
                       window: float = 0.5) -> ThresholdGradient:
    """Per-key threshold (δ_NN of the stationary route, or δ*(t) on the dynamic route) and its gradient.

    ``family(params) -> dmft.Problem`` (params: a pytree of floats, e.g. ``{"beta": 1.0}``);
    ``delta0``: a starting δ near the root (e.g. from ``spectral.delta_nn_stationary``);
    ``key``: the Monte Carlo key (fixed samples); ``warmup``: a ``dmft.Warmup`` for the first
    fixed point (later ones are continued) or ``start`` = dict(Q, V, M, a) (e.g. ``.state`` of a
    result at nearby parameters: continuation); ``level``: "auto" (−ridge: THEORY's negative
    outlier), "edge" (separation from the bulk) or a float. The cut at the root is
    min(edge, level); ``kink_tol``: the root is refused when |edge − level| is below it (the
    margin has a kink there). Newton stops when its step is below ``tol``·δ or |margin| below
    ``margin_tol`` (default 1e-13 stationary, 1e-9 dynamic: the measured noise floors). Until a
    sign change is bracketed, iterates stay within ``delta0·(1 ± window)``; a root not found there
    is an error (not a wander to a far, possibly different, root).

    ``route="dynamic"`` differentiates δ*(t) instead: the margin of the dynamic DMFT's law at
    step ``time_step`` (default ``steps``) of ``steps`` GD steps of size ``lr`` (forward mode
    through the DMFT's scan; no fixed point, no warm-up). Unlike δ_NN it depends on the
    initialization (e.g. ``Init.q0`` as a parameter). It runs the DMFT at Cholesky jitter
    ``DYNAMIC_CHOL_JITTER`` = 1e-8 (smooth in δ and θ); ``spectral.delta_star`` / ``margin_curve`` at the same
    key agree with it only at the same jitter: pass ``chol_jitter=1e-8`` there (session 50 audit, staircase
    t = 20, 2048 paths, key 0: 1.24118 here and at 1e-8 there, 1.24223 at their default 1e-13; central
    differences in β of the 1e-8 roots 0.28317 against this gradient's 0.28327, of the 1e-13 roots 0.2912)."""
    t0 = time.perf_counter()
    hard = family(params).teacher.hard_coordinates()
    if not hard:
        raise ThresholdGradientError("the teacher has no hard coordinates: there is no hard outlier and no threshold.")
    lvl = None if level == "edge" else level
    # margin noise floor: ~1e-11 on the stationary route, ~1e-9 through 80 dynamic DMFT steps (rounding
    # in the block-Cholesky recursion, see dmft.solve.CHOL_JITTER): Newton stops there
    margin_tol = (1e-13 if route == "stationary" else 1e-9) if margin_tol is None else float(margin_tol)
    if route not in ("stationary", "dynamic"):
        raise ThresholdGradientError(f"route must be 'stationary' (δ_NN) or 'dynamic' (δ*(t)); got {route!r}.")
    if route == "dynamic":
        if lr is None or steps is None:
            raise ThresholdGradientError("route='dynamic' needs lr= and steps= (the DMFT horizon).")
        time_step = int(steps) if time_step is None else int(time_step)
        if not 0 <= time_step <= int(steps):
            raise ThresholdGradientError(f"time_step must lie in 0..steps = 0..{int(steps)}; got {time_step}.")
        lr = float(lr)
    static = (int(paths), int(newton_steps), lvl, hard, route, lr, None if steps is None else int(steps), time_step)
    ctx = _Context(family, key, *static[:4], route=route, lr=lr, steps=static[6], t=time_step)
    pb0 = family(params)
    if start is None and warmup is not None and route == "stationary":
        start = warmup.run(pb0, float(delta0), key)
    delta = float(delta0)
    hist = []
    pos, neg = None, None          # last δ with margin ≥ 0 / < 0: a bracket once both are known
    good_delta, good_start, retreats = None, start, 0
    converged = False
    for it in range(max_newton):
        try:
            prim = _primal(ctx, params, delta, start, residual_tol, max_iters)
        except ThresholdGradientError as e:
            # the trial δ has no fixed point (or edge): retreat halfway toward the last good δ
            if good_delta is None or retreats >= 4:
                raise
            retreats += 1
            hist.append(dict(delta=delta, failed=str(e)[:200]))
            delta, start = 0.5 * (delta + good_delta), good_start
            continue
        start = prim["start"]
        cut = "edge" if (prim["level"] is None or prim["edge"] <= prim["level"]) else "level"
        S, lam, cut_diag = _cut_solution(ctx, prim, delta, cut)
        sol = (prim["x"], jnp.asarray(S), jnp.asarray(lam, float))
        # stationary route: ∂m/∂θ comes with every step (one compilation; the extra JVPs are cheap next
        # to the solves); dynamic route: each JVP is a pass through the DMFT, so only ∂m/∂δ here
        mval, gap, dm, dm_dp = _margin_derivatives(family, key, static, cut, *sol, params, jnp.asarray(delta, float),
                                                   route == "stationary")
        mval, dm = float(mval), float(dm)
        hist.append(dict(delta=delta, margin=mval, margin_delta=dm, cut=cut, edge=prim["edge"], level=prim["level"],
                         residual=prim["residual"], train_error=prim["train_error"], **cut_diag))
        if not np.isfinite(dm) or dm == 0.0:
            raise ThresholdGradientError(f"∂m/∂δ = {dm} at δ={delta:.6g}: tangential or undefined root.")
        good_delta, good_start = delta, start
        if mval >= 0:
            pos = delta
        else:
            neg = delta
        # safeguarded Newton: clipped to ±25 % of δ, bisection when it leaves a known bracket
        step = float(np.clip(-mval / dm, -0.25 * delta, 0.25 * delta))
        cand = delta + step
        if pos is not None and neg is not None:
            lo, hi = min(pos, neg), max(pos, neg)
            if not lo < cand < hi:
                cand = 0.5 * (lo + hi)
        else:
            lo_w, hi_w = float(delta0) * (1.0 - window), float(delta0) * (1.0 + window)
            if not lo_w <= cand <= hi_w:
                if abs(delta - lo_w) < 1e-12 * delta0 or abs(delta - hi_w) < 1e-12 * delta0:
                    raise ThresholdGradientError(
                        f"no sign change of the margin within δ0·(1 ± {window}) = [{lo_w:.4g}, {hi_w:.4g}] (margin "
                        f"{mval:.3g} at the window's edge δ={delta:.4g}): start elsewhere (delta0) or widen window.")
                cand = min(max(cand, lo_w), hi_w)
        if abs(cand - delta) < tol * max(1.0, delta) or abs(mval) < margin_tol:
            converged = True
            break
        delta = cand
    if not converged:
        tail = ", ".join(f"({h['delta']:.5g}, {h.get('margin', float('nan')):.2e})" for h in hist[-6:])
        ms = np.array([h.get("margin", np.nan) for h in hist], float)
        ms = ms[np.isfinite(ms)]
        same = ms.size and (np.all(ms > 0) or np.all(ms < 0))
        # session 50 audit: a margin flat at +0.28 (no outlier reaches the level) bounced between 0.80 and 1.14
        # and said only "did not converge"
        why = (f" The margin never changed sign at the {ms.size} iterates (all {'positive: no outlier below the cut' if ms[0] > 0 else 'negative: an outlier at every δ tried'}; "
               f"range {ms.min():.3g} … {ms.max():.3g}): there may be no threshold near delta0 = {delta0:g} — scan a δ grid "
               "with spectral.delta_star / delta_nn_stationary to bracket one first." if same else
               " Start closer to the root (delta0) or check that the margin changes sign.")
        raise ThresholdGradientError(f"Newton in δ did not converge in {max_newton} steps; last (δ, margin): {tail}." + why)
    if prim["level"] is not None and abs(prim["edge"] - prim["level"]) < kink_tol:
        raise ThresholdGradientError(
            f"at the root δ={delta:.6g} the bulk edge ({prim['edge']:.5g}) and the level ({prim['level']:.5g}) coincide "
            f"within kink_tol={kink_tol}: the margin switches between them there and δ_NN is not differentiable.")
    if not float(gap) > 1e-8:
        raise ThresholdGradientError(f"the smallest eigenvalue of A is degenerate at the root (gap {float(gap):.1e}).")
    # ∂m/∂θ at the last primal point (the root moved by its step < tol·δ)
    p_flat, unravel = ravel_pytree(params)
    if route == "dynamic":
        _, _, dm, dm_dp = _margin_derivatives(family, key, static, cut, *sol, params, jnp.asarray(delta, float), True)
        dm = float(dm)
    dm_dp = np.asarray(dm_dp)
    grad_flat = -dm_dp / dm
    setting = dict(paths=int(paths), level=level, newton_steps=int(newton_steps), residual_tol=float(residual_tol),
                   tol=float(tol), margin_tol=margin_tol, params=np.asarray(p_flat).tolist(), delta0=float(delta0),
                   warmup=None if warmup is None else dict(lr=float(warmup.lr), steps=int(warmup.steps), paths=int(warmup.paths)),
                   route=("stationary DMFT + outlier equation (per key): δ_NN" if route == "stationary" else
                          f"dynamic DMFT at step {time_step} of {steps} (lr {lr}) + outlier equation (per key): δ*(t)"),
                   lr=lr, steps=steps, time_step=time_step,
                   chol_jitter=DYNAMIC_CHOL_JITTER if route == "dynamic" else None)
    return ThresholdGradient(delta_nn=delta, gradient=unravel(jnp.asarray(grad_flat)), margin_delta=dm,
                             margin_params=unravel(jnp.asarray(dm_dp)), cut=cut, edge=prim["edge"], level=prim["level"],
                             diagnostics=dict(newton=hist, eigen_gap=float(gap), wall_s=time.perf_counter() - t0),
                             setting=setting, state=prim["start"])
