"""Bad input gets a clear error naming the parameter (before any compilation)."""

import jax
import jax.numpy as jnp
import pytest

import dmft


def make(**kw):
    args = dict(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.ones(2)),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((1, 2))),
    )
    args.update(kw)
    return dmft.Problem(**args)


def test_delta_must_be_positive():
    with pytest.raises(dmft.ProblemError, match="delta"):
        dmft.solve(make(), delta=0.0, lr=0.1, steps=3, paths=128, key=jax.random.key(0))
    with pytest.raises(dmft.ProblemError, match="delta"):
        dmft.simulate(make(), d=50, delta=-1.0, lr=0.1, steps=3, seeds=1, key=jax.random.key(0))


def test_q0_not_positive_definite():
    with pytest.raises(dmft.ProblemError, match="positive definite"):
        make(init=dmft.Init(q0=jnp.array([[1.0, 2.0], [2.0, 1.0]]), overlap=jnp.zeros((1, 2))))


def test_shape_mismatches():
    with pytest.raises(dmft.ProblemError, match="overlap"):
        make(init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))))
    with pytest.raises(dmft.ProblemError, match="second_layer"):
        dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.ones(3))


def test_nan_link_or_activation_is_named():
    with pytest.raises(dmft.ProblemError, match="link"):
        p = make(teacher=dmft.Teacher(link=lambda z, e: jnp.log(z[0]), k=1, noise_dim=0))
        dmft.solve(p, delta=2.0, lr=0.1, steps=3, paths=128, key=jax.random.key(0))
    with pytest.raises(dmft.ProblemError, match="activation"):
        p = make(student=dmft.TwoLayer(activation=jnp.sqrt, width=2, second_layer=jnp.ones(2)))
        dmft.solve(p, delta=2.0, lr=0.1, steps=3, paths=128, key=jax.random.key(0))


def test_too_few_paths():
    with pytest.raises(dmft.ProblemError, match="paths"):
        dmft.solve(make(), delta=2.0, lr=0.1, steps=3, paths=8, key=jax.random.key(0))


def test_non_finite_kernels_name_the_step():
    """A quadratic student with a huge step overflows; the solver names the step."""
    p = make(student=dmft.TwoLayer(activation=lambda x: x**2, width=2, second_layer=jnp.ones(2)))
    with pytest.raises(dmft.DMFTError, match=r"step \d+"):
        dmft.solve(p, delta=2.0, lr=50.0, steps=40, paths=128, key=jax.random.key(0))
    tr = dmft.solve(p, delta=2.0, lr=50.0, steps=40, paths=128, key=jax.random.key(0), throw=False)
    assert int(tr.failed_step) >= 0


def test_non_finite_settings_and_link_mistakes_are_named():
    """Found by a user audit (session 44): these ran (JAX clamps out-of-range indices: z[1] with k = 1 read
    z[0]) or failed late with a message naming something else."""
    nan = float("nan")
    with pytest.raises(dmft.ProblemError, match="ridge"):
        make(ridge=nan)
    with pytest.raises(dmft.ProblemError, match="ridge"):
        make(ridge=float("inf"))
    with pytest.raises(dmft.ProblemError, match="Init.q0 has non-finite"):
        make(init=dmft.Init(q0=jnp.full((2, 2), nan), overlap=jnp.zeros((1, 2))))
    with pytest.raises(dmft.ProblemError, match="overlap"):
        make(init=dmft.Init(q0=jnp.eye(2), overlap=jnp.full((1, 2), nan)))
    with pytest.raises(dmft.ProblemError, match="second_layer"):
        make(student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([1.0, nan])))
    with pytest.raises(dmft.ProblemError, match="beyond their declared sizes"):
        make(teacher=dmft.Teacher(link=lambda z, e: z[0] + z[1] ** 2, k=1))
    with pytest.raises(dmft.ProblemError, match="noise_dim = 0"):
        make(teacher=dmft.Teacher(link=lambda z, e: z[0] + e[0], k=1, noise_dim=0))
    with pytest.raises(dmft.ProblemError, match="one label per sample"):
        make(teacher=dmft.Teacher(link=lambda z, e: jnp.stack([z[0], z[0]]), k=1))
    with pytest.raises(dmft.ProblemError, match="paths must be an int"):
        dmft.solve(make(), delta=2.0, lr=0.1, steps=3, paths=512.0, key=jax.random.key(0))


