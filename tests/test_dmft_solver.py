"""Structural properties of the DMFT solver: exact symmetry, sweeps, schedules, contract."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft

quadratic = lambda x: x**2  # noqa: E731


def phase_retrieval(width=1, act=quadratic):
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=act, width=width, second_layer=jnp.ones(width) / width),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(width), overlap=jnp.zeros((1, width))),
    )


def test_hard_overlap_stays_exactly_zero():
    """THEORY §1: with M^0 = 0 on a hard direction the estimator of E[z_hard g] must vanish
    exactly (antithetic pairs summed first), else it drifts (the prototype reached −0.07)."""
    from dmft.activations import gelu

    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] + (z[1] ** 2 - 1) + 0.2 * e[0], k=2, noise_dim=1),
        student=dmft.TwoLayer(activation=gelu, width=2, second_layer=jnp.array([1.0, -0.5])),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))),
    )
    assert prob.teacher.hard_coordinates() == (1,)
    tr = dmft.solve(prob, delta=3.0, lr=0.1, steps=12, paths=1024, key=jax.random.key(0))
    assert np.all(np.asarray(tr.overlap[:, 1, :]) == 0.0)
    assert np.abs(np.asarray(tr.overlap[-1, 0, :])).min() > 0.05  # the easy direction is learned


def test_contract_shapes_and_names():
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, eps: jnp.tanh(2 * z[0]) + 0.3 * eps[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1), train_second_layer=False),
        loss=dmft.square_loss,
        ridge=0.0,
        init=dmft.Init(q0=jnp.array([[0.5]]), overlap=jnp.array([[0.3]])),
    )
    steps = 6
    traj = dmft.solve(prob, delta=2.0, lr=0.2, steps=steps, paths=512, key=jax.random.key(0), save_samples_at=(3,))
    sim = dmft.simulate(prob, d=100, delta=2.0, lr=0.2, steps=steps, seeds=2, key=jax.random.key(1))
    for obj in (traj, sim):
        assert obj.train_error.shape == (steps + 1,)
        assert obj.test_error.shape == (steps + 1,)
        assert obj.overlap.shape == (steps + 1, 1, 1)
        assert obj.gram.shape == (steps + 1, 1, 1)
    s = traj.samples[3]
    assert s["r"].shape == (512, 1) and s["z"].shape == (512, 1) and s["y"].shape == (512,)
    assert traj.C_theta.shape == (steps + 1, steps + 1, 1, 1)
    # kernels are symmetric, R_θ(t,t) = I, and C_θ(0,0) = Q_0
    C = np.asarray(traj.C_theta)
    np.testing.assert_allclose(C, np.swapaxes(np.swapaxes(C, 0, 1), 2, 3), atol=1e-12)
    np.testing.assert_allclose(np.asarray(traj.R_theta)[np.arange(steps + 1), np.arange(steps + 1)], 1.0)
    assert C[0, 0, 0, 0] == pytest.approx(0.5)


def test_sweep_equals_individual_solves_and_single_compile():
    prob = phase_retrieval()
    deltas = jnp.array([2.0, 3.0, 5.0])
    sw = dmft.solve_sweep(prob, deltas, lr=0.05, steps=8, paths=256, key=jax.random.key(2))
    for i, dv in enumerate(np.asarray(deltas)):
        one = dmft.solve(prob, delta=float(dv), lr=0.05, steps=8, paths=256, key=jax.random.key(2))
        # batched (vmapped) kernels round differently: agreement measured at 2e-10 relative
        np.testing.assert_allclose(np.asarray(sw.train_error[i]), np.asarray(one.train_error), rtol=1e-8)
        np.testing.assert_allclose(np.asarray(sw.gram[i]), np.asarray(one.gram), rtol=1e-8)
    # new δ values reuse the compiled solver (δ is traced, not static)
    from dmft.solve import _solve_core

    before = _solve_core._cached._cache_size() if hasattr(_solve_core, "_cached") else None
    dmft.solve(prob, delta=7.5, lr=0.05, steps=8, paths=256, key=jax.random.key(2))
    dmft.solve(prob, delta=9.25, lr=0.07, steps=8, paths=256, key=jax.random.key(2))
    if before is not None:
        assert _solve_core._cached._cache_size() == before


def test_constant_schedule_equals_scalar_lr():
    prob = phase_retrieval()
    a = dmft.solve(prob, delta=4.0, lr=0.05, steps=6, paths=256, key=jax.random.key(4))
    b = dmft.solve(prob, delta=4.0, lr=jnp.full((6,), 0.05), steps=6, paths=256, key=jax.random.key(4))
    np.testing.assert_allclose(np.asarray(a.gram), np.asarray(b.gram), rtol=1e-12)


def test_trained_second_layer_moves_and_matches_gd():
    """m = 2 tanh student with a trained second layer: a^t from DMFT vs GD (d = 300, 6
    seeds). Measured |Δa| at t = 10: 0.004–0.01 with paths = 4096; s.e. of GD ~0.004."""
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(z[0]) + 0.1 * e[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([0.5, 0.2]), train_second_layer=True),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.array([[0.3, 0.0]])),
    )
    tr = dmft.solve(prob, delta=2.0, lr=0.2, steps=10, paths=4096, key=jax.random.key(0))
    sim = dmft.simulate(prob, d=300, delta=2.0, lr=0.2, steps=10, seeds=6, key=jax.random.key(9))
    moved = np.abs(np.asarray(tr.second_layer[-1] - tr.second_layer[0]))
    assert moved.max() > 0.05
    assert np.abs(np.asarray(tr.second_layer[-1] - sim.second_layer[-1])).max() < 0.04


def test_gamma_adjoint_equals_forward_jacobian_recursion():
    """Γ(t, s) = E[G^t P(t, s)] from the blocked adjoint sweep against a direct NumPy forward
    recursion of THEORY eq. (6): P(t,s) = 1{t=s} − (1/δ) Σ_{s≤s'<t} η_{s'} R(t,s'+1) G^{s'} P(s',s)."""
    from dmft.solve import _gamma_row

    rng = np.random.default_rng(0)
    N, T, m, delta = 7, 13, 2, 2.5
    Tp = T + 1
    G = rng.normal(size=(N, Tp, m, m))
    R = np.tril(np.ones((Tp, Tp)))[..., None, None] * rng.normal(size=(Tp, Tp, m, m)) * 0.5
    eta = rng.uniform(0.05, 0.2, size=Tp)
    for t in (0, 1, 5, 8, 9, 13):
        P = np.zeros((N, Tp, Tp, m, m))
        for tt in range(t + 1):
            for s in range(tt + 1):
                acc = np.broadcast_to(np.eye(m), (N, m, m)).copy() if tt == s else np.zeros((N, m, m))
                for sp in range(s, tt):
                    acc -= (eta[sp] / delta) * np.einsum("ij,njk,nkl->nil", R[tt, sp + 1], G[:, sp], P[:, sp, s])
                P[:, tt, s] = acc
        ref = np.einsum("nij,nsjk->sik", G[:, t], P[:, t]) / 1.0
        got = np.asarray(_gamma_row(t, jnp.asarray(G), jnp.asarray(R), jnp.asarray(eta), delta, block=4))
        np.testing.assert_allclose(got[: t + 1], ref[: t + 1], rtol=1e-10, atol=1e-12)


def test_chol_jitter_is_read_at_call_time():
    """``dmft.solve.CHOL_JITTER`` reaches the compiled program on every call (a static argument),
    not only at the first trace: changing it changes the result, restoring it restores the result
    bit for bit (it was silently ignored after the first compilation before)."""
    import sys

    S = sys.modules["dmft.solve"]   # the module (``dmft.solve`` the attribute is the function)

    prob = phase_retrieval(width=2)
    run = lambda: np.asarray(dmft.solve(prob, delta=2.0, lr=0.1, steps=6, paths=64, key=jax.random.key(0)).train_error)
    base = run()
    old = S.CHOL_JITTER
    try:
        S.CHOL_JITTER = 1e-2
        big = run()
    finally:
        S.CHOL_JITTER = old
    assert np.max(np.abs(big - base)) > 1e-6
    np.testing.assert_array_equal(run(), base)
    kw = np.asarray(dmft.solve(prob, delta=2.0, lr=0.1, steps=6, paths=64, key=jax.random.key(0),
                               chol_jitter=1e-2).train_error)
    np.testing.assert_array_equal(kw, big)                     # the keyword is the same knob
    with pytest.raises(dmft.DMFTError, match="chol_jitter"):
        dmft.solve(prob, delta=2.0, lr=0.1, steps=6, paths=64, key=jax.random.key(0), chol_jitter=0.5)


def test_factor_residual_is_the_jitter_and_breakdowns_are_reported():
    """The block-Cholesky factor that builds the fields ω reproduces C_θ: the in-solver residual
    max_s |C_θ(t,s) − Σ L(t,s')L(s,s')ᵀ| (relative) equals the relative jitter on the diagonal and
    nothing else (a wrong transpose or a stale row would make it O(1)). A residual far above
    the jitter is reported as a warning naming the step and the fix."""
    import dataclasses
    import sys
    import warnings

    from dmft.activations import gelu

    S = sys.modules["dmft.solve"]

    prob = phase_retrieval(width=2, act=gelu)
    kw = dict(delta=2.0, lr=0.1, steps=30, paths=128, key=jax.random.key(0))
    for j in (1e-13, 1e-8):
        tr = dmft.solve(prob, chol_jitter=j, **kw)
        fr = np.asarray(tr.factor_residual)
        assert tr.setting["chol_jitter"] == j and tr.setting["field_factor"] == "block-cholesky"
        assert np.all(fr <= 1.05 * j + 1e-15) and np.max(fr) >= 0.95 * j, (j, fr)
    bad = dataclasses.replace(tr, factor_residual=tr.factor_residual.at[17:].set(1e-3))
    with pytest.warns(RuntimeWarning, match="from step 17 .*chol_jitter=1e-8"):
        S.warn_if_unfaithful(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S.warn_if_unfaithful(tr)   # healthy: silent
    sw = dmft.solve_sweep(prob, [1.5, 2.0], 0.1, 12, 64, jax.random.key(0))
    bad_sw = dataclasses.replace(sw, factor_residual=sw.factor_residual.at[1, 5:].set(1e-3))
    assert S._factor_breakdowns(bad_sw)[0] is None and S._factor_breakdowns(bad_sw)[1][0] == 5
    with pytest.warns(RuntimeWarning, match=r"sweep point 1\): from step 5"):
        S.warn_if_unfaithful(bad_sw)


def test_test_samples_estimator_matches_the_closed_form():
    """``test_samples``: the test error on a test set of its own (fixed across time, as dmft.simulate's).
    Linear student, square loss, y = z + 0.3 ε: given the solve's own M^t and C_θ(t,t) the test error is
    ((1 − M^t)² + 0.09 + C_θ(t,t))/2 exactly; ℓ = s² χ²₁/2 there, so the estimate's Monte Carlo s.e. is
    s²/√(2N) and 4 s.e. is the tolerance. The training side is untouched (bit-identical train error), the
    default estimator is unchanged and unrecorded, and the sweep takes the option too."""
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.3 * e[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss, ridge=0.1,
        init=dmft.Init(q0=jnp.array([[0.5]]), overlap=jnp.array([[0.2]])),
    )
    N = 200_000
    base = dmft.solve(prob, 2.0, 0.2, 10, 1024, jax.random.key(3))
    tr = dmft.solve(prob, 2.0, 0.2, 10, 1024, jax.random.key(3), test_samples=N)
    np.testing.assert_array_equal(tr.train_error, base.train_error)
    assert "test_samples" not in base.setting and tr.setting["test_samples"] == N
    s2 = (1 - np.asarray(tr.overlap)[:, 0, 0]) ** 2 + 0.09 + np.asarray(tr.C_theta)[np.arange(11), np.arange(11), 0, 0]
    err = np.abs(np.asarray(tr.test_error) - s2 / 2)
    assert np.all(err < 4 * s2 / np.sqrt(2 * N)), (err, s2 / np.sqrt(2 * N))
    sw = dmft.solve_sweep(prob, jnp.array([2.0, 3.0]), 0.2, 10, 1024, jax.random.key(3), test_samples=N)
    np.testing.assert_allclose(sw.test_error[0], tr.test_error, rtol=1e-12)
    with pytest.raises(dmft.ProblemError, match="test_samples"):
        dmft.solve(prob, 2.0, 0.2, 10, 1024, jax.random.key(3), test_samples=0)


def test_joint_sign_flip_groups():
    """Hard directions beyond coordinate-wise even links (user audit): y = z1·z2 and y = (z1 + z2)² are
    invariant only under the joint flip of (z1, z2), y = z·ε under (z, ε) → −(z, ε). Detected as groups;
    at M⁰ = 0 the overlap stays exactly 0 (it drifted like paths^-1/2 before), and once z1 is learned
    (M⁰ row z1 ≠ 0) z2 is easy: its row must move as in GD (declaring hard=(0, 1) froze it at 0, train
    error 0.181 against GD's 0.067)."""
    mk = lambda link, k, nd, hard=None: dmft.Teacher(link=link, k=k, noise_dim=nd, hard=hard)
    assert mk(lambda z, e: z[0] * z[1] + 0.1 * e[0], 2, 1).symmetry_groups() == ((0, 1),)
    assert mk(lambda z, e: (z[0] + z[1]) ** 2, 2, 0).hard_coordinates() == (0, 1)
    assert mk(lambda z, e: z[0] * e[0], 1, 1).symmetry_groups() == ((0,),)
    assert mk(lambda z, e: z[0] + z[1] ** 2, 2, 0).symmetry_groups() == ((1,),)
    assert mk(lambda z, e: z[0] * z[1] + z[2], 3, 0).hard_groups() == ((0, 1),)
    assert mk(lambda z, e: z[0] + z[1], 2, 0, hard=(1,)).unverified_hard() == (1,)

    def prob(M0, hard=None):
        return dmft.Problem(teacher=mk(lambda z, e: z[0] * z[1] + 0.1 * e[0], 2, 1, hard),
                            student=dmft.TwoLayer(activation=lambda r: r ** 2, width=2, second_layer=jnp.array([0.5, -0.5])),
                            init=dmft.Init(q0=0.25 * jnp.eye(2), overlap=jnp.asarray(M0)))
    cold = dmft.solve(prob([[0.0, 0.0], [0.0, 0.0]]), 3.0, 0.1, 12, 2048, jax.random.key(0))
    assert float(jnp.max(jnp.abs(cold.overlap))) == 0.0 and cold.setting["symmetry_groups"] == [[0, 1]]
    warm = [[0.3, 0.3], [0.0, 0.0]]
    for hard in (None, (0, 1)):
        tr = dmft.solve(prob(warm, hard), 3.0, 0.1, 30, 8192, jax.random.key(1))
        sim = dmft.simulate(prob(warm), d=1000, delta=3.0, lr=0.1, steps=30, seeds=6, key=jax.random.key(2))
        # DMFT 0.41 (key sd 0.005), GD 0.40 ± 0.005 at d = 1000: the failure mode was exactly 0
        assert abs(float(tr.overlap[30, 1, 0]) - float(sim.overlap[30, 1, 0])) < 0.04
        assert float(tr.overlap[30, 1, 0]) > 0.3
