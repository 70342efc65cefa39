"""DMFT (THEORY §1) against finite-d GD (THEORY §3), at CPU-test sizes.

Tolerances are z-scores against the combined Monte Carlo error, measured as follows
(2-core CPU, this file's settings): linear student, paths = 4096, six keys: DMFT sd of the
train error 0.018, test 0.013, overlap 0.011, gram 0.016; GD at d = 400, 8 seeds: s.e. of
the seed mean 0.008 (train), 0.013 (test), 0.008 (overlap), 0.025 (gram). Largest observed
|DMFT − GD| / combined s.e. over all 21 steps: 2.3. We allow 4.5 plus an O(1/d) allowance.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft

PATHS = 8192
KEYS = 3


def _zscore(dm_runs, sim_mean, sim_se):
    dm = np.asarray(dm_runs)
    se_dm = dm.std(0, ddof=1) / np.sqrt(dm.shape[0])
    diff = np.abs(dm.mean(0) - np.asarray(sim_mean))
    return diff / np.sqrt(se_dm**2 + np.asarray(sim_se) ** 2 + 1e-12)


@pytest.fixture(scope="module")
def linear_case():
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.5 * e[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=lambda x: x, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss,
        ridge=0.05,
        init=dmft.Init(q0=jnp.array([[1.0]]), overlap=jnp.array([[0.2]])),
    )
    trs = [dmft.solve(prob, delta=2.0, lr=0.3, steps=20, paths=PATHS, key=jax.random.key(i)) for i in range(KEYS)]
    sim = dmft.simulate(prob, d=400, delta=2.0, lr=0.3, steps=20, seeds=8, key=jax.random.key(100))
    return prob, trs, sim


@pytest.mark.parametrize("name", ["train_error", "test_error"])
def test_linear_errors_match_gd(linear_case, name):
    _, trs, sim = linear_case
    z = _zscore([getattr(t, name) for t in trs], getattr(sim, name), getattr(sim, name + "_stderr"))
    assert z.max() < 4.5, (name, z.max())


def test_linear_overlap_and_gram_match_gd(linear_case):
    _, trs, sim = linear_case
    z = _zscore([t.overlap[:, 0, 0] for t in trs], sim.overlap[:, 0, 0], sim.overlap_stderr[:, 0, 0])
    assert z.max() < 4.5, z.max()
    z = _zscore([t.gram[:, 0, 0] for t in trs], sim.gram[:, 0, 0], sim.gram_stderr[:, 0, 0])
    assert z.max() < 4.5, z.max()


def test_memory_term_matters(linear_case):
    """The train error is below the test error (overfitting through the reaction term); a
    solver without the memory term would give train ≈ test. The gap at t = 20 is ~0.1 in
    both DMFT and GD (measured), far above the Monte Carlo error."""
    _, trs, sim = linear_case
    gap_dm = float(trs[0].test_error[-1] - trs[0].train_error[-1])
    gap_sim = float(sim.test_error[-1] - sim.train_error[-1])
    assert gap_sim > 0.05
    assert abs(gap_dm - gap_sim) < 0.05


def test_simulate_matches_plain_numpy_gd():
    """The simulator itself against a plain NumPy GD loop (same data, same init)."""
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(2 * z[0]) + 0.3 * e[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([1.0, 0.5]), train_second_layer=True),
        loss=dmft.square_loss,
        ridge=0.01,
        ridge_second=0.02,
        init=dmft.Init(q0=0.5 * jnp.eye(2), overlap=jnp.array([[0.3, -0.1]])),
    )
    d, delta, lr, steps = 40, 2.0, 0.2, 5
    sim = dmft.simulate(prob, d=d, delta=delta, lr=lr, steps=steps, seeds=1, key=jax.random.key(3), return_weights=True)
    X, y = dmft.simulation_data(prob, sim, 0)
    X, y = np.asarray(X), np.asarray(y)
    kd, kw, _ = jax.random.split(sim.seed_keys[0], 3)
    W = np.asarray(dmft.init_weights(prob, kw, d))
    a = np.array([1.0, 0.5])
    n = X.shape[0]
    train = []
    for _ in range(steps):
        R = X @ W
        F = np.tanh(R) @ a
        res = F - y
        train.append(np.mean(0.5 * res**2))
        g = res[:, None] * a[None, :] * (1 - np.tanh(R) ** 2)
        ga = (res[:, None] * np.tanh(R)).mean(0)
        W = W - lr * (X.T @ g / n + 0.01 * W)
        a = a - lr * (ga + 0.02 * a)
    np.testing.assert_allclose(np.asarray(sim.train_error_seeds[0, :steps]), train, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(sim.W[0]), W, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(sim.a[0]), a, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(sim.overlap_seeds[0, -1]), W[:1], rtol=1e-9)


def test_padded_samples_give_the_same_gd():
    """simulate(n_pad=...) (zero-weight padding, one compile per δ grid) runs the same GD as
    an unpadded run on the same first n samples."""
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.ones(2) / 2, train_second_layer=True),
        loss=dmft.square_loss,
    )
    kw = dict(d=30, delta=2.0, lr=0.1, steps=5, seeds=1, key=jax.random.key(0), return_weights=True)
    padded = dmft.simulate(prob, n_pad=90, **kw)
    X, y = dmft.simulation_data(prob, padded, 0)
    assert X.shape == (60, 30)
    n = 60
    kd, kw_, _ = jax.random.split(padded.seed_keys[0], 3)
    W = np.asarray(dmft.init_weights(prob, kw_, 30))
    a = np.ones(2) / 2
    X, y = np.asarray(X), np.asarray(y)
    for _ in range(5):
        R = X @ W
        res = np.tanh(R) @ a - y
        g = res[:, None] * a[None] * (1 - np.tanh(R) ** 2)
        ga = (res[:, None] * np.tanh(R)).mean(0)
        W, a = W - 0.1 * X.T @ g / n, a - 0.1 * ga
    np.testing.assert_allclose(np.asarray(padded.W[0]), W, rtol=1e-9, atol=1e-12)


def test_weights_saved_along_one_run_equal_shorter_runs():
    """simulate(save_weights_at=...): the weights after t steps of one run are the final weights of
    a run with steps = t (same keys: same data and initialization), for W and a trained second
    layer; bad steps are rejected by name."""
    prob = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.ones(2) / 2, train_second_layer=True),
        loss=dmft.square_loss,
    )
    kw = dict(d=30, delta=2.0, lr=0.1, seeds=2, key=jax.random.key(1), freeze_hard=True)
    long = dmft.simulate(prob, steps=7, save_weights_at=(7, 0, 3), return_weights=True, **kw)
    assert long.W_at.shape == (2, 3, 30, 2) and long.setting["save_weights_at"] == [0, 3, 7]
    np.testing.assert_array_equal(np.asarray(long.W_at[:, 2]), np.asarray(long.W))
    for c, t in enumerate((0, 3)):
        short = dmft.simulate(prob, steps=max(t, 1), return_weights=True, **kw)
        if t == 0:   # the initial weights: the overlap record at step 0
            np.testing.assert_allclose(np.asarray(long.W_at[:, 0, :1]), np.asarray(short.overlap_seeds[:, 0]), rtol=0, atol=0)
            continue
        np.testing.assert_allclose(np.asarray(long.W_at[:, c]), np.asarray(short.W), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.asarray(long.a_at[:, c]), np.asarray(short.a), rtol=1e-12, atol=1e-15)
    for bad in ((8,), (2.5,), ("x",), (-1,)):
        with pytest.raises(dmft.ProblemError, match="save_weights_at"):
            dmft.simulate(prob, steps=7, save_weights_at=bad, **kw)