def test_sweep_lr_reading_is_explicit_when_ambiguous():
    """A 1-D lr of length steps == len(deltas) is one schedule or one lr per δ: refused unless
    lr_per_delta says which (user audit: it was silently read as a shared schedule)."""
    lin = make(student=dmft.TwoLayer(activation=lambda r: r, width=2, second_layer=jnp.ones(2)),
               teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.3 * e[0], k=1, noise_dim=1))
    deltas, lrs = [1.5, 2.0, 3.0], [0.1, 0.2, 0.3]
    with pytest.raises(dmft.ProblemError, match="lr_per_delta"):
        dmft.solve_sweep(lin, deltas, lrs, 3, 128, jax.random.key(0))
    per = dmft.solve_sweep(lin, deltas, lrs, 3, 128, jax.random.key(0), lr_per_delta=True)
    one = dmft.solve(lin, 1.5, 0.1, 3, 128, jax.random.key(0))
    assert abs(float(per.train_error[0, -1]) - float(one.train_error[-1])) < 1e-12
    assert per.setting["lr_axis"] == "per delta" and per.setting["key"] == one.setting["key"] == [0, 0]
    shared = dmft.solve_sweep(lin, deltas, lrs, 3, 128, jax.random.key(0), lr_per_delta=False)
    assert shared.setting["lr_axis"] == "shared"
    with pytest.raises(dmft.ProblemError, match="lr_per_delta=True needs"):
        dmft.solve_sweep(lin, deltas, 0.1, 3, 128, jax.random.key(0), lr_per_delta=True)
    with pytest.raises(dmft.ProblemError, match="test_samples"):
        dmft.simulate(lin, d=20, delta=2.0, lr=0.1, steps=2, seeds=1, key=jax.random.key(0), test_samples=0)


def test_response_jumps_are_flagged():
    """ReLU's σ'' is a Dirac mass that autodiff drops: the DMFT response misses it (measured bias against
    GD: docs/dmft.md, "Activations and losses with kinks"). Smooth maps and curvature steps pass."""
    from dmft.problem import JUMP_TOL, response_jumps

    relu = make(student=dmft.TwoLayer(activation=jax.nn.relu, width=2, second_layer=jnp.ones(2)))
    assert response_jumps(relu) > 0.3
    assert response_jumps(make()) < 1e-7                                            # tanh
    assert response_jumps(make(student=dmft.TwoLayer(activation=lambda r: jax.nn.relu(r) ** 2, width=2,
                                                     second_layer=jnp.ones(2)))) < JUMP_TOL  # a curvature step
    assert response_jumps(make(loss=lambda y, yh: jnp.abs(y - yh))) > 0.3
    with pytest.warns(RuntimeWarning, match="Dirac"):
        tr = dmft.solve(relu, 2.0, 0.1, 2, 128, jax.random.key(0))
    assert tr.setting["response_jump"] > 0.3


def test_stationary_below_interpolation_says_diverged():
    """OLS without ridge at δ < 1: (S3) has no positive solution (δ·E[rank D] <= m); the status names the
    interpolation (DIVERGED), not 'more iterations' (user audit). δ = 2 converges to V = 1/(δ − 1)."""
    from dmft.stationary import CONVERGED, DIVERGED

    ols = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.5 * e[0], k=1, noise_dim=1),
                       student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)))
    st = dmft.stationary_sweep(ols, [0.5, 2.0], paths=1024, max_iters=40)
    assert [int(c) for c in st.status] == [DIVERGED, CONVERGED]
    assert abs(float(st.response[1, 0, 0]) - 1.0) < 1e-6


