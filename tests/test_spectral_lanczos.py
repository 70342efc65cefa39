"""Lanczos (full re-orthogonalization) against dense eigh; HVPs against the dense Hessian."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import spectral


@pytest.fixture(scope="module")
def net():
    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    prob = dmft.Problem(pr, dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([1.0, -0.5])),
                        ridge=0.01)
    d, n = 40, 120
    X, y = dmft.sample_data(prob, jax.random.key(0), d, n)
    W = dmft.init_weights(prob, jax.random.key(1), d)
    a = prob.student.second_layer
    H = np.asarray(spectral.dense_hessian(prob, X, y, a, W))
    return prob, X, y, a, W, H


def test_hvp_matches_dense(net):
    prob, X, y, a, W, H = net
    V = jax.random.normal(jax.random.key(2), W.shape)
    ref = (H @ np.asarray(V).ravel()).reshape(W.shape)
    for method in ("autodiff", "blocks"):
        hv = spectral.hessian_vector_product(prob, X, y, a, W, method=method)(V)
        assert np.max(np.abs(np.asarray(hv) - ref)) < 1e-12 * (1 + np.abs(ref).max())
    # the dense oracle is the autodiff Hessian of dmft.empirical_risk
    Hfull = jax.hessian(lambda W_: dmft.empirical_risk(prob, W_, a, X, y))(W).reshape(H.shape)
    assert np.max(np.abs(np.asarray(Hfull) - H)) < 1e-12


def test_lanczos_vs_eigh(net):
    prob, X, y, a, W, H = net
    ev, V = np.linalg.eigh(H)
    hvp = spectral.hessian_vector_product(prob, X, y, a, W, method="blocks")
    res = jax.jit(lambda key: spectral.lanczos_extreme(hvp, W.shape, 6, key, tol=1e-12, throw=False))(
        jax.random.key(3))
    assert int(res.status) == spectral.SUCCESS and int(res.ghosts) == 0
    assert int(res.iterations) < H.shape[0]                     # stopped by the residual rule
    want = np.concatenate([ev[:3], ev[-3:]])
    assert np.max(np.abs(np.asarray(res.eigenvalues) - want)) < 1e-8
    # eigenvectors: |<v, v_ref>| = 1 and overlap with Θ* (first coordinate axis)
    for i, j in zip(range(3), range(3)):
        assert abs(abs(np.vdot(np.asarray(res.eigenvectors[i]).ravel(), V[:, j])) - 1) < 1e-6
    ov = np.asarray(spectral.subspace_overlap(res.eigenvectors, 1))
    ref_ov = np.sum(V[:2, [0, 1, 2, -3, -2, -1]] ** 2, axis=0)
    assert np.max(np.abs(ov - ref_ov)) < 1e-6
    # a Krylov space run to full dimension has no ghost copies of converged eigenvalues
    full = jax.jit(lambda key: spectral.lanczos_extreme(hvp, W.shape, 30, key, which="smallest",
                                                        max_iters=H.shape[0], tol=1e-10, throw=False))(jax.random.key(4))
    assert int(full.ghosts) == 0
    assert np.max(np.abs(np.asarray(full.eigenvalues) - ev[:30])) < 1e-8


def test_lanczos_vmap_seeds_and_slq(net):
    prob, X, y, a, W, H = net
    ev = np.linalg.eigvalsh(H)
    hvp = spectral.hessian_vector_product(prob, X, y, a, W, method="blocks")
    keys = jax.random.split(jax.random.key(5), 3)
    # under jit, as a user runs it (eager, every jnp op of the loop set-up compiles on its own)
    res = jax.jit(jax.vmap(lambda k: spectral.lanczos_extreme(hvp, W.shape, 1, k, which="smallest", tol=1e-10,
                                                              throw=False)))(keys)
    assert res.eigenvalues.shape == (3, 1) and np.allclose(np.asarray(res.eigenvalues[:, 0]), ev[0], atol=1e-8)
    slq = jax.jit(lambda k: spectral.stochastic_lanczos_quadrature(hvp, W.shape, k, probes=4, order=20))(jax.random.key(6))
    # CDF of the spectral measure at the median eigenvalue: Hutchinson error ~ 1/sqrt(probes·dim) ~ 0.04
    med = np.median(ev)
    assert abs(float(slq.cdf(med)) - 0.5) < 0.1
    grid = jnp.linspace(ev[0] - 1, ev[-1] + 1, 400)
    dens = np.asarray(slq.density(grid, 0.05))
    assert abs(np.sum(dens) * float(grid[1] - grid[0]) - 1) < 1e-3


def test_lanczos_max_iters_status(net):
    prob, X, y, a, W, H = net
    hvp = spectral.hessian_vector_product(prob, X, y, a, W, method="blocks")
    res = spectral.lanczos_extreme(hvp, W.shape, 4, jax.random.key(0), max_iters=6, tol=1e-14, throw=False)
    assert int(res.status) == spectral.MAX_ITERS and not bool(jnp.all(res.converged))
    # the message names Lanczos' own knobs (not the Stieltjes fixed point's max_steps/eps)
    with pytest.raises(spectral.SpectralError, match="max_iters=6") as err:
        spectral.lanczos_extreme(hvp, W.shape, 4, jax.random.key(0), max_iters=6, tol=1e-14)
    assert "increase max_iters" in str(err.value) and "eps" not in str(err.value)


def test_tridiag_multisection_matches_eigvalsh():
    """Sturm multisection (the Ritz values inside Lanczos) against LAPACK on random and
    tightly clustered tridiagonals: every eigenvalue to 1e-13 relative to the spectrum's scale."""
    from spectral.lanczos import tridiag_eigvals

    rng = np.random.default_rng(0)
    for a, b in ((rng.normal(size=60), rng.normal(size=59)), (np.ones(30), np.full(29, 1e-9)),
                 (np.linspace(-1, 1, 40), 1e-3 * rng.normal(size=39))):
        T = np.diag(a) + np.diag(b, 1) + np.diag(b, -1)
        ev = np.linalg.eigvalsh(T)
        got = np.asarray(tridiag_eigvals(jnp.asarray(a), jnp.asarray(b), jnp.arange(a.size)))
        np.testing.assert_allclose(got, ev, atol=1e-13 * np.max(np.abs(ev)))


