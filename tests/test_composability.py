"""The public entry points under a caller's jax.jit / jax.vmap (session 51 user audit): results pass through
them, bad traced inputs come back flagged instead of as plausible numbers, the input checks of a concrete
problem run at trace time, and a repeated call does not recompile."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import flows
import spectral


def _problem():
    return dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
                        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.ones(2)),
                        loss=dmft.square_loss, ridge=0.05,
                        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((1, 2))))


KEY = jax.random.key(0)


def test_solve_under_vmap_returns_a_trajectory_and_flags_invalid_traced_inputs():
    """The docstring's recipe ``jax.vmap(lambda d: solve(..., throw=False))(deltas)`` returns a Trajectory
    (its ``setting`` holds strings: it was a pytree leaf and raised TypeError). A traced δ ≤ 0 or lr ≤ 0
    cannot be refused before the run: its point is NaN with failed_step 0 (was: train error 5e87 at δ = −1
    and failed_step −1, a plausible 1.53 at lr = −0.3), the valid points are untouched."""
    P = _problem()
    run = lambda d, lr: dmft.solve(P, d, lr, 4, 128, KEY, throw=False)  # noqa: E731  (default check_inputs=True)
    tr = jax.vmap(run)(jnp.array([2.0, -1.0, 2.0]), jnp.array([0.2, 0.2, -0.3]))
    assert isinstance(tr, dmft.Trajectory) and tr.setting["dtype"] == "float64"
    assert np.asarray(tr.failed_step).tolist() == [-1, 0, 0]
    assert np.all(np.isfinite(tr.train_error[0])) and np.all(np.isnan(tr.train_error[1:]))
    ref = dmft.solve(P, 2.0, 0.2, 4, 128, KEY)
    np.testing.assert_allclose(tr.train_error[0], ref.train_error, rtol=1e-12)
    # a traced negative ridge (a problem built inside the trace) is flagged the same way
    bad_ridge = jax.jit(lambda r: dmft.solve(dmft.Problem(teacher=P.teacher, student=P.student, ridge=r, init=P.init),
                                             2.0, 0.2, 4, 128, KEY, throw=False).failed_step)(-1.0)
    assert int(bad_ridge) == 0
    # throw=True under jit names the fix (it was a TracerArrayConversionError from the input checks)
    with pytest.raises(dmft.DMFTError, match="throw=False"):
        jax.jit(lambda d: dmft.solve(P, d, 0.2, 4, 128, KEY).train_error)(2.0)


def test_stationary_under_jit_checks_the_concrete_problem_at_trace_time():
    """``stationary`` under ``jax.jit`` over δ raised ConcretizationTypeError from the response-jump scan in a
    fresh process (and not after an earlier call had cached it): the scan of a concrete problem now runs at
    trace time; a problem with traced parameters is not scanned (nan)."""
    from dmft.problem import _JUMP_CACHE, response_jumps

    P = _problem()
    _JUMP_CACHE.clear()
    st = jax.jit(lambda d: dmft.stationary(P, d, paths=256, max_iters=3).status)(2.0)
    from dmft.stationary import STATUS_MESSAGES

    assert int(st) in STATUS_MESSAGES
    assert np.isnan(jax.jit(lambda r: jnp.asarray(response_jumps(
        dmft.Problem(teacher=P.teacher, student=P.student, ridge=r, init=P.init))))(0.1))
    assert response_jumps(P) < 1e-6


def test_spectral_invalid_traced_delta_has_its_own_status():
    """Under vmap a δ ≤ 0 came back as NO_EDGE ("the law may have unbounded support"): now INVALID_DELTA."""
    z = np.random.default_rng(0).standard_normal(2000)
    law = spectral.law_from_samples(1 - 0.9 * np.tanh(z ** 2 - 1), zeta=z, unbounded=())
    st = jax.vmap(lambda d: spectral.outlier(law, d, throw=False).status)(jnp.array([2.0, -1.0, 0.0]))
    assert np.asarray(st)[0] in (spectral.SUCCESS, spectral.NO_OUTLIER)
    assert np.asarray(st)[1:].tolist() == [spectral.INVALID_DELTA] * 2
    e = jax.jit(lambda d: spectral.bulk_edge(law, d, throw=False).status)(-1.0)
    assert int(e) == spectral.INVALID_DELTA and "delta" in spectral.message(e)
    g = spectral.stieltjes(law, jnp.array([0.5, 0.5]), 2.0, throw=False)
    assert np.all(np.asarray(g.status) != spectral.INVALID_DELTA)


def test_law_from_dmft_names_save_samples_at():
    P = _problem()
    tr = dmft.solve(P, 2.0, 0.2, 3, 128, KEY)
    with pytest.raises(spectral.SpectralError, match=r"save_samples_at=\(3,\)"):
        spectral.law_from_dmft(P, tr, 3)


def test_residual_ncf_compiles_once(caplog):
    """``flows.residual_ncf`` passed a fresh closure to ``jax.jit`` as a static argument: every call, identical
    ones included, recompiled its ascent (~1 s inside every ``first_saddle``)."""
    X = jax.random.normal(jax.random.key(1), (20, 3))
    y = jnp.tanh(X[:, 0])
    model = lambda p, X: jnp.tanh(X @ p["W"]) @ p["a"]  # noqa: E731
    w = dict(W=0.3 * jax.random.normal(jax.random.key(2), (3, 4)), a=jnp.array([0.5, -0.2, 0.0, 0.0]))
    mask = dict(W=jnp.zeros((3, 4)).at[:, 2:].set(1.0), a=jnp.zeros(4).at[2:].set(1.0))
    first = flows.residual_ncf(model, w, mask, X, y, starts=2)
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        caplog.clear()
        again = flows.residual_ncf(model, w, mask, X, y, starts=2)
    assert again == first
    assert not [r for r in caplog.records if "_residual_ascent" in r.getMessage() or "_ascent" in r.getMessage()]