def test_diverging_gd_is_reported():
    """Linear student, square loss, δ = 2: η·λ_max(Σ̂) = η(1 + δ^(-1/2))² > 2 at η = 1.9, so GD diverges
    collectively (no single path is unstable). The DMFT follows it faithfully and now says so."""
    lin = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.3 * e[0], k=1, noise_dim=1),
                       student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)))
    with pytest.warns(RuntimeWarning, match="grows without bound"):
        tr = dmft.solve_sweep(lin, [2.0, 4.0], 1.9, 40, 256, jax.random.key(0))
    assert float(tr.train_error[0, -1]) > 1e6
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dmft.solve(lin, 2.0, 0.5, 40, 256, jax.random.key(0))       # η(1 + 2^-1/2)² = 1.46 < 2: converges


def test_audit_session50_readout_probe_simulate_failures_and_complex_init():
    """Session 50 user audit. (1) A user readout reading a[2] with a of length 2 ran as a[1] (JAX clamps), in
    simulate and solve, silently; r[3] with width 3 ran as r[2]. (2) simulate returned NaN / inf errors with no
    flag: a diverging run (exp activation, lr = 5) and NaN labels on rare inputs (|z| > 3.5), which
    check_finite_maps' 256 draws miss; solve blamed lr for the latter. (3) A complex q0 was cast to its real part."""
    import warnings

    import numpy as np

    lin = dmft.Teacher(link=lambda z, e: z[0], k=1, noise_dim=0)
    with pytest.raises(dmft.ProblemError, match="readout indexes its inputs beyond their sizes"):
        dmft.Problem(teacher=lin, student=dmft.TwoLayer(
            readout=lambda r, a: a[0] * jnp.tanh(r[0]) + a[1] * jnp.tanh(r[1]) + a[2] * jnp.tanh(r[2]),
            width=3, second_layer=[1.0, -0.5]))
    with pytest.raises(dmft.ProblemError, match="readout indexes"):
        dmft.Problem(teacher=lin, student=dmft.TwoLayer(readout=lambda r, a: jnp.sum(a * jnp.tanh(r)) + r[3],
                                                        width=3, second_layer=jnp.ones(3)))
    with pytest.raises(dmft.ProblemError, match="one output per sample"):
        dmft.Problem(teacher=lin, student=dmft.TwoLayer(readout=lambda r, a: a * jnp.tanh(r), width=3,
                                                        second_layer=jnp.ones(3)))
    rare = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.where(z[0] > 3.5, jnp.nan, z[0]), k=1, noise_dim=0),
                        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)))
    with pytest.warns(RuntimeWarning, match="from step 0.*check_finite_maps"):
        sim = dmft.simulate(rare, d=400, delta=5.0, lr=0.1, steps=2, seeds=2, key=jax.random.key(0), test_samples=64)
    assert sim.setting["failure"]["seeds"] == [0, 1] and sim.setting["failure"]["first_step"] == [0, 0]
    with pytest.raises(dmft.DMFTError, match="lr is not the cause"):
        dmft.solve(rare, delta=5.0, lr=0.1, steps=2, paths=20000, key=jax.random.key(0))
    boom = dmft.Problem(teacher=lin, student=dmft.TwoLayer(activation=jnp.exp, width=1, second_layer=jnp.ones(1)))
    with pytest.warns(RuntimeWarning, match="GD diverges"):
        sim = dmft.simulate(boom, d=50, delta=2.0, lr=5.0, steps=4, seeds=2, key=jax.random.key(0), test_samples=64)
    assert sim.setting["failure"]["first_step"] == [1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = dmft.simulate(boom, d=50, delta=2.0, lr=0.01, steps=4, seeds=2, key=jax.random.key(0), test_samples=64)
    assert ok.setting["failure"] is None
    with pytest.raises(dmft.ProblemError, match="q0 must be real"):
        dmft.Init(q0=np.array([[1, 0.5j], [-0.5j, 1]]), overlap=np.zeros((1, 2)))


def test_audit_session50_shapes_and_dtypes_are_named():
    """Session 50 user audit: these reached jnp internals (div / einsum / broadcast / vmap / IndexError /
    NotImplementedError messages); now named ProblemError / SpectralError / ValueError before compiling."""
    import numpy as np

    import spectral

    P = make()
    key = jax.random.key(0)
    with pytest.raises(dmft.ProblemError, match="delta must be a scalar"):
        dmft.solve(P, delta=np.array([1.0, 2.0]), lr=0.1, steps=3, paths=512, key=key)
    with pytest.raises(dmft.ProblemError, match=r"lr must be a scalar or a schedule"):
        dmft.solve(P, delta=2.0, lr=np.full((2, 3), 0.1), steps=3, paths=512, key=key)
    for bad in (np.ones((2, 2)), []):
        with pytest.raises(dmft.ProblemError, match="non-empty 1-d grid"):
            dmft.solve_sweep(P, bad, 0.1, 3, 512, key)
    short = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + e[0], k=1, noise_dim=1,
                                              noise=lambda k, s: jax.random.normal(k, s[:-1])),
                         student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)))
    with pytest.raises(dmft.ProblemError, match="requested shape"):
        dmft.solve(short, delta=2.0, lr=0.1, steps=3, paths=512, key=key)
    with pytest.raises(dmft.ProblemError, match="float32 or jnp.float64"):
        dmft.simulate(P, d=20, delta=2.0, lr=0.1, steps=3, seeds=1, key=key, dtype=jnp.float16)
    X, y = jax.random.normal(key, (60, 20)), jnp.ones(60)
    W = jax.random.normal(jax.random.key(2), (20, P.m)) / 5
    a = P.student.second_layer
    with pytest.raises(spectral.SpectralError, match=r"W must have shape \(d, m\)"):
        spectral.dense_hessian(P, X, y, a, W.T)
    with pytest.raises(spectral.SpectralError, match="y must have shape"):
        spectral.finite_blocks(P, X, y[:50], a, W)
    hv = spectral.hessian_vector_product(P, X, y, a, W)
    with pytest.raises(ValueError, match="dim must be the shape of the operator's vectors"):
        spectral.lanczos_extreme(hv, 20 * P.m, 2, key)
    for kw in (dict(probes=0), dict(order=0), dict(order=-5)):
        with pytest.raises(ValueError, match="must be an int >= 1"):
            spectral.stochastic_lanczos_quadrature(hv, W.shape, key, **kw)


