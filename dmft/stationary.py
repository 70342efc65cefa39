"""Stationary point of the DMFT: the ``t → ∞`` limit of GD when the first phase converges
(THEORY §2 "Long time", derived here and checked against the dynamic DMFT and finite-d GD).

If ``r^t → r``, ``g^t → g`` on every path and the propagators decay (time-translation
invariance at late times), the memory sum of the data side becomes an integrated response
and the parameter side a static linear response. With

    V = (1/δ) Σ_{τ≥0} η R_θ(τ)            (m×m effective step of the data side)
    χ = η Σ_{τ≥0} R_θ(τ) = (λ I + Γ)^{-1}  (integrated parameter-side response)

the ``T×T`` kernels collapse to ``m×m`` unknowns ``(Q, V, M, a)``:

    r = prox(b) :  r + V g(r) = b,   b = Mᵀz + ω,   ω ~ N(0, Q)                     (S1)
    Γ = E[ D (I + V D)^{-1} ]            (static response ∂g/∂b, D = ∇²_r ℓ at r)   (S2)
    χ = (λ I + Γ)^{-1},   V = χ / δ                                               (S3)
    Q = χ C_g χᵀ / δ,     C_g = E[g gᵀ]                                            (S4)
    λ M + E[z gᵀ] = 0,    λ_a a + E[∇_a ℓ] = 0 (if a is trained)                   (S5)

(S1)–(S5) are the stationarity of the empirical risk in the proportional limit (for the
square loss and a linear student they reduce to ridge regression: ``V = 1/(δ − 1)`` at
``λ = 0``). They drop the ``R_θ(∞, 0) θ^0`` term, i.e. they assume the initialization is
forgotten. Without ridge and below the interpolation point GD has flat directions and
the limit remembers the initialization: there ``λ I + Γ`` loses positive definiteness or
``V`` diverges, and the solver reports that instead of a number.

Solver: damped fixed-point iteration on ``(Q, V, M, a)`` with Monte Carlo expectations
over fixed samples (common random numbers; the hard teacher coordinates antithetic and
their rows of ``E[z gᵀ]`` exactly zero, as in :func:`dmft.solve`), Newton for the
per-sample prox (S1) warm-started across iterations, the ``M``/``a`` equations (S5)
advanced by preconditioned steps (``M ← M − (λM + E[z gᵀ]) χ``). Everything runs in one
``lax.while_loop`` under ``jit``; ``delta`` and the damping are traced, so sweeps over δ
are one ``vmap`` and one compilation.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .problem import Problem, ProblemError, Tracer
from .prox import make_prox, per_sample_maps
from .small_linalg import eigvalsh_small, solve_batched
from .solve import MIN_PATHS, _antithetic_inputs, _group_mean, _problem_setting

# status codes (diffrax/optimistix style: a code plus a message, never a silent number)
RESIDUAL_TOL = 1e-7  # max |residual| of (S3)-(S5) accepted as converged (least-squares solver)
PROX_TOL = 1e-8  # relative residual of r + V g(r) = b
PROX_BAD_FRACTION = 1e-3  # fraction of samples allowed above PROX_TOL at convergence
CONVERGED, MAX_ITERS, NOT_POSITIVE, DIVERGED, PROX_FAILED, NONFINITE, STALLED, RUNAWAY = 0, 1, 2, 3, 4, 5, 6, 7
STATUS_MESSAGES = {
    CONVERGED: "converged",
    MAX_ITERS: "no convergence within max_iters (oscillating or slow: try more iterations or smaller damping)",
    STALLED: ("the least-squares solver stopped before max_iters with the residual above RESIDUAL_TOL (its own step "
              "test: a local minimum of the residual norm or a flat valley); more iterations do not help: try "
              "start=Warmup(...), more paths, another key, or solver='iterate'"),
    RUNAWAY: ("V grew past 1e6 and the interpolation test (ridge 0, every D ⪰ 0, δ·E[rank D] ≤ m) does not explain "
              "it: the solver ran away (solver='iterate': reduce damping; least-squares: start=Warmup(...)), or, with "
              "a D that is not PSD, GD interpolates in a way the test cannot see (compare with the dynamic DMFT)"),
    NOT_POSITIVE: ("λI + Γ is not positive definite: no stationary point that forgets the initialization "
                   "(flat directions / interpolation, or a saddle of the first phase); use the dynamic DMFT"),
    DIVERGED: ("the effective step V diverges: GD interpolates (flat directions, roughly δ below the "
               "interpolation point without ridge, e.g. δ·E[rank D] <= m for a convex loss); the limit remembers "
               "the initialization: add ridge or use the dynamic DMFT"),
    PROX_FAILED: "the per-sample prox r + V g(r) = b did not converge on some samples (non-convex loss∘readout)",
    NONFINITE: "non-finite values in the iteration",
}


class Stationary(eqx.Module):
    """Stationary DMFT state and diagnostics (leaves may carry a leading δ axis).

    ``q`` = ``C_θ(∞,∞)``, ``response`` = ``V``, ``chi`` = ``(λI + Γ)^{-1}``, ``gamma`` = Γ,
    ``overlap`` = ``M`` (k×m), ``second_layer`` = ``a``; observables ``train_error``,
    ``test_error`` (with Monte Carlo standard errors ``*_stderr`` over the fixed samples),
    ``gram`` = ``MᵀM + Q``. The ``*_stderr`` are the per-sample standard errors on the fixed
    samples: they leave out the Monte Carlo noise that feeds back through the solved ``(Q, V, M)``,
    so they understate the error (measured: OLS, δ = 2, 16 384 paths, the spread over 8 keys is
    1.4–1.7× larger, train and test); for an error bar use several keys (as the threshold routes do).
    ``samples`` = dict(z, y, eps, r) of the effective
    process at the fixed point (the law behind the Hessian blocks). ``status`` (see
    ``STATUS_MESSAGES``), ``iterations``, ``residual`` (max relative change in the last
    iteration), ``prox_residual`` (max over samples), ``min_prox_curvature`` (smallest
    eigenvalue of ``V^{-1} + D`` over samples; ≤ 0 means the prox is not a local minimum).
    """

    q: jax.Array
    response: jax.Array
    chi: jax.Array
    gamma: jax.Array
    overlap: jax.Array
    second_layer: jax.Array
    train_error: jax.Array
    test_error: jax.Array
    train_error_stderr: jax.Array
    test_error_stderr: jax.Array
    gram: jax.Array
    samples: dict
    status: jax.Array
    iterations: jax.Array
    residual: jax.Array
    prox_residual: jax.Array
    min_prox_curvature: jax.Array
    setting: Optional[dict] = None

    @property
    def converged(self):
        return self.status == CONVERGED

    def message(self) -> str:
        st = np.atleast_1d(np.asarray(self.status))
        return "; ".join(sorted({STATUS_MESSAGES[int(s)] for s in st}))


def _sym(x):
    return 0.5 * (x + jnp.swapaxes(x, -1, -2))


def _chol(c):
    """Cholesky factor of a covariance (tiny relative jitter; differentiable, unlike an
    eigendecomposition at degenerate eigenvalues)."""
    c = _sym(c)
    return jnp.linalg.cholesky(c + 1e-14 * jnp.trace(c) * jnp.eye(c.shape[-1], dtype=c.dtype))


def _equations(problem: Problem, delta, key, paths: int, hard: tuple, newton_steps: int, response: str = "jacobian",
               restart: bool = True) -> dict:
    """The fixed randomness and the equations (S1)–(S5) at ``delta`` as functions (shared by the
    solvers below and by ``spectral.threshold_gradient``, which differentiates them).

    Returns a dict with the samples (``z``, ``eps``, ``y``, ``xi``, ``xi_fresh``; antithetic
    groups ``G × Nb``), the per-sample maps, and
    ``evaluate(state)`` (prox, g, D, Γ, C_g, E[z gᵀ] at ``state = dict(Q, V, M, a, r)``),
    ``residual(x)`` (the residuals of (S3)–(S5) in the Cholesky unknowns
    ``x = dict(LQ, LV, M, a)``; zero at a fixed point) and ``unpack(x)``. Everything is a pure
    function of ``problem``'s arrays, ``delta`` and ``x``: differentiable by autodiff (the prox by
    its implicit rule)."""
    m, k = problem.m, problem.k
    dt = jnp.float64
    n_hard = len(hard)
    G = 2**n_hard
    Nb = paths // G
    delta = jnp.asarray(delta, dt)
    lam = problem.ridge.astype(dt)
    lam_a = problem.ridge_second.astype(dt)
    train_a = problem.student.train_second_layer
    eye = jnp.eye(m, dtype=dt)

    kxi, kf, z, eps, y, expand = _antithetic_inputs(problem, key, paths, hard, dt)

    xi = expand(jax.random.normal(kxi, (Nb, m), dt))
    xi_fresh = expand(jax.random.normal(kf, (Nb, m), dt))

    def gmean(x):
        return _group_mean(x.reshape((G, Nb) + x.shape[1:]), n_hard)

    f = per_sample_maps(problem)
    grad_r, hess_r, grad_a = f["grad_r"], f["hess_r"], f["grad_a"]
    hard_rows = jnp.zeros((k,), bool).at[jnp.array(hard, dtype=int)].set(True) if hard else jnp.zeros((k,), bool)
    prox_r = make_prox(problem, y, newton_steps)

    def prox(b, V, a, r0):
        r = prox_r(b, V, a, r0)
        res = r + grad_r(y, r, a) @ V.T - b
        bad = jnp.sqrt(jnp.sum(res**2, -1)) > PROX_TOL * (1.0 + jnp.sqrt(jnp.sum(b**2, -1)))
        return r, jnp.mean(bad.astype(dt))

    def evaluate(state):
        Q, V, M, a, r0 = state["Q"], state["V"], state["M"], state["a"], state["r"]
        omega = xi @ _chol(Q).T
        b = z @ M + omega
        r, pres = prox(b, V, a, b if (restart or r0 is None) else r0)
        g = grad_r(y, r, a)
        D = _sym(hess_r(y, r, a))
        if response == "stein":
            # Γ = ∂E[g]/∂b = E[g ωᵀ] Q^{-1} (Stein): includes the jumps of a non-convex prox
            Gam = _sym(jnp.linalg.solve(_sym(Q), gmean(omega[:, :, None] * g[:, None, :])).T)
        else:
            # Γ = E[D (I + V D)^{-1}] (local Jacobian; exact when the prox is smooth in b)
            J = eye + jnp.einsum("ij,njk->nik", V, D)
            X = solve_batched(jnp.swapaxes(J, -1, -2), D)  # ((D (I + V D)^{-1}))ᵀ; per path: not LAPACK (small_linalg)
            Gam = _sym(gmean(jnp.swapaxes(X, -1, -2)))
        Cg = _sym(gmean(g[:, :, None] * g[:, None, :]))
        Ezg = jnp.where(hard_rows[:, None], 0.0, gmean(z[:, :, None] * g[:, None, :]))
        minJ = jnp.min(eigvalsh_small(_sym(jnp.linalg.inv(V)) + D))
        return dict(r=r, g=g, D=D, Gam=Gam, Cg=Cg, Ezg=Ezg, pres=pres, minJ=minJ)

    # residuals of (S3)–(S5) written without inverses (well conditioned near interpolation):
    #   δ V P − I,  (δ P Q P − C_g)/‖C_g‖,  λM + E[z gᵀ],  λ_a a + E[∇_a ℓ],   P = λI + Γ
    # unknowns Q = L_Q L_Qᵀ, V = L_V L_Vᵀ (Cholesky factors: positive definite by construction);
    # a frozen second layer is the problem's own
    tril = jnp.tril(jnp.ones((m, m), dt))

    def unpack(x):
        LQ, LV = x["LQ"] * tril, x["LV"] * tril
        return dict(Q=LQ @ LQ.T, V=LV @ LV.T, M=x["M"], a=x["a"] if train_a else problem.student.second_layer.astype(dt),
                    r=None)

    def pack(state):
        return dict(LQ=jnp.linalg.cholesky(_sym(state["Q"]) + 1e-12 * eye), LV=jnp.linalg.cholesky(_sym(state["V"]) + 1e-12 * eye),
                    M=state["M"], a=state["a"])

    def residual_at(st_, ev):
        """The residuals at unknowns ``st_`` (unpacked) given ``ev = evaluate(st_)``."""
        P = lam * eye + ev["Gam"]
        out = dict(V=_sym(delta * st_["V"] @ P) - eye,
                   Q=(delta * P @ st_["Q"] @ P - ev["Cg"]) / jax.lax.stop_gradient(jnp.max(jnp.abs(ev["Cg"])) + 1e-30),
                   M=lam * st_["M"] + ev["Ezg"])
        if train_a:
            out["a"] = jnp.mean(grad_a(y, ev["r"], st_["a"]), axis=0) + lam_a * st_["a"]
        return out

    def residual(x, _=None):
        st_ = unpack(x)
        return residual_at(st_, evaluate(st_))

    return dict(z=z, eps=eps, y=y, xi=xi, xi_fresh=xi_fresh, G=G, Nb=Nb, maps=f, evaluate=evaluate,
                residual=residual, residual_at=residual_at, unpack=unpack, pack=pack)


@eqx.filter_jit
def _stationary_core(problem: Problem, delta, key, start, damping, tol, paths: int, hard: tuple, max_iters: int,
                     newton_steps: int, response: str, restart: bool, solver: str):
    m = problem.m
    dt = jnp.float64
    delta = jnp.asarray(delta, dt)
    lam = problem.ridge.astype(dt)
    lam_a = problem.ridge_second.astype(dt)
    train_a = problem.student.train_second_layer
    eye = jnp.eye(m, dtype=dt)
    E = _equations(problem, delta, key, paths, hard, newton_steps, response, restart)
    z, eps, y, xi, xi_fresh, G, Nb = (E[n] for n in ("z", "eps", "y", "xi", "xi_fresh", "G", "Nb"))
    grad_a, hess_a, loss_v, hess_r = E["maps"]["grad_a"], E["maps"]["hess_a"], E["maps"]["loss"], E["maps"]["hess_r"]
    evaluate = E["evaluate"]

    def update(state, ev):
        M, a = state["M"], state["a"]
        P = lam * eye + ev["Gam"]
        evP, UP = jnp.linalg.eigh(_sym(P))
        pmin = evP[0]
        # transient iterates far from the fixed point can have an indefinite λI + Γ: clip its
        # spectrum at a floor so the iteration can proceed; the status at the end requires the
        # unclipped λI + Γ to be positive definite (checked on the final iterate)
        floor = 1e-2 * jnp.maximum(evP[-1], 1e-12)
        chi = _sym((UP / jnp.maximum(evP, floor)) @ UP.T)
        V_new = chi / delta
        Q_new = _sym(chi @ ev["Cg"] @ chi.T / delta)
        M_new = M - (lam * M + ev["Ezg"]) @ chi
        if train_a:
            ga = jnp.mean(grad_a(y, ev["r"], a), axis=0) + lam_a * a
            Ha = jnp.mean(hess_a(y, ev["r"], a), axis=0) + lam_a * jnp.eye(a.shape[0], dtype=dt)
            a_new = a - jnp.linalg.solve(_sym(Ha) + 1e-12 * jnp.eye(a.shape[0], dtype=dt), ga)
        else:
            a_new = a
        return dict(Q=Q_new, V=V_new, M=M_new, a=a_new), chi, pmin

    def finish(state, code, it, res, pres, minJ, chi, Gam):
        r = state["r"]
        # below the interpolation point without ridge there is no fixed point: with every D_i ⪰ 0,
        # tr(δ V Γ) = δ E[tr(V D (I + V D)^{-1})] < δ E[rank D] for V ≻ 0, so (S3) (δ V Γ = I at λ = 0)
        # needs δ E[rank D] > m; the solver then only stalls (V grows), and this names why
        def interpolates(r_, a_):
            evD = eigvalsh_small(_sym(hess_r(y, r_, a_)))   # per path: two concurrent LAPACK calls deadlocked (small_linalg)
            big = jnp.max(jnp.abs(evD)) + 1e-300
            rank = jnp.sum(jnp.abs(evD) > 1e-10 * big, axis=-1)
            psd = jnp.all(evD >= -1e-10 * big)
            return (lam == 0) & psd & (delta * jnp.mean(rank.astype(dt)) <= m * (1 + 1e-12))

        # the test holds at the final state and at the start: a run-away state saturates the readout, D → 0 on many
        # samples and the final-state rank alone then reads as interpolation (tanh, δ = 3, damping 1: audit)
        r0 = z @ s0["M"] + xi @ _chol(s0["Q"]).T
        interp = interpolates(r, state["a"]) & interpolates(r0, s0["a"])
        code = jnp.where((code != CONVERGED) & (code != NONFINITE) & interp, DIVERGED, code)
        # V > 1e6 that the interpolation test does not explain: the solver ran away (a user audit found the damped
        # iteration at damping 1 labelled "GD interpolates" at δ = 3, tanh, where GD's train error is 0.027)
        code = jnp.where((code == DIVERGED) & ~interp, RUNAWAY, code)
        r_fresh = z @ state["M"] + xi_fresh @ _chol(state["Q"]).T
        # Monte Carlo s.e. from the antithetic-group means (the Nb groups are independent)
        lt = loss_v(y, r, state["a"]).reshape(G, Nb).mean(0)
        lf = loss_v(y, r_fresh, state["a"]).reshape(G, Nb).mean(0)
        train, test = jnp.mean(lt), jnp.mean(lf)
        train_se, test_se = jnp.std(lt, ddof=1) / jnp.sqrt(Nb), jnp.std(lf, ddof=1) / jnp.sqrt(Nb)
        gram = state["M"].T @ state["M"] + state["Q"]
        return Stationary(q=state["Q"], response=state["V"], chi=chi, gamma=Gam, overlap=state["M"],
                          second_layer=state["a"], train_error=train, test_error=test, train_error_stderr=train_se,
                          test_error_stderr=test_se, gram=gram,
                          samples=dict(z=z, y=y, eps=eps, r=r), status=code, iterations=it, residual=res,
                          prox_residual=pres, min_prox_curvature=minJ)

    s0 = dict(Q=_sym(jnp.asarray(start["Q"], dt)), V=_sym(jnp.asarray(start["V"], dt)),
              M=jnp.asarray(start["M"], dt), a=jnp.asarray(start["a"], dt))

    if solver == "least-squares":
        unpack, residual = E["unpack"], E["residual"]
        x0 = E["pack"](s0)
        sol = optx.least_squares(residual, optx.LevenbergMarquardt(rtol=tol, atol=tol), x0, max_steps=max_iters,
                                 throw=False)
        st_ = unpack(sol.value)
        ev = evaluate(st_)
        resid = jax.tree.map(lambda v: jnp.max(jnp.abs(v)), E["residual_at"](st_, ev))  # = residual(sol.value)
        st_["r"] = ev["r"]
        P = lam * eye + ev["Gam"]
        pmin = jnp.min(jnp.linalg.eigvalsh(_sym(P)))
        res = jnp.max(jnp.stack(jax.tree.leaves(resid)))
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(st_)]))
        # LM ends by its own step test long before max_iters (audit: OLS δ = 1.01 stopped at 55 of 200 and of 2000
        # iterations at V = 14.5 of 100); "more iterations" is then the wrong advice
        stopped = jnp.where(sol.stats["num_steps"] < max_iters, STALLED, MAX_ITERS)
        code = jnp.where(~finite, NONFINITE,
                         jnp.where(jnp.max(jnp.abs(st_["V"])) > 1e6, DIVERGED,
                                   jnp.where(ev["pres"] > PROX_BAD_FRACTION, PROX_FAILED,
                                             jnp.where(res > RESIDUAL_TOL, stopped,
                                                       jnp.where(pmin > 0, CONVERGED, NOT_POSITIVE)))))
        chi = _sym(jnp.linalg.inv(P))
        return finish(st_, code, sol.stats["num_steps"], res, ev["pres"], ev["minJ"], chi, ev["Gam"])

    def rel(new, old):
        return jnp.max(jnp.abs(new - old)) / (1e-12 + jnp.max(jnp.abs(old)) + 1e-3 * jnp.max(jnp.abs(new)))

    def cond(carry):
        return (carry["it"] < max_iters) & (carry["code"] < 0)

    def body(carry):
        state = carry["state"]
        ev = evaluate(state)
        new, chi, pmin = update(state, ev)
        res = jnp.max(jnp.stack([rel(new[n], state[n]) if state[n].size else jnp.asarray(0.0, dt)
                                 for n in ("Q", "V", "M", "a")]))
        mixed = {n: (1 - damping) * state[n] + damping * new[n] for n in ("Q", "V", "M", "a")}
        mixed["r"] = ev["r"]
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in mixed.values()]))
        vnorm = jnp.max(jnp.abs(state["V"]))
        code = jnp.where(~finite, NONFINITE,
                         jnp.where(vnorm > 1e6, DIVERGED,
                                   jnp.where((res < tol) & (ev["pres"] <= PROX_BAD_FRACTION),
                                             jnp.where(pmin > 0, CONVERGED, NOT_POSITIVE), -1)))
        return dict(state=jax.tree.map(lambda o, n: jnp.where(finite, n, o), state, mixed), it=carry["it"] + 1,
                    code=code, res=res, pres=ev["pres"], minJ=ev["minJ"], chi=chi, Gam=ev["Gam"])

    s0 = dict(s0)
    b0 = z @ s0["M"] + xi @ _chol(s0["Q"]).T
    s0["r"] = b0
    carry0 = dict(state=s0, it=jnp.array(0), code=jnp.array(-1), res=jnp.array(jnp.inf, dt),
                  pres=jnp.array(jnp.inf, dt), minJ=jnp.array(jnp.nan, dt), chi=eye, Gam=eye)
    out = jax.lax.while_loop(cond, body, carry0)
    code = jnp.where(out["code"] < 0, MAX_ITERS, out["code"])
    code = jnp.where((code == MAX_ITERS) & (out["pres"] > PROX_BAD_FRACTION) & (out["res"] < tol), PROX_FAILED, code)
    return finish(out["state"], code, out["it"], out["res"], out["pres"], out["minJ"], out["chi"], out["Gam"])


def start_from_trajectory(traj, t: Optional[int] = None, delta=None) -> dict:
    """Initial guess from a dynamic DMFT solution at step ``t`` (default: the last):
    ``Q = C_θ(t,t)``, ``M = M^t``, ``a = a^t``, ``V = (1/δ) Σ_{s<t} η_s R_θ(t, s+1)``
    (the memory kernel of the data side at ``t``). ``traj.setting`` supplies δ and η."""
    t = traj.steps if t is None else int(t)
    setting = traj.setting or {}
    delta = setting.get("delta") if delta is None else delta
    lr = setting.get("lr")
    if delta is None or lr is None:
        raise ProblemError("start_from_trajectory needs δ and lr: pass a trajectory from dmft.solve (its setting) or delta=.")
    return _state_at(traj, t, lr, delta)


def _state_at(traj, t: int, lr, delta) -> dict:
    """(Q, V, M, a) at step ``t`` of a trajectory (leaves may have a leading δ axis):
    ``V = (1/δ) Σ_{s<t} η_s R_θ(t, s+1)``."""
    eta = jnp.broadcast_to(jnp.asarray(lr, float), (traj.steps,))[:t]
    R = traj.R_theta[..., t, 1:t + 1, :, :]  # R_θ(t, s+1), s = 0..t-1
    V = jnp.einsum("s,...sij->...ij", eta, R) / jnp.asarray(delta, float)[..., None, None]
    return dict(Q=traj.C_theta[..., t, t, :, :], V=V, M=traj.overlap[..., t, :, :], a=traj.second_layer[..., t, :])


class Warmup(eqx.Module):
    """Start the iteration from a dynamic DMFT run of ``steps`` GD steps at step ``lr``
    (``paths`` Monte Carlo paths) — THEORY's recommendation: the fixed point GD reaches is
    the one continued from its own trajectory (the iteration from ``Q_0`` can land elsewhere
    or diverge for non-convex problems)."""

    lr: float
    steps: int = eqx.field(static=True)
    paths: int = eqx.field(static=True, default=1024)

    def run(self, problem, delta, key):
        from .solve import solve

        traj = solve(problem, delta, self.lr, int(self.steps), int(self.paths), jax.random.fold_in(key, 7), throw=False)
        return start_from_trajectory(traj, delta=delta)

    def run_sweep(self, problem, deltas, key):
        from .solve import solve_sweep

        traj = solve_sweep(problem, deltas, self.lr, int(self.steps), int(self.paths), jax.random.fold_in(key, 7), throw=False)
        return _state_at(traj, int(self.steps), self.lr, deltas)


def default_start(problem: Problem, delta) -> dict:
    """Initialization of the iteration: ``Q = Q_0``, ``M = M^0``, ``a = a^0``, ``V = I/δ``."""
    m = problem.m
    return dict(Q=problem.init.q0, V=jnp.eye(m) / jnp.asarray(delta, float), M=problem.init.overlap,
                a=problem.student.second_layer)


def _validate(problem, delta, paths, damping, max_iters, n_groups, response="jacobian", solver="least-squares"):
    if solver not in ("least-squares", "iterate"):
        raise ProblemError(f"solver must be 'least-squares' (Levenberg–Marquardt on (S3)-(S5)) or 'iterate' (damped fixed point); got {solver!r}.")
    if response not in ("stein", "jacobian"):
        raise ProblemError(f"response must be 'stein' or 'jacobian' (got {response!r}).")
    if not isinstance(paths, (int, np.integer)) or paths < MIN_PATHS or paths % n_groups:
        raise ProblemError(f"paths must be an int >= {MIN_PATHS} and a multiple of {n_groups} (antithetic groups); got {paths!r}.")
    if not isinstance(max_iters, (int, np.integer)) or max_iters < 1:
        raise ProblemError(f"max_iters must be a positive int (got {max_iters!r}).")
    for name, v, lo, hi in (("delta", delta, 0.0, np.inf), ("damping", damping, 0.0, 1.0)):
        if not isinstance(v, Tracer):
            arr = np.asarray(v, float)
            if not np.all(np.isfinite(arr)) or np.any(arr <= lo) or np.any(arr > hi):
                raise ProblemError(f"{name} must lie in ({lo}, {hi}] (got {arr}).")


def stationary(problem: Problem, delta, *, paths: int = 8192, key=None, start=None, damping=0.5, tol=1e-9,
               max_iters: int = 2000, newton_steps: int = 30, response: str = "jacobian", restart: bool = True,
               solver: str = "least-squares", throw: bool = False) -> Stationary:
    """Solve the stationary DMFT (S1)–(S5) at sample ratio ``delta``.

    ``start``: a :class:`Warmup` (a dynamic DMFT run first; recommended), dict(Q, V, M, a)
    (e.g. :func:`start_from_trajectory`), or None for :func:`default_start`. For a δ sweep use :func:`stationary_sweep` (one
    compilation, common random numbers). ``throw=True`` raises on any status other than
    converged; otherwise inspect ``result.status`` / ``result.message()``.
    """
    hard = problem.teacher.hard_coordinates()
    _validate(problem, delta, paths, damping, max_iters, 2 ** len(hard), response, solver)
    jump = _jump_check(problem, response, "dmft.stationary")
    key = jax.random.key(0) if key is None else key
    start_rec = _start_record(start)
    if start is None:
        start = default_start(problem, delta)
    elif isinstance(start, Warmup):
        start = start.run(problem, delta, key)
    res = _stationary_core(problem, jnp.asarray(delta, float), key, start, jnp.asarray(damping, float),
                           jnp.asarray(tol, float), int(paths), hard, int(max_iters), int(newton_steps), response, bool(restart), solver)
    res = eqx.tree_at(lambda s: s.setting, res, dict(delta=_f(delta), paths=int(paths), damping=_f(damping), tol=float(tol),
                                                     max_iters=int(max_iters), newton_steps=int(newton_steps), response=response,
                                                     restart=bool(restart), solver=solver, response_jump=jump, start=start_rec,
                                                     **_problem_setting(problem, key),
                                                     equations="THEORY §2 long time, (S1)-(S5) of dmft/stationary.py"),
                      is_leaf=lambda x: x is None)
    if throw and not isinstance(res.status, Tracer) and not bool(np.all(np.asarray(res.status) == CONVERGED)):
        raise ProblemError(f"stationary DMFT at δ={_f(delta)}: {res.message()}")
    return res


def stationary_sweep(problem: Problem, deltas, *, paths: int = 8192, key=None, start=None, damping=0.5, tol=1e-9,
                     max_iters: int = 2000, newton_steps: int = 30, response: str = "jacobian",
                     restart: bool = True, solver: str = "least-squares") -> Stationary:
    """:func:`stationary` ``vmap``ped over ``deltas`` with common random numbers. ``start``:
    None (default start per δ) or a dict whose leaves have a leading δ axis."""
    hard = problem.teacher.hard_coordinates()
    deltas = jnp.asarray(deltas, float)
    _validate(problem, deltas, paths, damping, max_iters, 2 ** len(hard), response, solver)
    jump = _jump_check(problem, response, "dmft.stationary_sweep")
    key = jax.random.key(0) if key is None else key
    start_rec = _start_record(start)
    if start is None:
        start = jax.vmap(lambda d: default_start(problem, d))(deltas)
    elif isinstance(start, Warmup):
        start = start.run_sweep(problem, deltas, key)
    fn = jax.vmap(lambda d, s: _stationary_core(problem, d, key, s, jnp.asarray(damping, float), jnp.asarray(tol, float),
                                                int(paths), hard, int(max_iters), int(newton_steps), response,
                                                bool(restart), solver))
    res = fn(deltas, start)
    return eqx.tree_at(lambda s: s.setting, res, dict(deltas=np.asarray(deltas).tolist(), paths=int(paths),
                                                      damping=_f(damping), tol=float(tol), max_iters=int(max_iters),
                                                      newton_steps=int(newton_steps), response=response,
                                                      restart=bool(restart), solver=solver, response_jump=jump,
                                                      start=start_rec, **_problem_setting(problem, key)),
                       is_leaf=lambda x: x is None)


def _start_record(start) -> object:
    """How the fixed point was started (it can change which one is found): 'default' (Q_0, V = I/δ, M^0, a^0), the
    Warmup's parameters, or 'user dict'."""
    if start is None:
        return "default_start (Q = Q_0, V = I/δ, M = M^0, a = a^0)"
    if isinstance(start, Warmup):
        return dict(warmup=dict(lr=_f(start.lr), steps=int(start.steps), paths=int(start.paths),
                                key="fold_in(key, 7)"))
    return "user dict"


def _jump_check(problem, response, where):
    """:func:`dmft.problem.warn_if_response_jumps` for the Jacobian response (S2); the Stein response sees jumps."""
    if response != "jacobian":
        return None
    from .problem import warn_if_response_jumps

    return warn_if_response_jumps(problem, where, "Use response='stein' (Γ = E[g ωᵀ] Q⁻¹, which includes the jumps) or a "
                                                  "smooth surrogate; setting['response_jump'] records the size.")


def _f(x):
    if isinstance(x, Tracer):
        return None
    a = np.asarray(x, float)
    return float(a) if a.ndim == 0 else a.tolist()
