"""Gradient flow ẇ = −∇𝓛(w), w(0) = δ w_0, with diffrax (THEORY §5).

Adaptive solver (default Tsit5 + PIDController, float64), log-spaced save times, cheap
summaries (loss, ‖∇𝓛‖, ‖w‖, per-leaf and per-unit norms, norm of a masked subset) and/or
full weights; terminating events:
  saddle    — after escape (𝓛 < 𝓛(0)·(1 − escape_drop)) the gradient is small (‖∇𝓛‖ < gtol)
  divergence — ‖w‖ > diverge_norm (saddle at infinity, e.g. logistic loss).
`first_saddle` finds the first plateau of ‖∇𝓛‖ after escape (or the event) and adds the Hessian
signature there (dense eigenvalues, or Lanczos on HVPs).
"""
from __future__ import annotations

from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .errors import FlowError, check_data
from .linalg import hessian_eigs
from .models import as_model, check_degree, require_theory
from .ncf import make_loss, require_signal


class FlowResult(eqx.Module):
    ts: Any                  # (T,) save times
    params: Any              # pytree with leading axis T, or None (save='summary')
    loss: Any                # (T,)
    grad_norm: Any           # (T,)
    norm: Any                # (T,) ‖w‖
    leaf_norms: Any          # (T, n_leaves)  per layer
    unit_norms: Any          # list over hidden layers of (T, width), or None
    masked_norm: Any         # (T,) ‖w_Z‖ for the given mask, or None
    masked_max: Any          # (T,) max |w_Z|, or None
    final: Any               # params at t_final
    t_final: float
    n_steps: int
    code: str                # 'completed' | 'saddle' | 'diverged' | 'max_steps' | 'failed'
    message: str
    setting: dict


def log_times(t1: float, n: int = 200, t_min_frac: float = 1e-4):
    """0 followed by n−1 log-spaced times from t1·t_min_frac to t1."""
    return np.concatenate([[0.0], np.geomspace(t1 * t_min_frac, t1, n - 1)])


def _summary(model, lossf, mask_flat, unravel):
    def fn(t, x, args):
        w = unravel(x)
        val, g = jax.value_and_grad(lambda z: lossf(unravel(z)))(x)
        out = dict(loss=val, grad_norm=jnp.linalg.norm(g), norm=jnp.linalg.norm(x),
                   leaf_norms=jnp.stack([jnp.linalg.norm(a) for a in jax.tree_util.tree_leaves(w)]))
        if hasattr(model, "unit_norms"):
            out["unit_norms"] = model.unit_norms(w)
        if mask_flat is not None:
            out["masked_norm"] = jnp.linalg.norm(jnp.where(mask_flat, x, 0.0))
            out["masked_max"] = jnp.max(jnp.where(mask_flat, jnp.abs(x), 0.0))
        return out
    return fn


@eqx.filter_jit
def _solve(model, loss, X, y, x0, like, ts, t1, mask_flat, rtol, atol, solver, max_steps,
           gtol, escape_drop, diverge_norm, save_params, use_events, dt0=None):
    _, unravel = ravel_pytree(like)
    lossf = make_loss(model, X, y, loss)
    flat_loss = lambda x: lossf(unravel(x))
    grad = jax.grad(flat_loss)
    loss0 = flat_loss(jnp.zeros_like(x0))
    term = dfx.ODETerm(lambda t, x, args: -grad(x))
    subs = [dfx.SubSaveAt(ts=ts, fn=_summary(model, lossf, mask_flat, unravel)), dfx.SubSaveAt(t1=True)]
    if save_params:
        subs.append(dfx.SubSaveAt(ts=ts))
    event = None
    if use_events:
        def cond_saddle(t, x, args, **kw):
            esc = flat_loss(x) < loss0 - escape_drop * jnp.abs(loss0)
            return esc & (jnp.linalg.norm(grad(x)) < gtol)

        def cond_div(t, x, args, **kw):
            return jnp.linalg.norm(x) > diverge_norm
        event = dfx.Event(cond_fn=(cond_saddle, cond_div))
    ctrl = dfx.PIDController(rtol=rtol, atol=atol) if dt0 is None else dfx.ConstantStepSize()
    sol = dfx.diffeqsolve(term, solver, 0.0, t1, dt0, x0, saveat=dfx.SaveAt(subs=subs),
                          stepsize_controller=ctrl,
                          max_steps=max_steps, event=event, throw=False)
    div_flag = jnp.linalg.norm(sol.ys[1][-1]) > diverge_norm
    return sol.ys, sol.ts[1][-1], sol.stats["num_steps"], sol.result == dfx.RESULTS.successful, \
        sol.result == dfx.RESULTS.event_occurred, div_flag, sol.result == dfx.RESULTS.max_steps_reached


