"""Batched small linear algebra (dmft/small_linalg.py) against LAPACK (numpy), and the
per-path proximal Newton that uses it against a closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dmft.small_linalg import eigh_small, eigvalsh_small, solve_small


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
def test_jacobi_eigh_matches_lapack_including_degenerate_and_tiny_matrices(m):
    rng = np.random.default_rng(m)
    B = rng.standard_normal((300, m, m))
    A = B + np.swapaxes(B, 1, 2)
    A[:5] = np.eye(m)                              # fully degenerate
    A[5:10] = np.diag(np.arange(m)) * 1e-12        # tiny scale, already diagonal
    A[10:15] = 1e6 * A[10:15]                      # large scale
    w, U = jax.jit(eigh_small)(jnp.asarray(A))
    scale = np.abs(A).max(axis=(1, 2), keepdims=True) + 1e-300
    rec = np.einsum("nij,nj,nkj->nik", U, w, U)
    assert np.max(np.abs(rec - A) / scale) < 1e-13                       # A = U diag(w) Uᵀ
    assert np.max(np.abs(np.einsum("nji,njk->nik", U, U) - np.eye(m))) < 1e-13   # UᵀU = I
    ref = np.linalg.eigvalsh(A)
    assert np.max(np.abs(np.asarray(eigvalsh_small(jnp.asarray(A))) - ref) / scale[:, :, 0]) < 1e-13


@pytest.mark.parametrize("m", [1, 2, 4])
def test_gauss_jordan_solve_matches_lapack(m):
    rng = np.random.default_rng(10 + m)
    M = rng.standard_normal((200, m, m)) + 3 * np.eye(m)
    R = rng.standard_normal((200, m, 2))
    np.testing.assert_allclose(np.asarray(solve_small(jnp.asarray(M), jnp.asarray(R))), np.linalg.solve(M, R),
                               rtol=1e-10, atol=1e-12)


def _two_layer(activation, m):
    import dmft
    return dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0], k=1, noise_dim=0),
                        student=dmft.TwoLayer(activation=activation, width=m, second_layer=jnp.ones(m)))


def test_prox_newton_quadratic_case_equals_closed_form_and_its_jvp_finite_differences():
    """Linear readout, square loss: prox(b) = (V⁻¹ + aaᵀ)⁻¹ (V⁻¹b + y a) (m = 3: Jacobi sweeps)."""
    from dmft.prox import make_prox
    m, N = 3, 64
    rng = np.random.default_rng(0)
    problem = _two_layer(lambda r: r, m)
    y = jnp.asarray(rng.standard_normal(N))
    b = jnp.asarray(rng.standard_normal((N, m)))
    Bv = rng.standard_normal((m, m))
    V = jnp.asarray(Bv @ Bv.T / m + 0.5 * np.eye(m))
    a = jnp.ones(m)
    prox = make_prox(problem, y, newton_steps=20)
    r = np.asarray(prox(b, V, a, jnp.zeros((N, m))))
    Vi = np.linalg.inv(np.asarray(V))
    exact = np.linalg.solve(Vi + np.outer(a, a), (np.asarray(b) @ Vi + np.asarray(y)[:, None] * np.asarray(a)).T).T
    np.testing.assert_allclose(r, exact, rtol=1e-10, atol=1e-12)
    db = jnp.asarray(rng.standard_normal((N, m)))
    _, tangent = jax.jvp(lambda bb: prox(bb, V, a, jnp.zeros((N, m))), (b,), (db,))
    h = 1e-6
    fd = (np.asarray(prox(b + h * db, V, a, jnp.zeros((N, m)))) - np.asarray(prox(b - h * db, V, a, jnp.zeros((N, m))))) / (2 * h)
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=1e-6, atol=1e-8)


def test_prox_newton_nonconvex_tanh_same_steps_as_with_lapack_and_local_minima(monkeypatch):
    """Non-convex φ (tanh readout, large V): the Jacobi-based Newton takes the same steps as the
    former LAPACK ``eigh`` version (to rounding), and where it meets stationarity the point is a
    local minimum (∇²φ positive definite)."""
    import dmft.prox as P
    m, N = 2, 16
    rng = np.random.default_rng(1)
    problem = _two_layer(jnp.tanh, m)
    y = jnp.asarray(2.0 * rng.standard_normal(N))
    b = jnp.asarray(2.0 * rng.standard_normal((N, m)))
    V = jnp.asarray([[3.0, 1.0], [1.0, 2.0]])
    a = jnp.asarray([1.0, -0.5])
    r = np.asarray(P.make_prox(problem, y, newton_steps=40)(b, V, a, b))
    monkeypatch.setattr(P, "_eigh", jnp.linalg.eigh)
    r_lapack = np.asarray(P.make_prox(problem, y, newton_steps=40)(b, V, a, b))
    np.testing.assert_allclose(r, r_lapack, atol=1e-12)
    Vi, av = np.linalg.inv(np.asarray(V)), np.asarray(a)
    phi = lambda rr, i: 0.5 * (rr - b[i]) @ Vi @ (rr - b[i]) + 0.5 * (y[i] - jnp.tanh(rr) @ av) ** 2
    stationary = 0
    for i in range(N):
        g = jax.grad(phi)(jnp.asarray(r[i]), i)
        if np.max(np.abs(g)) < 1e-9:
            stationary += 1
            assert np.linalg.eigvalsh(np.asarray(jax.hessian(phi)(jnp.asarray(r[i]), i))).min() > 0
    assert stationary >= N - 2          # measured: 15 of 16 (one sample still descending after 40 steps)


def _batched_lapack_calls(hlo_text):
    import re
    calls = re.findall(r'custom_call @(lapack_\w+)\(.*?num_batch_dims = "(\d+)"', hlo_text)
    assert calls or "lapack" not in hlo_text          # the pattern still matches jaxlib's text format
    return [(name, int(nb)) for name, nb in calls if int(nb) > 0]


def test_per_path_programs_contain_no_batched_lapack_calls():
    """Guard for the deadlock documented in dmft/small_linalg.py: the prox Newton (with its JVP)
    and the dynamic DMFT step must not hand a per-path batch to a LAPACK kernel (only unbatched
    m×m / (T·m)² factorizations of kernels)."""
    import importlib

    from dmft.prox import make_prox
    solve_mod = importlib.import_module("dmft.solve")
    N = 4096
    problem = _two_layer(jnp.tanh, 2)
    prox = make_prox(problem, jnp.zeros(N), newton_steps=3)
    f = lambda b, V, a, r0: jax.jvp(lambda bb: prox(bb, V, a, r0), (b,), (b,))   # noqa: E731
    txt = jax.jit(f).lower(jnp.zeros((N, 2)), jnp.eye(2), jnp.ones(2), jnp.zeros((N, 2))).as_text()
    assert _batched_lapack_calls(txt) == []
    txt = jax.jit(lambda key: solve_mod._solve_core(problem, 2.0, 0.2, key, 3, N, (), (), 1e-10)).lower(
        jax.random.key(0)).as_text()
    assert _batched_lapack_calls(txt) == []


def test_stationary_program_contains_no_batched_lapack_calls():
    """Same guard for the stationary DMFT's compiled program (both solvers, m = 1 and 2). Session 52: its per-path
    Jacobian solve, the min-curvature eigenvalues and the interpolation test (two concurrent per-path ``eigvalsh``)
    called LAPACK; ``dmft.stationary`` at 65 536 paths (logistic + ridge, δ = 2) then hung in 4 of 6 fresh runs on
    the 2-core CPU (gdb: both pool workers in ``lapack_dsyevd_ffi`` → ``ParallelBatchMap`` → ``BlockingCounter::Wait``)."""
    import importlib

    import dmft
    st = importlib.import_module("dmft.stationary")
    N = 2048
    logit = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.sign(z[0] + 0.3 * e[0]), k=1, noise_dim=1),
                         student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)),
                         loss=dmft.logistic_loss, ridge=0.1)
    for problem in (logit, _two_layer(jnp.tanh, 2)):
        for solver in ("least-squares", "iterate"):
            start = st.default_start(problem, 2.0)
            txt = jax.jit(lambda key: st._stationary_core(problem, 2.0, key, start, 0.5, 1e-9, N, (), 5, 3, "jacobian",
                                                          True, solver)).lower(jax.random.key(0)).as_text()
            assert _batched_lapack_calls(txt) == [], (problem.m, solver)


def test_lapack_fallback_above_small_max_m_warns_where_the_batch_may_split():
    """Above SMALL_MAX_M the per-sample routines fall back to LAPACK: a batch that jaxlib may split over the CPU pool
    (the hang's condition) warns at trace time and names the way out; a small batch does not."""
    import warnings

    from dmft.small_linalg import SMALL_MAX_M, eigh_batched, eigvalsh_small, solve_batched

    m = SMALL_MAX_M + 1
    A = jnp.broadcast_to(jnp.eye(m), (4096, m, m))
    for f, args in ((eigh_batched, (A,)), (eigvalsh_small, (A,)), (solve_batched, (A, A[..., :1]))):
        with pytest.warns(RuntimeWarning, match="SMALL_MAX_M"):
            jax.eval_shape(f, *args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.eval_shape(eigh_batched, A[:16])                  # 16 · 9³ flops: below the split size
        jax.eval_shape(eigh_batched, jnp.broadcast_to(jnp.eye(SMALL_MAX_M), (4096, SMALL_MAX_M, SMALL_MAX_M)))