def _pr_problem(act=jnp.square, m=2):
    from benchmarks.bench_delta_star_trend import problem

    return problem(act, m=m)


def test_freeze_hard_keeps_first_phase():
    """freeze_hard=True: the hard overlap stays exactly at M^0 = 0 while the rest trains; without
    it the finite-n gradient moves it off zero at the first step."""
    P = _pr_problem()
    kw = dict(d=40, delta=3.0, lr=0.1, steps=30, seeds=2, key=jax.random.key(3), test_samples=256)
    frozen = dmft.simulate(P, freeze_hard=True, **kw)
    free = dmft.simulate(P, **kw)
    assert np.all(np.asarray(frozen.overlap_seeds) == 0.0)
    assert np.abs(np.asarray(free.overlap_seeds[:, 1])).max() > 1e-4
    tr = np.asarray(frozen.train_error)
    assert tr[-1] < 0.5 * tr[0]  # the non-hard part does train
    assert frozen.setting["freeze_hard"] == [0]
    with pytest.raises(dmft.ProblemError, match="hard"):
        Pe = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0], k=1, noise_dim=0), student=P.student,
                          loss=P.loss, init=P.init)
        dmft.simulate(Pe, freeze_hard=True, **kw)


def test_hard_outlier_at_state_dense_lanczos_and_interlacing():
    """Dense and matrix-free routes agree; the constrained edge is the bottom of the Hessian with the
    hard rows removed (computed here independently); Cauchy interlacing ev[0] <= edge."""
    P = _pr_problem()
    sim = dmft.simulate(P, d=60, delta=5.0, lr=0.1, steps=60, seeds=1, key=jax.random.key(1), return_weights=True,
                        freeze_hard=True, test_samples=256)
    X, y = dmft.simulation_data(P, sim, 0)
    W, a = sim.W[0], sim.a[0]
    dense = spectral.hard_outlier_at_state(P, X, y, W, a, k=4, method="dense")
    lanc = spectral.hard_outlier_at_state(P, X, y, W, a, k=4, method="lanczos", theory=False)
    H = np.asarray(spectral.dense_hessian(P, X, y, a, W)).reshape(60, 2, 60, 2)
    Hc = H[1:, :, 1:, :].reshape(118, 118)
    np.testing.assert_allclose(dense.constrained_edge, np.linalg.eigvalsh(Hc)[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lanc.constrained_edge, dense.constrained_edge, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lanc.eigenvalues, dense.eigenvalues, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lanc.hard_weight[:2], dense.hard_weight[:2], atol=1e-5)
    assert dense.eigenvalues[0] <= dense.constrained_edge + 1e-12 and dense.gap >= 0
    assert np.all((dense.hard_weight >= 0) & (dense.hard_weight <= 1 + 1e-12))
    assert dense.setting["delta"] == pytest.approx(5.0) and "theory_status" not in dense.setting
    assert dense.theory_status.startswith("outlier status")
    # every branch is reported (m = 2: two); branch 0 is the scalar field
    assert dense.theory_all_outliers.shape == (2,)
    assert np.isnan(dense.theory_outlier) or dense.theory_all_outliers[0] == dense.theory_outlier
    assert dense.setting["train_second_layer"] is False and dense.setting["hessian"].startswith("W-block")


def test_hard_outlier_at_state_lanczos_compiles_once_per_shape():
    """Two states of the same shape share one compiled Lanczos program, and a state's result does not depend
    on which state compiled it (before session 39 every call closed over its own (X, D) and compiled new
    programs; a loop over seeds at d = 2000 died when their memory maps reached vm.max_map_count)."""
    from spectral.finite_state import _lanczos_bottom

    P = _pr_problem()
    sim = dmft.simulate(P, d=60, delta=5.0, lr=0.1, steps=20, seeds=2, key=jax.random.key(3), return_weights=True,
                        freeze_hard=True, test_samples=256)
    data = [dmft.simulation_data(P, sim, s) for s in range(2)]
    run = lambda s: spectral.hard_outlier_at_state(P, *data[s], sim.W[s], sim.a[s], k=4, method="lanczos", theory=False,
                                                   max_iters=97)
    first = run(0)
    size = _lanczos_bottom._cache_size()
    second, again = run(1), run(0)
    assert _lanczos_bottom._cache_size() == size
    assert second.constrained_edge != first.constrained_edge
    np.testing.assert_array_equal(again.eigenvalues, first.eigenvalues)
    assert again.constrained_edge == first.constrained_edge


def test_degenerate_spectrum_copies_are_resolved_or_warned():
    """H = XᵀX/n with n = 20 < d = 30: a 10-fold zero eigenvalue. Single-vector Lanczos finds copies of a
    multiple eigenvalue only through rounding (user audit: 0, 0, 0.099, 0.175 with status SUCCESS, true 0, 0,
    0, 0). Coinciding converged values (``copies``) now trigger locked (deflated) restarts outside jit; with
    ``deflate=0`` they come with a warning."""
    X = jax.random.normal(jax.random.key(3), (20, 30), dtype=jnp.float64)
    H = X.T @ X / 20
    with pytest.warns(RuntimeWarning, match="multiple"):
        r = spectral.lanczos_extreme(lambda v: H @ v, 30, 4, jax.random.key(1), which="smallest", throw=False, deflate=0)
    assert int(r.copies) > 0 and int(r.deflation_passes) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = spectral.lanczos_extreme(lambda v: H @ v, 30, 4, jax.random.key(1), which="smallest")
    assert int(r.deflation_passes) >= 1 and int(r.ghosts) == 0
    np.testing.assert_allclose(r.eigenvalues, 0.0, atol=1e-12)
    V = np.asarray(r.eigenvectors)
    np.testing.assert_allclose(V @ V.T, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(np.asarray(H) @ V.T, 0.0, atol=1e-12)


def _triple(n=40):
    """[-2, -2, -2] below a continuous spectrum on [0, 1], in a random basis."""
    ev = np.concatenate([-2.0 * np.ones(3), np.linspace(0.0, 1.0, n - 3)])
    U, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n, n)))
    return jnp.asarray((U * ev) @ U.T), ev