def gradient_flow(model, params0, X, y, loss="square", t1: float = 10.0, ts=None, delta=None,
                  n_save: int = 200, solver=None, rtol: float = 1e-9, atol=None,
                  max_steps: int = 200_000, save: str = "summary", mask=None,
                  stop_at_saddle: bool = False, gtol=None, escape_drop: float = 1e-2,
                  diverge_norm: float = 1e3, experimental: bool = False, params_like=None,
                  dt=None) -> FlowResult:
    """Integrate ẇ = −∇𝓛(w) from w(0) = δ·params0 (δ = 1 if delta is None) up to t1.

    ts: save times (default: 0 and n_save−1 log-spaced times up to t1). save: 'summary',
    'params' or 'both'. mask: pytree of bools (a weight subset Z) whose norm is tracked.
    stop_at_saddle: terminate when, after escape, ‖∇𝓛‖ < gtol (default 1e-6·𝓛(0)); the run
    also stops when ‖w‖ > diverge_norm (saddle at infinity). solver: any diffrax solver
    (default Tsit5()). atol default: 1e-3·rtol·‖w(0)‖ (relative control at tiny δ).
    dt: fixed step (ConstantStepSize) instead of the adaptive PID controller — needed for
    ReLU (experimental): the adaptive controller stalls at the kinks (measured: 20000 steps
    to reach t = 0.05)."""
    model = as_model(model, params_like)
    require_theory(model, experimental, "gradient_flow")
    if save not in ("summary", "params", "both"):
        raise FlowError(f"save={save!r}: use 'summary', 'params' or 'both'.")
    check_data(X, y, loss)
    X = jnp.asarray(X, dtype=jnp.float64)
    y = jnp.asarray(y, dtype=jnp.float64)
    x0, unravel = ravel_pytree(params0)
    x0 = jnp.asarray(x0, dtype=jnp.float64)
    if delta is not None:
        x0 = delta * x0 / jnp.linalg.norm(x0)
    if not t1 > 0:
        raise FlowError(f"t1={t1}: the horizon must be > 0.")
    ts = log_times(t1, n_save) if ts is None else np.asarray(ts, dtype=np.float64)
    if ts.min() < 0 or ts.max() > t1 * (1 + 1e-12):
        raise FlowError(f"ts must lie in [0, t1={t1}]; got [{ts.min()}, {ts.max()}].")
    mask_flat = None if mask is None else jnp.asarray(ravel_pytree(
        jax.tree_util.tree_map(lambda m: jnp.asarray(m, dtype=jnp.float64), mask))[0] > 0.5)
    loss0 = float(make_loss(model, X, y, loss)(unravel(jnp.zeros_like(x0))))
    gtol = 1e-6 * abs(loss0) if gtol is None else gtol
    atol = 1e-3 * rtol * float(jnp.linalg.norm(x0)) if atol is None else atol
    solver = dfx.Tsit5() if solver is None else solver
    ys, t_end, nsteps, ok, ev, div, maxs = _solve(
        model, loss, X, y, x0, params0, jnp.asarray(ts), jnp.asarray(float(t1)), mask_flat,
        jnp.asarray(rtol), jnp.asarray(atol), solver, int(max_steps), jnp.asarray(float(gtol)),
        jnp.asarray(escape_drop), jnp.asarray(diverge_norm), save != "summary", stop_at_saddle,
        None if dt is None else jnp.asarray(float(dt)))
    summ, final = ys[0], ys[1][-1]
    t_end = float(t_end)
    if bool(ev):
        code = "diverged" if bool(div) else "saddle"
        msg = (f"‖w‖ exceeded diverge_norm={diverge_norm} at t={t_end:.6g} (saddle at infinity)"
               if code == "diverged" else f"first saddle detected at t={t_end:.6g} (‖∇𝓛‖ < gtol={gtol:.3g} after escape)")
    elif bool(ok):
        code, msg = "completed", f"integrated to t1={t1}"
    elif bool(maxs):
        code, msg = "max_steps", f"max_steps={max_steps} reached at t={t_end:.6g}; raise max_steps or loosen rtol"
    else:
        code, msg = "failed", f"solver failed at t={t_end:.6g} (stiff or non-finite); try solver=diffrax.Kvaerno5()"
    keep = np.asarray(ts) <= t_end * (1 + 1e-12)
    pick = lambda a: None if a is None else np.asarray(a)
    params = None
    if save != "summary":
        params = jax.vmap(unravel)(ys[2])
    return FlowResult(
        ts=np.asarray(ts), params=params, loss=pick(summ["loss"]), grad_norm=pick(summ["grad_norm"]),
        norm=pick(summ["norm"]), leaf_norms=pick(summ["leaf_norms"]),
        unit_norms=[np.asarray(u) for u in summ["unit_norms"]] if "unit_norms" in summ else None,
        masked_norm=pick(summ.get("masked_norm")), masked_max=pick(summ.get("masked_max")),
        final=unravel(final), t_final=t_end, n_steps=int(nsteps), code=code, message=msg,
        setting=dict(t1=float(t1), delta=delta, loss=loss if isinstance(loss, str) else "user",
                     solver=type(solver).__name__, rtol=rtol, atol=atol, loss0=loss0, gtol=gtol,
                     escape_drop=escape_drop, diverge_norm=diverge_norm, n_saved_valid=int(keep.sum())))