def test_rising_train_error_is_flagged_unless_a_ridge_makes_it_legitimate():
    """Session 55: a DMFT Monte Carlo key departed collectively (phase retrieval, quadratic student: train error
    0.32 → 2.8 while GD decreases), passing every per-path check. Without ridge GD with a stable step decreases its
    loss (descent lemma), so a rise of the train error above its running minimum is flagged; plateau wiggles below
    5 % are not, and with a ridge the objective is not the train error."""
    import warnings
    from types import SimpleNamespace

    import numpy as np

    from dmft.solve import rise_step, warn_if_rising

    t = np.arange(101)
    healthy = 0.2 + 0.6 * np.exp(-t / 20) + 1e-4 * np.sin(t)          # decreasing, tiny wiggles
    departed = healthy.copy()
    departed[60:] += 0.5 * np.sin(np.pi * (t[60:] - 60) / 40) ** 2     # a collective excursion from step 60
    first, at_min = rise_step(np.stack([healthy, departed]))
    assert first[0] == -1 and first[1] > 60 and at_min[1] >= 59
    free = SimpleNamespace(ridge=np.array(0.0), ridge_second=np.array(0.0))
    with pytest.warns(RuntimeWarning, match="train error rises"):
        warn_if_rising(SimpleNamespace(train_error=departed), free)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_rising(SimpleNamespace(train_error=healthy), free)
        warn_if_rising(SimpleNamespace(train_error=departed), SimpleNamespace(ridge=np.array(0.1), ridge_second=np.array(0.0)))
