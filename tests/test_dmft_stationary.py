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


@pytest.mark.parametrize("case", ["logistic-trained-a", "gelu-phase-retrieval"])
def test_prox_implicit_derivative_matches_finite_differences(case):
    """The prox's custom JVP (implicit function theorem on r + V g(r; a) = b) against central
    finite differences of the converged Newton solve, in b, V and a. The GeLU / y = z² case is
    non-convex in r; V is kept small enough there that every sample has one minimizer."""
    from dmft.prox import make_prox

    jax.config.update("jax_enable_x64", True)
    m = 2
    if case == "logistic-trained-a":
        P = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.sign(z[0] + 0.3 * e[0]), k=1, noise_dim=1),
                         student=dmft.TwoLayer(activation=jnp.tanh, width=m, second_layer=jnp.array([1.0, -0.5]),
                                               train_second_layer=True), loss=dmft.logistic_loss)
        V = jnp.array([[0.8, 0.2], [0.2, 0.5]])
    else:
        P = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
                         student=dmft.TwoLayer(activation=dmft.activations.get("gelu"), width=m,
                                               second_layer=jnp.ones(m) / m), loss=dmft.square_loss)
        V = jnp.array([[0.3, 0.05], [0.05, 0.2]])
    N = 64
    kz, kb, kt = jax.random.split(jax.random.key(0), 3)
    z = jax.random.normal(kz, (N,))
    y = jnp.sign(z + 0.1) if case == "logistic-trained-a" else z**2
    b = jax.random.normal(kb, (N, m)) * 1.5
    a = P.student.second_layer
    prox = jax.jit(make_prox(P, y, newton_steps=40))
    r = prox(b, V, a, b)
    res = r + jax.vmap(lambda yy, rr: dmft.sample_grad(P, yy, rr, a))(y, r) @ V.T - b
    assert float(jnp.max(jnp.abs(res))) < 1e-10
    tb, tV, ta = jax.random.normal(kt, (N, m)), jnp.array([[0.3, -0.1], [-0.1, 0.2]]), jnp.array([0.7, -0.4])
    _, jv = jax.jit(lambda *p: jax.jvp(lambda b_, V_, a_: prox(b_, V_, a_, b), (b, V, a), p))(tb, tV, ta)
    h = 1e-5
    fd = (prox(b + h * tb, V + h * tV, a + h * ta, b) - prox(b - h * tb, V - h * tV, a - h * ta, b)) / (2 * h)
    # central differences of a Newton solve converged to ~1e-12: error O(h²) + O(1e-12/h)
    np.testing.assert_allclose(np.asarray(jv), np.asarray(fd), rtol=1e-5, atol=1e-6)


def test_stall_and_runaway_are_named_and_settings_rerunnable():
    """Session 49 user audit. (a) OLS at δ = 1.01 (V = 100 exact): Levenberg–Marquardt ends by its own step test at
    V ≈ 14.5 after ~55 iterations whatever max_iters is, and was reported as MAX_ITERS ("try more iterations"):
    now STALLED. (b) The damped iteration at damping 1 blows up for a tanh student at δ = 3 (GD's train error
    0.027: no interpolation) and was labelled DIVERGED ("GD interpolates"): now RUNAWAY; OLS at δ = 0.5 stays
    DIVERGED. (c) The setting records the key, the start and the problem."""
    from dmft.stationary import DIVERGED, RUNAWAY, STALLED, Warmup

    st = stationary(linear_problem(), 1.01, paths=2048, max_iters=200)
    assert int(st.status) == STALLED and int(st.iterations) < 200 and "more iterations do not help" in st.message()
    tanh = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(2 * z[0]) + 0.3 * e[0], k=1, noise_dim=1),
                        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)))
    run = stationary(tanh, 3.0, paths=4096, max_iters=500, solver="iterate", damping=1.0)
    assert int(run.status) == RUNAWAY, run.message()
    assert int(stationary(linear_problem(), 0.5, paths=2048, max_iters=200).status) == DIVERGED
    s = stationary(linear_problem(), 3.0, paths=1024, key=jax.random.key(5), start=Warmup(lr=0.2, steps=5, paths=1024)).setting
    assert s["key"] == [0, 5] and s["start"]["warmup"]["steps"] == 5 and s["ridge_second"] == 0.0
    assert s["problem"]["width"] == 1 and "code=" in s["problem"]["activation"]