class SaddleResult(eqx.Module):
    params: Any              # state at the first saddle (or where divergence was detected)
    time: float
    loss: float
    grad_norm: float
    norm: float
    at_infinity: bool
    hessian_min: float       # smallest Hessian eigenvalue (Ritz value if Lanczos)
    hessian_max: float
    n_negative: int          # negative eigenvalues (< −1e-8·max|λ|); Lanczos: among Ritz values
    residual_ncf: float      # max_{‖u_Z‖=1} rᵀ[H(p*+u_Z) − H(p*)], r = −ℓ'(H(p*), y) (mask given; nan else)
    is_saddle: bool          # stationary (see `stationarity`) and: a negative eigenvalue, or residual_ncf > 0
    method: str              # 'event' (‖∇𝓛‖ < gtol), 'plateau' (first deep local min of ‖∇𝓛‖ after escape,
                             # refined), 'diverged' (saddle at infinity) or 'none' (no saddle found); + '/dense|lanczos'
    peak_grad: float         # largest ‖∇𝓛‖ on the save grid between escape and the returned point
    stationarity: float      # grad_norm / peak_grad (a plateau needs ≤ depth; an event ≤ gtol / peak)
    flow: FlowResult
    message: str


def first_plateau(ts, loss, grad_norm, loss0: float, escape_drop: float, depth: float, last_ok: bool = True):
    """Index of the first deep local minimum of ‖∇𝓛‖ after escape on a save grid, or None.

    Escape: the first save point with 𝓛 < 𝓛(0)(1 − escape_drop). A local minimum i (g_i ≤ both neighbours;
    the last point counts when ``last_ok``) is deep when g_i ≤ depth · max(g_0..g_i): the flow slowed down by
    that factor since its escape, as it does near a saddle (and near a minimum)."""
    g = np.asarray(grad_norm, dtype=np.float64)
    esc = np.asarray(loss) < loss0 - escape_drop * abs(loss0)
    if not esc.any():
        return None
    for i in range(max(int(np.argmax(esc)), 1), len(g)):
        right = g[i] <= g[i + 1] if i + 1 < len(g) else last_ok
        if g[i] <= g[i - 1] and right and g[i] <= depth * g[:i].max():
            return i
    return None


