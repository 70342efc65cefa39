"""The limiting trajectory p(t) = lim_{δ→0} ψ(t + T_δ, δ w_0) (THEORY §5).

Time shift along a KKT direction w* (radius r: ṙ = L N(w*) r^{L−1}):
    L = 2:  T_δ = ln(1/δ) / (2 N(w*))
    L > 2:  T_δ = 1 / (L (L−2) N(w*) δ^{L−2})
For a generic start w_0 in the stable set of w* (shift='ncf', the default), the w_0-dependent
part comes from the NCF flow u̇ = ∇N(u), u(0) = w_0:
    L = 2:  T̃_δ = (ln(1/δ) − ln a) / (2N),   a = ⟨w_0, w*⟩   (exact: ⟨u(t), w*⟩ = a e^{2Nt})
    L > 2:  T̃_δ = T*(w_0) / δ^{L−2},          T* = blow-up time of u (= 1/(L(L−2)N) at w_0 = w*)
Both reduce to T_δ when w_0 = w*. p(t) is also built directly as ψ(t + T_ε, ε w*), ε ≪ min δ.
Convergence: sup_t ‖ψ(t + T̃_δ, δw_0) − p(t)‖ ~ δ^κ; heuristic κ = Δ/(L N), L = 2 theorem bound
Δ/(Δ + 8N).
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .errors import FlowError, check_data
from .flow import first_saddle, gradient_flow
from .kkt import KKTPoint, kkt_from
from .models import as_model, check_degree, require_theory
from .ncf import make_ncf, require_signal


def time_shift(L: float, N: float, delta):
    """T_δ = ln(1/δ)/(2N) (L = 2);  1/(L(L−2) N δ^{L−2}) (L > 2)."""
    delta = np.asarray(delta, dtype=np.float64)
    if abs(L - 2) < 1e-12:
        return np.log(1.0 / delta) / (2.0 * N)
    return 1.0 / (L * (L - 2.0) * N * delta ** (L - 2.0))


def escape_time(model, direction, X, y, delta, L: float, N: float, *, level: float = 0.5, window=(0.3, 2.0),
                points: int = 400, rtol: float = 1e-10, loss="square"):
    """Time at which ‖w(t)‖ first reaches ``level`` for the flow started at ``δ·direction``
    (linear interpolation on ``points`` save times in ``window × T_δ``). Raises FlowError
    when the norm never reaches ``level`` inside the window."""
    from .errors import FlowError
    from .flow import gradient_flow

    T = float(time_shift(L, N, delta))
    ts = T * np.linspace(window[0], window[1], points)
    fr = gradient_flow(model, direction, X, y, loss, t1=float(ts[-1]), ts=ts, delta=float(delta), rtol=rtol)
    norms = np.asarray(fr.norm)
    above = norms >= level
    if not above.any() or above[0]:
        raise FlowError(f"escape_time: ‖w‖ does not cross level={level} inside t ∈ [{ts[0]:.3g}, {ts[-1]:.3g}] "
                        f"(δ={delta}); widen `window` or change `level`.")
    i = int(np.argmax(above))
    return float(np.interp(level, norms[i - 1:i + 1], ts[i - 1:i + 1]))


def p_asymptote(L: float, N: float, t):
    """‖p(t)‖ as t → −∞: e^{2Nt} (L = 2); (L(L−2)N(−t))^{−1/(L−2)} (L > 2)."""
    t = np.asarray(t, dtype=np.float64)
    if abs(L - 2) < 1e-12:
        return np.exp(2 * N * t)
    return (L * (L - 2.0) * N * (-t)) ** (-1.0 / (L - 2.0))


REMAINING_FRACTION = 1e-9   # L > 2: stop the NCF flow once the time left to blow-up is below this fraction of t


@eqx.filter_jit
def _ncf_blowup(model, loss, X, y, u0, like, L, t1, R, rtol):
    _, unravel = ravel_pytree(like)
    N = make_ncf(model, X, y, loss)
    gN = jax.grad(lambda x: N(unravel(x)))

    def remaining(u):
        # time left from radius r along the (aligned) direction: r^{−(L−2)} / (L(L−2) N(u/r)) = r² / (L(L−2) N(u))
        # by homogeneity (L > 2; inf for L = 2, where the flow grows exponentially and only u / r is used)
        Nu = N(unravel(u))
        return jnp.where((L > 2) & (Nu > 0), jnp.sum(u**2) / (L * (L - 2.0) * jnp.where(Nu > 0, Nu, 1.0)), jnp.inf)

    def stop(t, u, a, **kw):
        # ‖u‖ > R, or (L > 2) so close to the blow-up that t + dt would not resolve the time left: for L = 7
        # the flow reaches ‖u‖ ≈ 450 with ~1e-16 left and stalls there (user audit, session 49)
        return (jnp.linalg.norm(u) > R) | (remaining(u) < REMAINING_FRACTION * t)

    sol = dfx.diffeqsolve(dfx.ODETerm(lambda t, u, a: gN(u)), dfx.Tsit5(), 0.0, t1, None, u0,
                          stepsize_controller=dfx.PIDController(rtol=rtol, atol=1e-14),
                          event=dfx.Event(stop), max_steps=100_000, throw=False)
    uR = sol.ys[-1]
    r = jnp.linalg.norm(uR)
    return sol.ts[-1] + jnp.where(jnp.isfinite(remaining(uR)), remaining(uR), 0.0), r, sol.stats["num_steps"], \
        uR / r, sol.result == dfx.RESULTS.event_occurred


def _ncf_escape(model, params0, X, y, loss, L, R, rtol):
    """Integrate the unnormalized NCF u̇ = ∇N(u), u(0) = w_0/‖w_0‖, until ‖u‖ = R (or, for L > 2, until the
    time left to the blow-up is below REMAINING_FRACTION of t): (T*, direction u/‖u‖ as a pytree like
    ``params0``). T* is the blow-up time for L > 2 (inf for L = 2, where the flow grows exponentially).
    Raises FlowError if neither stop is reached."""
    flat, unravel = ravel_pytree(params0)
    flat = flat / jnp.linalg.norm(flat)
    # R = None: 1e4 for L = 2; for L > 2 no radius cap, only the time-left stop. The time left from radius r is
    # computed along the current direction, which is not yet aligned with w*: from r = 1e4 that put ~4e-12 into T*,
    # 4e-4 time units into the shift T*/δ at δ = 1e-8 (L = 3; error to p 8.5e-3, session 49); none from r ~ 1e8
    R = (1e4 if abs(L - 2) < 1e-12 else math.inf) if R is None else R
    N0 = float(make_ncf(model, X, y, loss)(unravel(flat)))
    # horizon: the blow-up time scale 1/(L(L−2)N0) for L > 2, ln R/(2 N0) for L = 2 (generous factors)
    scale = (math.log(max(R, 2.0)) / (2 * max(abs(N0), 1e-3)) if abs(L - 2) < 1e-12
             else 1.0 / (L * (L - 2.0) * max(abs(N0), 1e-3)))
    T, r, steps, u, hit = _ncf_blowup(model, loss, X, jnp.asarray(y, dtype=jnp.float64), flat, params0, float(L),
                                      jnp.asarray(1e4 * scale + 1e4), jnp.asarray(R), jnp.asarray(rtol))
    if not bool(hit):
        raise FlowError(f"params0: the NCF flow from this start does not escape: ‖u‖ reached {float(r):.4g} < R = {R:g} "
                        f"after {int(steps)} solver steps (t = {float(T):.4g}; it collapses to 0 or is too slow); "
                        "choose a start in the stable set of a positive KKT point.")
    return float(T), unravel(u)


def ncf_blowup_time(model, params0, X, y, loss="square", L=None, R=None, rtol=1e-11):
    """T*(w_0): blow-up time of the NCF flow u̇ = ∇N(u), u(0) = w_0/‖w_0‖ (L > 2). The flow is integrated
    until the time left, r²/(L(L−2)N(u)) along the current direction, is below 1e-9·t (or ‖u‖ > R if given),
    and that time is added (L = 7 reaches the float64 time resolution near ‖u‖ ≈ 450)."""
    model = as_model(model)
    X = jnp.asarray(X, dtype=jnp.float64)
    L = check_degree(model, X) if L is None else L
    return _ncf_escape(model, params0, X, y, loss, L, R, rtol)[0]


def ncf_escape_direction(model, params0, X, y, loss="square", L=None, R=None, rtol=1e-11):
    """Direction u/‖u‖ of the unnormalized NCF flow u̇ = ∇N(u), u(0) = w_0/‖w_0‖, when ‖u‖ reaches ``R``
    (default 1e4 for L = 2, exponential growth) or, for L > 2 (a blow-up), when the time left is below 1e-9·t: a point deep in the basin of the KKT
    point that the directional NCF flow from w_0 converges to, and the start :func:`limiting_trajectory`
    polishes that KKT point from. (Projected ascent from w_0 itself takes steps of up to η‖∇N‖ = 1, i.e. up
    to 45° on the sphere, and can end in another basin where two units' blow-up times are close: found by a
    user audit, session 44, where it reported exponent −0.009 against the wrong reference.) Returns the
    direction as a pytree like ``params0``, or raises FlowError if neither stop is reached."""
    model = as_model(model)
    X = jnp.asarray(X, dtype=jnp.float64)
    L = check_degree(model, X) if L is None else L
    return _ncf_escape(model, params0, X, y, loss, L, R, rtol)[1]


class LimitingResult(eqx.Module):
    ts: Any                    # (T,) times relative to the shift
    deltas: Any                # (K,)
    paths: Any                 # pytree, leading axes (K, T): ψ(t + shift_k, δ_k w_0)
    shifts: Any                # (K,) shifts used
    shifts_formula: Any        # (K,) T_δ from the formula with N(w*)
    degree: float              # measured L
    kkt: KKTPoint              # KKT direction reached from w_0 (.value = N, .gap = Δ)
    p: Any                     # pytree, leading axis T: p(t) = ψ(t + T_ε, ε w*)
    eps: float
    norms: Any                 # (K, T) ‖ψ‖
    p_norm: Any                # (T,)
    errors: Any                # (K,) sup_t ‖ψ_k − p‖
    diffs: Any                 # (K−1,) sup_t ‖ψ_k − ψ_{k+1}‖
    diffs_support: Any         # (K−1,) same, restricted to the support of w* (nonzero entries)
    diffs_zero: Any            # (K−1,) same, restricted to the zero entries of w*
    exponent_support: float    # slope of log diffs_support vs log δ  (≈ Δ/(LN) measured)
    exponent_zero: float       # slope of log diffs_zero vs log δ     (≈ 1 measured)
    exponent: float            # slope of log errors vs log δ
    exponent_diffs: float      # slope of log diffs vs log δ
    exponent_heuristic: float  # Δ / (L N)
    exponent_bound: float      # Δ / (Δ + 8N) for L = 2 (theorem), nan for L > 2
    solver_error: Any          # (K,) sup_t ‖ψ_k(rtol) − ψ_k(rtol/10)‖: each path's numerical error (nan: unchecked)
    p_solver_error: float      # the same for p
    resolved: Any              # (K,) errors ≥ 10× (solver_error + p_solver_error): used in `exponent`
    diffs_resolved: Any        # (K−1,) diffs ≥ 10× the two paths' solver errors: used in the diff exponents
    n_steps: Any               # (K,) solver steps
    saddle: Any                # SaddleResult for p (saddle=True) or None
    setting: dict


def _slope(deltas, errs):
    d, e = np.asarray(deltas), np.asarray(errs)
    ok = (e > 0) & np.isfinite(e)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(d[ok]), np.log(e[ok]), 1)[0])


def limiting_trajectory(model, params0, X, y, loss="square", deltas=(1e-2, 1e-3, 1e-4), ts=None,
                        shift: str = "ncf", eps=None, rtol: float = 1e-10, solver=None,
                        saddle: bool = False, saddle_horizon=None, experimental: bool = False,
                        params_like=None, max_steps: int = 200_000, check_precision: bool = True) -> LimitingResult:
    """Shifted trajectories ψ(t + T_δ, δ w_0) for each δ, their limit p(t), and the rate.

    model: a flows model or a callable H(params, X) (then pass params_like). params0: the
    initial direction w_0 (normalised here). shift: 'ncf' (T̃_δ, exact for generic w_0) or
    'formula' (T_δ of THEORY §5 with N(w*); right for w_0 = w*, and for L = 2 up to a
    δ-independent translation). ts: times relative to the shift (default
    linspace(−3, 3, 61)/(L N)). saddle=True also runs p to its first saddle p(∞). check_precision
    (default) reruns every path at rtol/10 and leaves out of the exponents the δ whose distances are below
    10× that numerical floor (warning; ``resolved``, ``setting["notes"]``)."""
    model = as_model(model, params_like)
    require_theory(model, experimental, "limiting_trajectory")
    if shift not in ("ncf", "formula"):
        raise FlowError(f"shift={shift!r}: use 'ncf' or 'formula'.")
    check_data(X, y, loss)
    require_signal(loss, y)
    X = jnp.asarray(X, dtype=jnp.float64)
    y = jnp.asarray(y, dtype=jnp.float64)
    given = np.asarray(deltas, dtype=np.float64)
    deltas = np.sort(given)[::-1]
    if not np.all(np.isfinite(given)) or np.any(given <= 0) or np.any(given >= 1):
        raise FlowError(f"deltas={given.tolist()}: initialisation scales must lie in (0, 1).")
    L = check_degree(model, X, params=params0)
    flat0, unravel = ravel_pytree(params0)
    w0 = unravel(flat0 / jnp.linalg.norm(flat0))
    # the KKT point of the basin the NCF flow from w_0 escapes in: polished from the flow's own direction at
    # ‖u‖ = 10^4 (ncf_escape_direction), not by ascent from w_0, which can jump basins
    # (one integration gives the direction and, for L > 2, the blow-up time T* of the shift below)
    Tstar, u_esc = _ncf_escape(model, w0, X, y, loss, L, None, 1e-11)
    kkt = kkt_from(model, u_esc, X, y, loss, degree=L)
    N, Delta = kkt.value, kkt.gap
    if not N > 1e-12:
        raise FlowError(f"params0: the NCF flow from this start collapses to a KKT point with "
                        f"N(u*) = {N:.3g} <= 0, so the weights never escape the origin; pick another "
                        "params0 (e.g. one of flows.kkt_points(...)[0].direction).")
    wstar, _ = ravel_pytree(kkt.direction)
    T_formula = time_shift(L, N, deltas)
    if shift == "formula":
        shifts = T_formula
    elif abs(L - 2) < 1e-12:
        a = float(jnp.dot(flat0 / jnp.linalg.norm(flat0), wstar))
        if a <= 1e-12:
            raise FlowError(f"params0: ⟨w_0, w*⟩ = {a:.3g} <= 0; w_0 is not in the stable set of w*.")
        shifts = T_formula - np.log(a) / (2 * N)
    else:
        shifts = Tstar / deltas ** (L - 2.0)
    ts = np.linspace(-3.0, 3.0, 61) / (L * N) if ts is None else np.asarray(ts, dtype=np.float64)
    if np.any(shifts + ts[0] < 0):
        raise FlowError(f"ts[0]={ts[0]:.4g} is before the start of the flow for delta={deltas[0]:.3g} "
                        f"(shift {shifts[0]:.4g}); use a later ts[0] or smaller deltas.")
    flat_path = lambda pa: jax.vmap(lambda w: ravel_pytree(w)[0])(pa)
    finer = lambda tol: max(tol / 10, 1e-14)      # the precision check's tolerance (errors scale ~ rtol)
    sup_dist = lambda A, B: float(jnp.max(jnp.linalg.norm(A - B, axis=1)))

    def run(start, delta, shift_, tol):
        fr = gradient_flow(model, start, X, y, loss, t1=float(shift_ + ts[-1]), ts=shift_ + ts, delta=float(delta),
                           save="params", rtol=tol, solver=solver, max_steps=max_steps, experimental=experimental)
        if fr.code != "completed":
            raise FlowError(f"delta={delta:.3g}: flow did not complete ({fr.message}).")
        return fr

    paths, norms, steps, solver_err = [], [], [], []
    for d, s in zip(deltas, shifts):
        fr = run(w0, d, s, rtol)
        paths.append(fr.params)
        norms.append(fr.norm)
        steps.append(fr.n_steps)
        if check_precision:
            # the path's own numerical error: the same flow at rtol/10 (errors scale ~ rtol). At tiny δ the shift
            # ~ δ^{−(L−2)} (or ln 1/δ) makes the escape time, hence the path, sensitive to the solver tolerance
            # (user audit, session 49: δ = 1e-6 … 1e-10 gave errors 0.05 that moved with rtol, exponent 0.04)
            solver_err.append(sup_dist(flat_path(fr.params), flat_path(run(w0, d, s, finer(rtol)).params)))
    norms = np.asarray(norms)
    # escaped: grown 100-fold, or (large δ, where 100δ is not reachable) by 0.1 in absolute terms
    if norms[-1].max() < min(100 * deltas[-1], deltas[-1] + 0.1) or norms[-1].max() < 1e-3:
        raise FlowError(f"ts: the flow never escapes within the horizon (max ‖w‖ = {norms[-1].max():.3g} "
                        f"at t ≤ shift + ts[-1] = {shifts[-1] + ts[-1]:.4g}); extend ts[-1].")
    # ε: L = 2 → min δ/100; L > 2 → min δ/10 (the horizon ~ ε^{−(L−2)} costs accuracy:
    # measured floor 3.6e-5 at ε = 1e-8, L = 3, rtol 1e-10)
    if eps is None:
        eps = float(deltas[-1] * (1e-2 if abs(L - 2) < 1e-12 else 1e-1))
    Te = float(time_shift(L, N, eps))
    p_rtol = min(rtol, 1e-12)
    fp = run(kkt.direction, eps, Te, p_rtol)
    P = flat_path(fp.params)
    p_err = sup_dist(P, flat_path(run(kkt.direction, eps, Te, finer(p_rtol)).params)) if check_precision \
        else float("nan")
    flats = [flat_path(pa) for pa in paths]
    errors = np.array([sup_dist(F, P) for F in flats])
    diffs = np.array([sup_dist(flats[k], flats[k + 1]) for k in range(len(flats) - 1)])
    solver_err = np.asarray(solver_err) if check_precision else np.full(len(deltas), np.nan)
    # resolved: the measured distance is ≥ 10× the numerical error of what it compares (unchecked: all resolved)
    err_floor = solver_err + p_err
    diff_floor = solver_err[:-1] + solver_err[1:]
    # a path whose own error exceeds 1% of p's scale is unreliable beyond the estimate: when the escape-time error
    # ~ rtol·shift exceeds the window, both tolerances miss the escape and agree with each other (measured:
    # δ = 1e-10, rtol 1e-10: solver_error 0.04, error to p 0.66)
    p_scale = float(jnp.max(jnp.linalg.norm(P, axis=1)))
    bad, bad_p = solver_err > 1e-2 * p_scale, p_err > 1e-2 * p_scale
    err_ok = ~((errors < 10 * err_floor) | bad | bad_p)
    diff_ok = ~((diffs < 10 * diff_floor) | bad[:-1] | bad[1:])
    notes = []
    if not (err_ok.all() and diff_ok.all()):
        notes.append(f"numerical floor: at delta = {deltas[~err_ok].tolist()} the error to p, and between "
                     f"{[(float(deltas[k]), float(deltas[k + 1])) for k in np.nonzero(~diff_ok)[0]]} the path "
                     f"difference, is < 10× the solver's own error (solver_error {np.round(solver_err, 10).tolist()}, "
                     f"p {p_err:.3g}); those points are left out of the exponents. Lower rtol or use larger deltas.")
        warnings.warn("limiting_trajectory: " + notes[-1], stacklevel=2)
    supp = jnp.asarray(ravel_pytree(jax.tree_util.tree_map(
        lambda m: jnp.asarray(m, dtype=jnp.float64), kkt.nonzero))[0] > 0.5)
    dsub = lambda k, m: float(jnp.max(jnp.linalg.norm(jnp.where(m, flats[k] - flats[k + 1], 0.0), axis=1)))
    d_supp = np.array([dsub(k, supp) for k in range(len(flats) - 1)])
    d_zero = np.array([dsub(k, ~supp) for k in range(len(flats) - 1)])
    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *paths)
    sres = None
    if saddle:
        hor = saddle_horizon if saddle_horizon is not None else 200.0 / (L * N)
        zmask = jax.tree_util.tree_map(lambda m: ~np.asarray(m), kkt.nonzero)
        sres = first_saddle(model, kkt.direction, X, y, loss, t1=Te + hor, delta=eps, rtol=rtol,
                            experimental=experimental, mask=zmask)
    return LimitingResult(
        ts=ts, deltas=deltas, paths=stacked, shifts=np.asarray(shifts), shifts_formula=T_formula,
        degree=L, kkt=kkt, p=fp.params, eps=eps, norms=norms, p_norm=fp.norm, errors=errors,
        diffs=diffs, diffs_support=d_supp, diffs_zero=d_zero,
        exponent_support=_slope(deltas[:-1][diff_ok], d_supp[diff_ok]),
        exponent_zero=_slope(deltas[:-1][diff_ok], d_zero[diff_ok]),
        exponent=_slope(deltas[err_ok], errors[err_ok]), exponent_diffs=_slope(deltas[:-1][diff_ok], diffs[diff_ok]),
        solver_error=solver_err, p_solver_error=p_err, resolved=err_ok, diffs_resolved=diff_ok,
        exponent_heuristic=float(Delta / (L * N)),
        exponent_bound=float(Delta / (Delta + 8 * N)) if abs(L - 2) < 1e-12 else float("nan"),
        n_steps=np.asarray(steps), saddle=sres,
        setting=dict(loss=loss if isinstance(loss, str) else "user", shift=shift, rtol=rtol,
                     solver=type(solver).__name__ if solver is not None else "Tsit5", n=int(X.shape[0]),
                     d=int(X.shape[1]), n_params=int(flat0.shape[0]), N=N, Delta=Delta,
                     precision_check=("each path rerun at rtol/10: solver_error = sup_t distance; points with "
                                      "error or diff < 10× that floor are not used in the exponents")
                     if check_precision else "off", notes=notes))
