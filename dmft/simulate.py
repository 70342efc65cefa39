"""Finite-d full-batch gradient descent: the ground truth (THEORY §0, §3).

``W^{t+1} = W^t − η_t [(1/n) Σ_i x_i g_iᵀ + λ W^t]``,
``a^{t+1} = a^t − η_{a,t} [(1/n) Σ_i ∇_a ℓ_i + λ_a a^t]``, on real Gaussian data
``x_i ~ N(0, I_d)``, ``n = round(δ d)``, teacher ``Θ* = [e_1..e_k]``.

Observables match :class:`dmft.Trajectory`: train error ``(1/n) Σ ℓ(y_i, F(W^tᵀx_i; a^t))``;
test error on fresh inputs, drawn exactly as ``(z, W^tᵀx)`` from their joint Gaussian law
given ``W^t`` (``r = M^tᵀz + chol(W_⊥ᵀW_⊥) ξ``); overlap ``M^t = Θ*ᵀW^t``; gram ``W^tᵀW^t``.
Seeds run under ``vmap`` (in chunks of ``seed_batch`` to bound memory).

``freeze_hard=True`` runs the *first phase at finite d*: the rows of ``W`` along the hard
teacher directions (``Θ_hᵀW``, i.e. the hard columns of ``M``) are held at their initial
value ``M^0`` (zero for a hard direction), the rest of GD unchanged. This is GD on the
manifold the DMFT first phase lives on (THEORY §1–§2: at ``d → ∞`` the hard overlap stays at
``M^0`` for any finite time), run to any horizon; its Hessian outlier along ``Θ_h``
(:func:`spectral.hard_outlier_at_state`) is the finite-d ``δ*(t)`` ground truth at times the
dynamic DMFT cannot reach.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .data import init_weights, sample_data, fixed_test_set
from .problem import Problem, ProblemError, check_finite_maps, sample_grad, sample_grad_a
from .solve import _lr_schedule, _problem_setting


class SimulationResult(eqx.Module):
    """Per-seed GD observables, indexed ``[seed, step]``; the attributes ``train_error``,
    ``test_error``, ``overlap``, ``gram``, ``second_layer`` are seed means and ``*_stderr``
    the standard errors of those means. ``W``/``a`` hold the final weights when requested;
    ``W_at``/``a_at`` (seeds, C, d, m) / (seeds, C, m) the weights after each of the ``C`` steps of
    ``save_weights_at``."""

    train_error_seeds: jax.Array
    test_error_seeds: jax.Array
    overlap_seeds: jax.Array
    gram_seeds: jax.Array
    second_layer_seeds: jax.Array
    W: Optional[jax.Array] = None
    a: Optional[jax.Array] = None
    seed_keys: Optional[jax.Array] = None
    setting: Optional[dict] = None
    W_at: Optional[jax.Array] = None
    a_at: Optional[jax.Array] = None

    def _mean(self, x):
        return jnp.mean(x, axis=0)

    def _se(self, x):
        s = x.shape[0]
        return jnp.std(x, axis=0, ddof=1) / np.sqrt(s) if s > 1 else jnp.full(x.shape[1:], jnp.nan)

    train_error = property(lambda self: self._mean(self.train_error_seeds))
    test_error = property(lambda self: self._mean(self.test_error_seeds))
    overlap = property(lambda self: self._mean(self.overlap_seeds))
    gram = property(lambda self: self._mean(self.gram_seeds))
    second_layer = property(lambda self: self._mean(self.second_layer_seeds))
    train_error_stderr = property(lambda self: self._se(self.train_error_seeds))
    test_error_stderr = property(lambda self: self._se(self.test_error_seeds))
    overlap_stderr = property(lambda self: self._se(self.overlap_seeds))
    gram_stderr = property(lambda self: self._se(self.gram_seeds))

    @property
    def seeds(self) -> int:
        return self.train_error_seeds.shape[0]


def _run_one(problem: Problem, key, d: int, n: int, eta, steps: int, test_samples: int, random_overlap: bool, dtype,
             n_real=None, freeze_hard: tuple = (), save_at: tuple = ()):
    k = problem.k
    st = problem.student
    kd, kw, kt = jax.random.split(key, 3)
    X, y = sample_data(problem, kd, d, n, dtype)
    # padded samples (rows >= n_real) carry weight 0: one compilation serves every δ <= n/d
    wts = (jnp.arange(n) < (n if n_real is None else n_real)).astype(dtype)
    n_eff = jnp.sum(wts)
    W0 = init_weights(problem, kw, d, random_overlap, dtype)
    a0 = st.second_layer.astype(dtype)
    eta = eta.astype(dtype)
    eta_a = eta * (st.second_layer_lr_scale if st.train_second_layer else 0.0)
    lam, lam_a = problem.ridge.astype(dtype), problem.ridge_second.astype(dtype)

    # fresh test inputs: (z, ξ) standard normal, fixed across time (common random numbers)
    zt, yt, xit = fixed_test_set(problem, kt, test_samples, dtype)

    grad_r = jax.vmap(lambda yy, rr, aa: sample_grad(problem, yy, rr, aa), in_axes=(0, 0, None))
    grad_a = jax.vmap(lambda yy, rr, aa: sample_grad_a(problem, yy, rr, aa), in_axes=(0, 0, None))
    loss_v = jax.vmap(problem.sample_loss, in_axes=(0, 0, None))

    def observe(W, a, R):
        Wp = W[k:]
        cperp = Wp.T @ Wp
        ev, V = jnp.linalg.eigh(0.5 * (cperp + cperp.T))
        r_test = zt @ W[:k] + xit @ (V * jnp.sqrt(jnp.maximum(ev, 0.0))).T
        return dict(
            train=jnp.sum(wts * loss_v(y, R, a)) / n_eff,
            test=jnp.mean(loss_v(yt, r_test, a)),
            overlap=W[:k],
            gram=W.T @ W,
            a=a,
        )

    save_idx = jnp.asarray(save_at, dtype=int)

    def step(carry, t):
        W, a, Ws, As = carry
        if save_at:  # (static) W, a here are the weights after t updates; no buffers otherwise
            hit = save_idx == t             # (measured: an always-present buffer slowed plain runs 1.5×)
            Ws = jnp.where(hit[:, None, None], W[None], Ws)
            As = jnp.where(hit[:, None], a[None], As)
        R = X @ W
        obs = observe(W, a, R)
        g = grad_r(y, R, a).astype(dtype) * wts[:, None]
        gW = X.T @ g / n_eff + lam * W
        if freeze_hard:  # first phase at finite d: the hard rows of W (teacher coordinates) do not move
            gW = gW.at[jnp.asarray(freeze_hard)].set(0.0)
        ga = (jnp.sum(grad_a(y, R, a) * wts[:, None], axis=0) / n_eff).astype(dtype) + lam_a * a
        live = t < steps  # the last pass only observes W^T
        step_w = jnp.where(live, eta[t], 0.0).astype(dtype)
        step_a = jnp.where(live, eta_a[t], 0.0).astype(dtype)
        return ((W - step_w * gW).astype(dtype), (a - step_a * ga).astype(dtype), Ws, As), obs

    C = len(save_at)
    init = (W0, a0, jnp.zeros((C,) + W0.shape, dtype), jnp.zeros((C,) + a0.shape, dtype))
    (Wf, af, Ws, As), obs = jax.lax.scan(step, init, jnp.arange(steps + 1))
    return obs, Wf, af, Ws, As


def simulate(
    problem: Problem,
    d: int,
    delta,
    lr,
    steps: int,
    seeds: int,
    key,
    *,
    test_samples: int = 16384,
    return_weights: bool = False,
    random_overlap: bool = False,
    seed_batch: Optional[int] = None,
    dtype=jnp.float64,
    n_pad: Optional[int] = None,
    freeze_hard: bool = False,
    save_weights_at=(),
) -> SimulationResult:
    """Full-batch GD at dimension ``d`` with ``n = round(δ d)`` samples, ``seeds`` independent
    draws of data and initialization (seed ``s`` uses ``jax.random.fold_in(key, s)``).

    ``lr`` is a scalar or a schedule of shape ``(steps,)``. ``random_overlap=True`` adds the
    ``O(d^{-1/2})`` random teacher overlap of an ordinary random init to ``M^0`` (default:
    exactly ``M^0``). ``return_weights=True`` keeps the final ``W`` (seeds, d, m) and ``a``.
    Runs unchanged on GPU; ``dtype=jnp.float32`` halves memory there. ``n_pad >= n``: draw
    ``n_pad`` samples and give the extra ones weight 0, so a δ sweep at fixed ``d`` and
    ``n_pad`` compiles once (the training set is then the first ``n`` of ``n_pad`` draws).
    ``freeze_hard=True``: the first phase at finite d — the rows of ``W`` along the hard
    teacher coordinates stay at ``M^0`` (see the module docstring).
    ``save_weights_at``: steps (ints in ``[0, steps]``) after which ``W`` and ``a`` are kept
    (``W_at``, ``a_at``): the weights along one trajectory, e.g. for the Hessian spectrum over
    training — one run and one compilation instead of one per checkpoint (the weights after
    ``t`` steps are those of a run with ``steps = t``: same keys, same data, same initialization).
    """
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise ProblemError(f"dtype must be jnp.float32 or jnp.float64 (got {jnp.dtype(dtype).name}): the data, weights "
                           "and Threefry draws are floating point of one of those widths.")
    if not isinstance(d, (int, np.integer)) or d <= problem.k:
        raise ProblemError(f"d must be an int > k = {problem.k} (got {d!r}).")
    delta_f = float(delta)
    if not np.isfinite(delta_f) or delta_f <= 0:
        raise ProblemError(f"delta must be finite and > 0 (got {delta}).")
    n = int(round(delta_f * d))
    if n < 1:
        raise ProblemError(f"n = round(delta*d) = {n}; increase d or delta.")
    if not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise ProblemError(f"seeds must be a positive int (got {seeds!r}).")
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ProblemError(f"steps must be a positive int (got {steps!r}).")
    lr_np = np.asarray(lr, dtype=float)
    if not np.all(np.isfinite(lr_np)) or np.any(lr_np <= 0):
        raise ProblemError(f"lr must be finite and > 0 (got {lr}).")
    if isinstance(test_samples, bool) or not isinstance(test_samples, (int, np.integer)) or test_samples < 1:
        raise ProblemError(f"test_samples must be an int >= 1 (the fixed test set of the test error; default 16384); "
                           f"got {test_samples!r}.")
    check_finite_maps(problem)
    hard = tuple(problem.teacher.hard_coordinates()) if freeze_hard else ()
    if freeze_hard and not hard:
        raise ProblemError("freeze_hard=True but the teacher has no hard coordinates (Teacher.hard or an even link); "
                           "there is no first phase to isolate.")
    eta = _lr_schedule(lr, steps)
    try:
        req = np.atleast_1d(np.asarray(save_weights_at, dtype=float)).ravel()
    except (TypeError, ValueError):
        req = np.asarray([np.nan])
    if not np.all(np.isfinite(req)) or np.any(np.mod(req, 1) != 0) or np.any((req < 0) | (req > steps)):
        raise ProblemError(f"save_weights_at must be integer steps in [0, steps={steps}] (got {save_weights_at!r}).")
    save_at = tuple(sorted({int(t) for t in req}))
    if n_pad is not None and (not isinstance(n_pad, (int, np.integer)) or n_pad < n):
        raise ProblemError(f"n_pad must be an int >= n = round(delta*d) = {n} (got {n_pad!r}).")
    n_arr = n if n_pad is None else int(n_pad)
    if seed_batch is None:
        per_seed = (n_arr * d + (4 + len(save_at)) * d * problem.m) * jnp.dtype(dtype).itemsize
        seed_batch = int(max(1, min(seeds, 2_000_000_000 // max(per_seed, 1))))
    keys = jax.vmap(lambda s: jax.random.fold_in(key, s))(jnp.arange(seeds))
    n_real = None if n_pad is None else jnp.asarray(n)
    obs, Wf, af, Ws, As = _simulate_jit(problem, keys, eta, d, n_arr, steps, test_samples, random_overlap, dtype, seed_batch,
                                        n_real, hard, save_at)
    setting = dict(d=int(d), n=n, n_pad=n_pad, delta=delta_f, lr=lr_np.tolist(), steps=int(steps), seeds=int(seeds),
                   **_problem_setting(problem, key), seed_keys="fold_in(key, seed) for seed = 0 .. seeds-1",
                   test_samples=int(test_samples), random_overlap=bool(random_overlap),
                   dtype=jnp.dtype(dtype).name, teacher_basis="first k coordinate axes",
                   freeze_hard=list(hard) if hard else False, save_weights_at=list(save_at))
    setting["failure"] = _failure_record(obs)
    return SimulationResult(
        train_error_seeds=obs["train"],
        test_error_seeds=obs["test"],
        overlap_seeds=obs["overlap"],
        gram_seeds=obs["gram"],
        second_layer_seeds=obs["a"],
        W=Wf if return_weights else None,
        a=af if return_weights else None,
        seed_keys=keys,
        setting=setting,
        W_at=Ws if save_at else None,
        a_at=As if save_at else None,
    )


def _failure_record(obs):
    """Seeds whose train or test error became non-finite or blew up (``dmft.solve.divergence_step``), with a
    warning that names the likely cause; None when every seed stayed finite. Session 50 audit: a diverging run
    (train error inf then NaN from step 2) and NaN labels on rare inputs (NaN at every step) were returned
    silently."""
    import warnings

    from .solve import divergence_step

    if isinstance(obs["train"], jax.core.Tracer):
        return None
    te, ts = np.asarray(obs["train"], float), np.asarray(obs["test"], float)
    div = divergence_step(te)
    nonfin_test = ~np.all(np.isfinite(ts), axis=1)
    bad = np.nonzero((div >= 0) | nonfin_test)[0]
    if not bad.size:
        return None
    first = [int(div[s]) if div[s] >= 0 else int(np.argmax(~np.isfinite(ts[s]))) for s in bad]
    s0 = min(first)
    cause = ("at step 0, before any update: labels or initial outputs are non-finite on some sample (e.g. a link that "
             "returns NaN on rare inputs, which the 256 draws of check_finite_maps miss: run "
             "dmft.check_finite_maps(problem, samples=10**6))" if s0 == 0 else
             "GD diverges (the train error leaves 1e6 × its initial value, or overflows): lr is above 2/λ_max of the "
             "Hessian; reduce lr")
    warnings.warn(f"simulate: {bad.size} of {te.shape[0]} seeds have a non-finite or diverging error from step {s0} "
                  f"(seeds {bad[:8].tolist()}{' …' if bad.size > 8 else ''}): {cause}. Their rows enter the seed means "
                  "(setting['failure']).", RuntimeWarning, stacklevel=3)
    return dict(seeds=bad.tolist(), first_step=first, cause=cause)


@eqx.filter_jit
def _simulate_jit(problem, keys, eta, d, n, steps, test_samples, random_overlap, dtype, seed_batch, n_real=None,
                  freeze_hard: tuple = (), save_at: tuple = ()):
    one = jax.vmap(lambda kk: _run_one(problem, kk, d, n, eta, steps, test_samples, random_overlap, dtype, n_real,
                                       freeze_hard, save_at))
    seeds = keys.shape[0]
    nb = -(-seeds // seed_batch)
    pad = nb * seed_batch - seeds
    kp = jnp.concatenate([keys, keys[:pad]]) if pad else keys
    out = jax.lax.map(one, kp.reshape((nb, seed_batch)))
    out = jax.tree.map(lambda x: x.reshape((nb * seed_batch,) + x.shape[2:])[:seeds], out)
    return out


def simulation_data(problem: Problem, sim: SimulationResult, seed: int):
    """Rebuild the training data ``(X, y)`` of seed ``seed`` of a simulation (same keys)."""
    s = sim.setting
    kd, _, _ = jax.random.split(sim.seed_keys[seed], 3)
    X, y = sample_data(problem, kd, s["d"], s["n_pad"] or s["n"], jnp.dtype(s["dtype"]))
    return X[: s["n"]], y[: s["n"]]