def first_saddle(model, params0, X, y, loss="square", t1: float = 100.0, delta=None, gtol=None,
                 n_save: int = 400, escape_drop: float = 1e-2, diverge_norm: float = 1e3,
                 rtol: float = 1e-9, solver=None, experimental: bool = False, mask=None,
                 dense_max: int = 800, params_like=None, ts=None, depth: float = 0.1,
                 refine: int = 201) -> SaddleResult:
    """Run the flow from δ·params0 to its first saddle after escape, and report the loss and the Hessian
    signature there.

    The first saddle is the first place after escape where the flow nearly stops: the first local minimum
    of ‖∇𝓛‖ on the save grid that is ``depth`` times below the gradient's peak since the start, located to
    1/(refine − 1) of its grid bracket by a second solve; or an earlier ‖∇𝓛‖ < gtol event. The event alone
    is not enough: the flow passes the first saddle at a distance that depends on δ, so an absolute gtol can
    miss it and stop at a later saddle or at the minimum (user audit, session 49). ‖w‖ > diverge_norm with
    no plateau before it is a saddle at infinity. With no plateau and no event, ``method`` is 'none' and
    ``is_saddle`` False (extend t1)."""
    model = as_model(model, params_like)
    if not 0 < depth < 1:
        raise FlowError(f"depth={depth}: the plateau depth (‖∇𝓛‖ / its peak) must lie in (0, 1); default 0.1.")
    fr = gradient_flow(model, params0, X, y, loss, t1=t1, delta=delta, n_save=n_save, solver=solver,
                       rtol=rtol, stop_at_saddle=True, gtol=gtol, escape_drop=escape_drop,
                       diverge_norm=diverge_norm, experimental=experimental, mask=mask, ts=ts)
    loss0, gtol = fr.setting["loss0"], fr.setting["gtol"]
    valid = fr.ts <= fr.t_final * (1 + 1e-12)
    tv, lv, gv = fr.ts[valid], fr.loss[valid], fr.grad_norm[valid]
    escaped = np.any(lv < loss0 - escape_drop * abs(loss0)) or fr.code in ("saddle", "diverged")
    if not escaped:
        require_signal(loss, y)
        raise FlowError(f"t1={t1}: the flow from delta={delta} never escaped the origin within the horizon "
                        f"(loss stayed at {lv[-1]:.6g} ≈ 𝓛(0) = {loss0:.6g}); increase t1 "
                        "(escape time ≈ T_δ = ln(1/δ)/(2N) for L = 2, 1/(L(L−2)Nδ^{L−2}) for L > 2) or delta.")
    # a plateau before the event (or before t1): the grid's last point counts only when no event cut the run
    i = first_plateau(tv, lv, gv, loss0, escape_drop, depth, last_ok=fr.code == "completed")
    peak = float(np.max(gv[: (i if i is not None else len(gv))])) if len(gv) > 1 else float("nan")
    if i is not None:
        lo, hi = float(tv[i - 1]), float(tv[min(i + 1, len(tv) - 1)])
        tr = np.concatenate([[0.0], np.linspace(lo, hi, refine)])
        fine = gradient_flow(model, params0, X, y, loss, t1=hi, ts=tr, delta=delta, rtol=rtol, solver=solver,
                             save="params", experimental=experimental)
        j = 1 + int(np.argmin(fine.grad_norm[1:]))
        w, t, method = jax.tree_util.tree_map(lambda a: a[j], fine.params), float(tr[j]), "plateau"
    elif fr.code == "saddle":
        w, t, method = fr.final, fr.t_final, "event"
    elif fr.code == "diverged":
        w, t, method = fr.final, fr.t_final, "diverged"
    else:
        w, t, method = fr.final, fr.t_final, "none"
    X = jnp.asarray(X, dtype=jnp.float64)
    lossf = make_loss(model, X, jnp.asarray(y, dtype=jnp.float64), loss)
    flat, unravel = ravel_pytree(w)
    fl = lambda x: lossf(unravel(x))
    val, gr = jax.value_and_grad(fl)(flat)
    gn = float(jnp.linalg.norm(gr))
    at_inf = method == "diverged"
    if at_inf:
        ev, hm = np.array([np.nan]), "skipped"
    else:
        ev, hm = hessian_eigs(fl, flat, dense_max=dense_max)
    scale = np.nanmax(np.abs(ev)) if np.isfinite(ev).any() else 1.0
    nneg = int(np.sum(ev < -1e-8 * scale))
    rncf = float("nan")
    if mask is not None and not at_inf:
        rncf = residual_ncf(model, w, mask, X, y, loss)
    stat = gn / peak if peak > 0 else float("nan")
    stationary = method in ("plateau", "event") and (stat <= depth or gn < gtol)
    messages = dict(
        plateau=f"first saddle at t={t:.6g}: the first local minimum of ‖∇𝓛‖ after escape ({gn:.3g}, "
                f"{stat:.2g} of its peak {peak:.3g}; refined on {refine} points)",
        event=fr.message, diverged=fr.message + "; no plateau of ‖∇𝓛‖ before it",
        none=f"no saddle found up to t={fr.t_final:.6g} ({fr.code}): ‖∇𝓛‖ has no local minimum ≤ depth={depth} × "
             f"its peak after escape; extend t1 (or n_save for a finer grid)")
    msg = messages[method]
    if method in ("plateau", "event") and nneg == 0 and not rncf > 1e-10 * abs(loss0):
        msg += "; no negative curvature" + (" and residual NCF ≤ 0" if mask is not None else "") + \
            ": a (local) minimum, not a saddle" + ("" if mask is not None else " (pass mask= to test zero units)")
    return SaddleResult(params=w, time=float(t), loss=float(val), grad_norm=gn,
                        norm=float(jnp.linalg.norm(flat)), at_infinity=bool(at_inf),
                        hessian_min=float(ev[0]), hessian_max=float(ev[-1]), n_negative=nneg,
                        residual_ncf=rncf, is_saddle=bool(stationary and (nneg > 0 or rncf > 1e-10 * abs(loss0))),
                        method=method + ("/" + hm), peak_grad=peak, stationarity=float(stat), flow=fr, message=msg)