def test_multiple_eigenvalue_gets_orthogonal_vectors_and_its_missing_copies():
    """Session 50. (1) A triple eigenvalue found three times returned one Ritz vector three times (inverse
    iteration from one shift; Gram off-diagonal 0.99999999): the copies now get orthonormal vectors (LAPACK
    stein's cluster re-orthogonalization). (2) A single Krylov space can miss a copy: here (tol 1e-6, key 2)
    the first pass returns [-2, -2, 0, 0.028]; the automatic locked restarts return [-2, -2, -2, 0]. (3) An
    explicit number of passes runs under jit."""
    A, ev = _triple()
    mv = lambda v: A @ v
    with pytest.warns(RuntimeWarning, match="multiple"):
        r0 = spectral.lanczos_extreme(mv, 40, 4, jax.random.key(2), which="smallest", tol=1e-6, deflate=0)
    assert abs(float(r0.eigenvalues[2]) + 2.0) > 1.0          # the single Krylov space missed the third copy
    r = spectral.lanczos_extreme(mv, 40, 4, jax.random.key(2), which="smallest", tol=1e-6)
    np.testing.assert_allclose(r.eigenvalues, ev[:4], atol=1e-6)
    assert int(r.deflation_passes) >= 1 and int(r.status) == spectral.SUCCESS
    assert float(jnp.max(r.residuals)) < 1e-6 * 3.0            # true ‖Av − θv‖ on A itself
    V = np.asarray(r.eigenvectors)
    np.testing.assert_allclose(V @ V.T, np.eye(4), atol=1e-10)
    # the three returned -2 vectors span the -2 eigenspace
    U3 = np.linalg.eigh(np.asarray(A))[1][:, :3]
    assert np.linalg.norm(U3.T @ V[:3].T, 2) > 1 - 1e-6 and np.linalg.svd(U3.T @ V[:3].T)[1].min() > 1 - 1e-6
    # orthonormal copies from one pass (the default key finds all three by rounding)
    r1 = spectral.lanczos_extreme(mv, 40, 3, jax.random.key(1), which="smallest", deflate=0, throw=False)
    V1 = np.asarray(r1.eigenvectors)
    if int(r1.copies) == 2:
        np.testing.assert_allclose(V1 @ V1.T, np.eye(3), atol=1e-10)
        assert int(r1.ghosts) == 0
    rj = jax.jit(lambda key: spectral.lanczos_extreme(mv, 40, 4, key, which="smallest", tol=1e-6, deflate=2,
                                                      throw=False))(jax.random.key(2))
    np.testing.assert_allclose(rj.eigenvalues, ev[:4], atol=1e-6)
    with pytest.raises(ValueError, match="deflate must be"):
        spectral.lanczos_extreme(mv, 40, 4, jax.random.key(2), deflate=-1)


