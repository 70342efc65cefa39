"""dmft.trajectory_replica: a draw of the data with the same GD trajectory (dmft/replica.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft


def _retrace(P, X, y, W0, a0, eta, steps, hard):
    """Full-batch GD as dmft.simulate runs it (W and a), from W0, a0: the weights after 0 … steps updates."""
    n = X.shape[0]
    gr = jax.vmap(lambda yy, rr, aa: dmft.sample_grad(P, yy, rr, aa), in_axes=(0, 0, None))
    ga = jax.vmap(lambda yy, rr, aa: dmft.sample_grad_a(P, yy, rr, aa), in_axes=(0, 0, None))
    eta_a = eta * (P.student.second_layer_lr_scale if P.student.train_second_layer else 0.0)
    Ws, As, W, a = [W0], [a0], W0, a0
    for _ in range(steps):
        R = X @ W
        gW = X.T @ gr(y, R, a) / n + P.ridge * W
        if hard:
            gW = gW.at[jnp.asarray(hard)].set(0.0)
        W, a = W - eta * gW, a - eta_a * (jnp.sum(ga(y, R, a), axis=0) / n + P.ridge_second * a)
        Ws.append(W)
        As.append(a)
    return jnp.stack(Ws), jnp.stack(As)


PR = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
                  student=dmft.TwoLayer(activation=lambda r: r ** 2, width=2, second_layer=jnp.full(2, 0.5)),
                  loss=dmft.square_loss, init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((1, 2))))
TANH = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(2 * z[0]) + 0.3 * e[0], k=1, noise_dim=1),
                    student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([0.7, 0.4]),
                                          train_second_layer=True),
                    loss=dmft.square_loss, ridge=0.05,
                    init=dmft.Init(q0=0.5 * jnp.eye(2), overlap=jnp.array([[0.3, -0.1]])))


@pytest.mark.parametrize("P,freeze", [(PR, True), (TANH, False)], ids=["phase-retrieval-frozen-hard", "tanh-trained-a-ridge"])
def test_replica_retraces_the_trajectory(P, freeze):
    """GD on the replica from the same W⁰ (and a⁰) retraces W¹ … W^T and a¹ … a^T to rounding (1e-10), although
    the replica's data differ from the run's by O(1) outside the trajectory's span; the complement of the
    span is orthogonal to every step's per-sample gradients; two keys give two different replicas."""
    T, eta, d = 6, 0.2, 60
    sim = dmft.simulate(P, d=d, delta=2.5, lr=eta, steps=T, seeds=1, key=jax.random.key(3), freeze_hard=freeze,
                        return_weights=True, save_weights_at=tuple(range(T + 1)), test_samples=16)
    X, y = dmft.simulation_data(P, sim, 0)
    W_at, a_at = sim.W_at[0], sim.a_at[0]
    Xr = dmft.trajectory_replica(P, X, y, W_at, a_at, jax.random.key(7))
    hard = list(P.teacher.hard_coordinates()) if freeze else []
    Wr, Ar = _retrace(P, Xr, y, W_at[0], a_at[0], eta, T, hard)
    np.testing.assert_allclose(Wr, W_at, atol=1e-10)
    np.testing.assert_allclose(Ar, a_at, atol=1e-10)
    Wx, _ = _retrace(P, X, y, W_at[0], a_at[0], eta, T, hard)     # the loop is GD's: on X itself it is the run
    np.testing.assert_allclose(Wx, W_at, atol=1e-10)
    assert float(jnp.linalg.norm(Xr - X)) > 0.5 * float(jnp.linalg.norm(X))
    Qs = dmft.trajectory_span(P, W_at)
    assert Qs.shape == (d, P.k + P.m * (T + 1))
    np.testing.assert_allclose(Qs.T @ Qs, np.eye(Qs.shape[1]), atol=1e-10)
    np.testing.assert_allclose(X @ Qs, Xr @ Qs, atol=1e-10)
    g = dmft.step_gradients(P, X, y, W_at, a_at)
    perp = Xr - (Xr @ Qs) @ Qs.T
    assert float(jnp.abs(g.T @ perp).max()) < 1e-9
    Xr2 = dmft.trajectory_replica(P, X, y, W_at, a_at, jax.random.key(8))
    assert float(jnp.linalg.norm(Xr2 - Xr)) > 0.5 * float(jnp.linalg.norm(X))


def test_replica_errors_name_the_fix():
    X, y = jnp.zeros((20, 10)), jnp.zeros(20)
    with pytest.raises(dmft.ProblemError, match="W_at must be"):
        dmft.trajectory_replica(PR, X, y, jnp.zeros((10, 2)), jnp.full(2, 0.5), jax.random.key(0))
    with pytest.raises(dmft.ProblemError, match="fewer steps"):
        dmft.trajectory_replica(PR, X, y, jnp.zeros((6, 10, 2)), jnp.full(2, 0.5), jax.random.key(0))


def test_replica_rank_deficient_gradients_keep_every_fresh_degree_of_freedom():
    """Session 50 user audit: a unit with a_j = 0 (frozen) has zero step gradients; the QR of the (n, m·T) gradient
    matrix still returned m·T orthonormal columns, so the fresh part lost arbitrary directions (E‖X(I − P_S)‖²
    3700 ± 10 against the real data's 3843 ± 11 and (n − rank g)(d − rank S) = 3828). Now the replica's fresh
    part is exactly (I − P_g) G (I − P_S) with numpy's rank-revealing projectors, and the span has rank S columns."""
    P = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(2 * z[0]) + 0.3 * e[0], k=1, noise_dim=1),
                     student=dmft.TwoLayer(activation=jnp.tanh, width=2, second_layer=jnp.array([0.7, 0.0])),
                     loss=dmft.square_loss, ridge=0.05, init=dmft.Init(q0=0.5 * jnp.eye(2), overlap=jnp.array([[0.3, -0.1]])))
    T, d = 4, 40
    sim = dmft.simulate(P, d=d, delta=3.0, lr=0.2, steps=T, seeds=1, key=jax.random.key(11), return_weights=True,
                        save_weights_at=tuple(range(T + 1)), test_samples=16)
    X, y = dmft.simulation_data(P, sim, 0)
    W_at, a_at = sim.W_at[0], sim.a_at[0]
    g = np.asarray(dmft.step_gradients(P, X, y, W_at, a_at))
    B = np.concatenate([np.eye(d, 1), np.asarray(W_at).transpose(1, 0, 2).reshape(d, -1)], axis=1)

    def proj(A):
        U, s, _ = np.linalg.svd(A, full_matrices=False)
        U = U[:, s > 1e-10 * s[0]]
        return U @ U.T, U.shape[1]

    Pg, rg = proj(g)
    Ps, rs = proj(B)
    assert (rg, rs) == (4, 7)                       # 8 gradient columns, 11 span vectors
    assert dmft.trajectory_span(P, W_at).shape == (d, 7)
    key = jax.random.key(5)
    Xr = np.asarray(dmft.trajectory_replica(P, X, y, W_at, a_at, key))
    G = np.asarray(jax.random.normal(key, X.shape, X.dtype))
    want = np.asarray(X) @ Ps + (np.eye(X.shape[0]) - Pg) @ G @ (np.eye(d) - Ps)
    np.testing.assert_allclose(Xr, want, atol=1e-12)
    Wr, _ = _retrace(P, jnp.asarray(Xr), y, W_at[0], a_at[0], 0.2, T, ())
    np.testing.assert_allclose(Wr, W_at, atol=1e-12)