def residual_ncf(model, w, mask, X, y, loss="square", starts: int = 16, key=None) -> float:
    """max over unit u supported on Z of rᵀ[H(X; w + u) − H(X; w)], r = −∂_pℓ(H(X; w), y): the
    NCF of the zero (pruned) units at a saddle w (two-layer: exactly L-homogeneous in u_Z).
    > 0 means an escape direction along Z exists even when the Hessian is degenerate there."""
    from .ncf import get_loss
    X = jnp.asarray(X, dtype=jnp.float64)
    y = jnp.asarray(y, dtype=jnp.float64)
    flat, unravel = ravel_pytree(w)
    m = np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=jnp.float64), mask))[0] > 0.5)
    idx = jnp.asarray(np.nonzero(m)[0])
    if idx.size == 0:
        return float("nan")
    H0 = model(w, X)
    r = -jax.vmap(jax.grad(get_loss(loss), argnums=0))(H0, y)
    key = jax.random.PRNGKey(11) if key is None else key
    Z0 = jax.random.normal(key, (starts, idx.size))
    U, n, res, done, it = _residual_ascent(model, w, idx, X, r, H0, Z0, 1e-9, 5000)
    return float(jnp.max(n))


@eqx.filter_jit
def _residual_ascent(model, w, idx, X, r, H0, Z0, tol, max_iter):
    """The NCF ascent of :func:`residual_ncf` as one program per (model, shapes): a closure built per call
    and passed to ``jax.jit`` as a static argument recompiled on every call, identical ones included
    (session 51 audit: ~1 s a call, inside every ``first_saddle``)."""
    from .kkt import _ascent

    flat, unravel = ravel_pytree(w)
    return _ascent(lambda z: jnp.dot(r, model(unravel(flat.at[idx].add(z)), X) - H0), Z0, tol, max_iter)