def test_lanczos_breakdown_restarts_instead_of_stopping():
    """User audit (session 49): a start vector inside an invariant subspace broke down (β = 0) and the
    loop stopped: diag(1..20) with v0 = e1 returned 0, 0, 1 (status SUCCESS, residuals 0; 0 is no eigenvalue),
    v0 = e1 + e2 returned −861, −568, −379; an operator with three distinct eigenvalues (each ×10) returned
    [−1, −1, 0, 0, 1, 1] as its six smallest. A breakdown now restarts from a fresh orthogonal vector."""
    A = jnp.diag(jnp.arange(1.0, 21.0))
    for v0 in (jnp.eye(20)[0], jnp.eye(20)[0] + jnp.eye(20)[1]):
        r = spectral.lanczos_extreme(lambda v: A @ v, 20, 3, jax.random.key(0), which="smallest", v0=v0)
        np.testing.assert_allclose(r.eigenvalues, [1.0, 2.0, 3.0], atol=1e-12)
        assert int(r.restarts) >= 1 and float(jnp.max(r.residuals)) < 1e-12   # true residuals ‖Av − θv‖
    Qm, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((30, 30)))
    B = jnp.asarray(Qm @ np.diag(np.repeat([-1.0, 0.0, 1.0], 10)) @ Qm.T)
    with pytest.warns(RuntimeWarning, match="multiple"):       # six true copies coincide: warned without deflation
        r = spectral.lanczos_extreme(lambda v: B @ v, 30, 6, jax.random.key(0), which="smallest", deflate=0)
    np.testing.assert_allclose(r.eigenvalues, -np.ones(6), atol=1e-12)
    r0 = spectral.lanczos_extreme(lambda v: 0.0 * v, 10, 2, jax.random.key(0), which="smallest")   # T ≡ 0
    assert int(r0.status) == spectral.SUCCESS and np.all(np.asarray(r0.eigenvalues) == 0.0)


