"""Stationary DMFT (THEORY §2 "Long time", dmft/stationary.py) against closed forms and GD.

Tolerances: the Monte Carlo standard error of each average is estimated from the same
samples (train error) or measured (8000 paths: ~2% on Q and the errors for the linear case,
see benchmarks/results/dmft.json "stationary" rows); GD tolerances from the per-seed spread.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
from dmft.stationary import CONVERGED, MAX_ITERS, stationary, stationary_sweep

SIG = 0.5


def linear_problem(ridge=0.0):
    return dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + SIG * e[0], k=1, noise_dim=1),
                        student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)), ridge=ridge)


def test_least_squares_closed_form_sweep():
    """Square loss, linear student, λ = 0: V = 1/(δ−1), M = 1, Q = σ²/(δ−1),
    train = σ²(1 − 1/δ)/2 (ordinary least squares); one vmapped sweep over δ."""
    deltas = np.array([2.0, 3.0, 5.0])
    res = stationary_sweep(linear_problem(), deltas, paths=8000, key=jax.random.key(3), max_iters=50)
    assert np.all(np.asarray(res.status) == CONVERGED)
    V = np.asarray(res.response)[:, 0, 0]
    np.testing.assert_allclose(V, 1 / (deltas - 1), rtol=1e-9)  # D ≡ 1: no Monte Carlo in V
    y = np.asarray(res.samples["y"])
    r = np.asarray(res.samples["r"])[..., 0]
    loss = 0.5 * (y - r) ** 2
    se = loss.std(axis=1) / np.sqrt(loss.shape[1])
    np.testing.assert_array_less(np.abs(loss.mean(axis=1) - 0.5 * SIG**2 * (1 - 1 / deltas)), 5 * se)
    # Q and M: relative Monte Carlo error ~ (2/paths)^{1/2} ≈ 1.6%; 5 s.e.
    np.testing.assert_allclose(np.asarray(res.q)[:, 0, 0], SIG**2 / (deltas - 1), rtol=0.08)
    np.testing.assert_allclose(np.asarray(res.overlap)[:, 0, 0], 1.0, atol=0.03)


def test_ridge_closed_form_response():
    """Ridge λ: V solves δ V (λ + 1/(1 + V)) = 1 exactly (D ≡ 1)."""
    lam, delta = 0.3, 0.7  # below the interpolation point: only the ridge keeps V finite
    res = stationary(linear_problem(lam), delta, paths=2048, max_iters=50)
    assert int(res.status) == CONVERGED
    V = float(res.response[0, 0])
    assert abs(delta * V * (lam + 1 / (1 + V)) - 1) < 1e-9


def test_logistic_ridge_against_gd():
    """Logistic loss with ridge (convex, GD converges to the unique minimizer): the stationary
    state agrees with GD after convergence (d = 400, 4 seeds, 400 steps of η = 1)."""
    pb = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.sign(z[0] + 0.3 * e[0]), k=1, noise_dim=1),
                      student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)),
                      loss=dmft.logistic_loss, ridge=0.1)
    st = stationary(pb, 2.0, paths=16384, key=jax.random.key(1), max_iters=60)
    assert int(st.status) == CONVERGED, st.message()
    sim = dmft.simulate(pb, 400, 2.0, 1.0, 400, 4, jax.random.key(2))
    # converged GD: the last 100 steps do not move
    assert abs(float(sim.train_error[-1] - sim.train_error[-100])) < 1e-6
    for name, th, gd, gd_se, mc in (
        ("train", st.train_error, sim.train_error[-1], sim.train_error_stderr[-1], 0.004),
        ("test", st.test_error, sim.test_error[-1], sim.test_error_stderr[-1], 0.006),
        ("M", st.overlap[0, 0], sim.overlap[-1, 0, 0], sim.overlap_stderr[-1, 0, 0], 0.015),
        ("gram", st.gram[0, 0], sim.gram[-1, 0, 0], sim.gram_stderr[-1, 0, 0], 0.03),
    ):
        # 3 s.e. (GD seeds) + DMFT Monte Carlo error at 16384 paths + O(1/d) finite-size bias
        tol = 3 * float(gd_se) + mc + 2.0 / 400
        assert abs(float(th) - float(gd)) < tol, (name, float(th), float(gd), tol)


def test_reports_non_convergence():
    res = stationary(linear_problem(), 3.0, paths=1024, max_iters=1)
    assert int(res.status) == MAX_ITERS
    assert "max_iters" in res.message()
    with pytest.raises(dmft.ProblemError, match="stationary DMFT"):
        stationary(linear_problem(), 3.0, paths=1024, max_iters=1, throw=True)


def test_bad_arguments():
    with pytest.raises(dmft.ProblemError, match="solver"):
        stationary(linear_problem(), 3.0, solver="magic")
    with pytest.raises(dmft.ProblemError, match="delta"):
        stationary(linear_problem(), -1.0)