def test_lanczos_float32_tolerance_and_k_are_checked():
    """float32 vectors keep the basis orthonormal only to ~eps: with tol 1e-10 the Ritz bound said 1.7e-11
    where the true residual was 7.2e-7 (audit). Now refused before the run; k > dim names the dimension."""
    Qm, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((60, 60)))
    A = jnp.asarray(Qm @ np.diag(np.linspace(-1, 5, 60)) @ Qm.T, dtype=jnp.float32)
    with pytest.raises(ValueError, match="tol=1e-10 is below what float32"):
        spectral.lanczos_extreme(lambda v: A @ v, 60, 3, jax.random.key(0), v0=jnp.ones(60, jnp.float32))
    r = spectral.lanczos_extreme(lambda v: A @ v, 60, 3, jax.random.key(0), which="smallest", tol=1e-5)
    np.testing.assert_allclose(r.eigenvalues, np.linspace(-1, 5, 60)[:3], atol=1e-5)
    with pytest.raises(ValueError, match="operator's dimension 3"):
        spectral.lanczos_extreme(lambda v: v, 3, 5, jax.random.key(0))


def test_slq_weight_of_a_multiple_eigenvalue_is_its_projection():
    """Session 50: rounding puts copies of a multiple eigenvalue into each probe's tridiagonal; inverse iteration
    gave them one shared vector, so the quadrature weight at a triple −2 (n = 400) was 0.43 of its true value on
    average and up to 2.1 (in units of 3/n) off per probe. With cluster-orthogonalized vectors the weight at −2
    equals the probe's exact projection |P₋₂ q|² to 1e-9."""
    n = 200
    ev = np.concatenate([-2.0 * np.ones(3), np.linspace(0.0, 1.0, n - 3)])
    U, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n, n)))
    A = jnp.asarray((U * ev) @ U.T)
    r = spectral.stochastic_lanczos_quadrature(lambda v: A @ v, n, jax.random.key(0), probes=4, order=60)
    nodes, w = np.asarray(r.nodes), np.asarray(r.weights)
    got = np.sum(w * (np.abs(nodes + 2.0) < 1e-6), axis=1)
    for kk, g in zip(jax.random.split(jax.random.key(0), 4), got):
        q = np.array(jax.random.rademacher(kk, (n,), dtype=jnp.float64))
        q = q / np.linalg.norm(q)
        assert abs(g - np.sum((U[:, :3].T @ q) ** 2)) < 1e-9
