"""Tests of flows/ (THEORY §5). Small sizes; every tolerance is justified by a measured number."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows


# --- shared problems -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sq_problem():
    """Width-4 square-activation two-layer net (L = 3), d = 5, n = 20 (THEORY §5 toy)."""
    key = jax.random.PRNGKey(1)
    X = jax.random.normal(key, (20, 5))
    y = X[:, 0] * X[:, 1] + 0.5 * X[:, 2] ** 2
    return flows.two_layer("square", width=4), X, y


@pytest.fixture(scope="module")
def diag_problem():
    """Diagonal linear net (L = 2) with orthonormal X columns: fully closed form."""
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 4)))
    c = np.array([2.0, 1.0, 0.5, -0.3])
    return flows.diagonal_linear(), jnp.asarray(Q), jnp.asarray(Q @ c), c


@pytest.fixture(scope="module")
def sq_limit(sq_problem):
    m, X, y = sq_problem
    w0 = m.init(jax.random.PRNGKey(3), 5)
    ts = np.linspace(-0.02, 0.03, 11)
    return w0, flows.limiting_trajectory(m, w0, X, y, loss="square", deltas=(1e-2, 1e-3, 1e-4), ts=ts)


# --- 1. models and degree ------------------------------------------------------------------------
def test_degrees_measured_equal_declared(sq_problem):
    _, X, _ = sq_problem
    cases = [(flows.two_layer("square", 3), 3.0), (flows.two_layer("relu_p", 3, p=2.0), 3.0),
             (flows.feedforward((3, 2), "square"), 7.0), (flows.deep_linear(3, 2), 3.0),
             (flows.two_layer("leaky_relu", 3, p=3.0, alpha=0.2), 4.0), (flows.diagonal_linear(), 2.0)]
    for m, L in cases:
        assert flows.check_degree(m, X) == L      # measured to ~1e-12 (log ratios in float64)


def test_non_homogeneous_and_relu_refused(sq_problem):
    _, X, y = sq_problem
    like = (jnp.zeros((5, 3)), jnp.zeros(3))
    tanh_net = flows.Model(fn=lambda p, X: jnp.tanh(X @ p[0]) @ p[1], params_like=like)
    with pytest.raises(flows.FlowError, match="not positively homogeneous"):
        flows.check_degree(tanh_net, X)
    relu = flows.two_layer("relu", 3)
    with pytest.raises(flows.FlowError, match="experimental=True"):
        flows.kkt_points(relu, X, y, starts=4)
    assert issubclass(flows.FlowError, ValueError)
    with pytest.raises(flows.FlowError, match="params_like"):
        flows.kkt_points(lambda p, X: X @ p, X, y, starts=4)


def test_label_vectors():
    y = jnp.array([1.0, -1.0, 1.0])
    assert np.allclose(flows.label_vector("square", y), y)
    assert np.allclose(flows.label_vector("logistic", y), y / 2)   # ln(1+e^{-py}): e_y = y/2
    assert np.allclose(flows.label_vector(lambda p, t: (p - t) ** 4 / 4 + (p - t) ** 2, y), y ** 3 + 2 * y)   # −∂_p at p = 0


# --- 2. KKT points against closed forms ------------------------------------------------------
def test_kkt_square_net_closed_form(sq_problem):
    """Single-neuron optimum: N = 2λ1/(3√3), Δ = 2(λ1 − λ2)/√3 (M = Σ y_i x_i x_iᵀ), one unit active;
    second point v < 0 on the most negative eigenvector: N = 2|λ_min|/(3√3)."""
    m, X, y = sq_problem
    res = flows.kkt_points(m, X, y, loss="square", starts=64, key=jax.random.PRNGKey(0))
    lam = np.linalg.eigvalsh(np.asarray((X.T * y) @ X))
    best = res[0]
    # measured: N rel. err 1e-15, Δ rel. err 4e-16, residual 6e-10 (ascent tol 1e-9)
    assert best.value == pytest.approx(2 * lam[-1] / (3 * np.sqrt(3)), rel=1e-8)
    assert best.gap == pytest.approx(2 * (lam[-1] - lam[-2]) / np.sqrt(3), rel=1e-6)
    assert best.residual < 1e-8 and best.second_order_positive
    assert best.active_units[0].sum() == 1 and best.n_nonzero == 6
    assert res[1].value == pytest.approx(2 * abs(lam[0]) / (3 * np.sqrt(3)), rel=1e-8)
    assert sum(r.fraction for r in res) == pytest.approx(1.0)
    assert res.info["collapsed"] == 0


def test_kkt_diagonal_linear_closed_form(diag_problem):
    m, X, y, c = diag_problem
    res = flows.kkt_points(m, X, y, starts=32, key=jax.random.PRNGKey(1))
    a = np.sort(np.abs(c))[::-1]
    assert res[0].value == pytest.approx(a[0] / 2, rel=1e-9)          # N = |c1|/2
    assert res[0].gap == pytest.approx(a[0] - a[1], rel=1e-6)          # Δ = |c1| − |c2|
    u, v = res[0].direction
    assert np.allclose(np.abs(u), [2 ** -0.5, 0, 0, 0], atol=1e-8)


def test_collapsing_start_refused(diag_problem):
    m, X, y, c = diag_problem
    e1 = jnp.zeros(4).at[0].set(1.0)
    with pytest.raises(flows.FlowError, match="params0"):     # KKT point with N = −c1/2 < 0
        flows.limiting_trajectory(m, (e1, -e1), X, y, deltas=(1e-2, 1e-3))
    with pytest.raises(flows.FlowError, match="collapsed"):
        flows.kkt_points(m, X, jnp.zeros_like(y), starts=8)


# --- 4. limiting trajectory ------------------------------------------------------------------
def test_limiting_l2_closed_form(diag_problem):
    """From δw*, w* = (e1, e1)/√2: β1 = a², a² = c/(1 + (2c/δ² − 1)e^{−2ct}); T_δ = ln(1/δ)/c,
    p: β1(t) = c/(1 + 2c e^{−2ct})."""
    m, X, y, c = diag_problem
    e1 = jnp.zeros(4).at[0].set(1.0)
    ts = np.linspace(-1.0, 2.0, 7)
    res = flows.limiting_trajectory(m, (e1, e1), X, y, deltas=(1e-2, 1e-3, 1e-4), ts=ts)
    assert res.degree == 2.0
    assert np.allclose(res.shifts, np.log(1 / res.deltas) / 2.0, rtol=1e-12)   # N = c1/2 = 1
    u, v = res.paths
    beta = np.asarray(u * v)[..., 0]
    d = res.deltas[:, None]
    exact = 2.0 / (1 + (4.0 / d ** 2 - 1) * d ** 2 * np.exp(-4.0 * ts))
    assert np.max(np.abs(beta - exact)) < 1e-7                    # measured 2e-9 (rtol 1e-10)
    assert np.max(np.abs(np.asarray(res.p[0] * res.p[1])[:, 0] - 2 / (1 + 4 * np.exp(-4 * ts)))) < 1e-6


def test_limiting_l2_generic_start_rate(diag_problem):
    """Generic w_0: sup-error vs p falls like δ^{Δ/(2N)} = δ^{0.5} (measured 0.504 on 1e-2..1e-5)."""
    m, X, y, c = diag_problem
    w0 = m.init(jax.random.PRNGKey(2), 4)
    res = flows.limiting_trajectory(m, w0, X, y, deltas=(1e-2, 1e-3, 1e-4), ts=np.linspace(-1, 2, 7))
    assert res.exponent_heuristic == pytest.approx(0.5)
    assert res.exponent_bound == pytest.approx(1 / 9)              # Δ/(Δ+8N) = 1/(1+4)… = 1/9
    assert abs(res.exponent - 0.5) < 0.05                          # measured 0.504
    assert np.all(res.diffs[1:] < 0.5 * res.diffs[:-1])             # geometric: ratio 0.31


def test_contract_and_l3_convergence(sq_problem, sq_limit):
    m, X, y = sq_problem
    w0, res = sq_limit
    assert res.degree == 3.0
    W, v = res.paths
    assert W.shape == (3, 11, 5, 4) and v.shape == (3, 11, 4) and res.shifts.shape == (3,)
    lam = np.linalg.eigvalsh(np.asarray((X.T * y) @ X))
    assert res.kkt.value == pytest.approx(2 * lam[-1] / (3 * np.sqrt(3)), rel=1e-8)
    # shifts: T*(w0)/δ  (L = 3), exactly 10× per decade
    assert np.allclose(res.shifts[1:] / res.shifts[:-1], 10.0, rtol=1e-12)
    # measured errors vs p: 1.1e-2, 1.2e-3, 1.2e-4 (exponent 0.99); diffs ratio ≈ 0.10
    assert np.all(res.diffs[1:] < 0.3 * res.diffs[:-1])
    assert 0.8 < res.exponent < 1.2
    # support part converges like δ^{Δ/(LN)} (heuristic 0.744, measured 0.77), zero part like δ^1
    assert abs(res.exponent_support - res.exponent_heuristic) < 0.1
    assert abs(res.exponent_zero - 1.0) < 0.1


def test_l3_time_shift_formula_from_wstar(sq_problem, sq_limit):
    """Started on w*, T_δ = 1/(L(L−2)Nδ^{L−2}) aligns the runs: ‖ψ(T_δ + t)‖ agrees across δ
    and with the asymptote ‖p(t)‖ ≈ (3N(−t))^{-1}."""
    m, X, y = sq_problem
    _, ref = sq_limit
    ts = np.array([-0.1, -0.01, 0.0, 0.003])
    res = flows.limiting_trajectory(m, ref.kkt.direction, X, y, deltas=(1e-2, 1e-3), ts=ts, shift="formula")
    assert np.allclose(res.shifts, 1 / (3 * res.kkt.value * res.deltas), rtol=1e-12)
    # measured max |‖ψ_δ‖ − ‖p‖| = 1.7e-5 (δ=1e-2)
    assert np.max(np.abs(res.norms - res.p_norm[None])) < 1e-4
    assert res.p_norm[0] == pytest.approx(flows.p_asymptote(3, res.kkt.value, -0.1), rel=0.02)


# --- 3/5. first saddle and sparsity ----------------------------------------------------------
def test_first_saddle_and_zero_preserving(sq_problem, sq_limit):
    m, X, y = sq_problem
    w0, res = sq_limit
    zp = flows.zero_preserving_subset(m, res.kkt.direction, X, y)
    assert zp.n_zero == 18 and zp.n_removed == 0           # 3 inactive units × (5 + 1) weights
    # exact invariance: started at zero, the 18 weights stay exactly 0.0 through the flow
    mx, fr = flows.check_zero_preserved(m, w0, zp.mask, X, y, t1=30.0, delta=0.1)
    assert mx == 0.0 and fr.loss[-1] < 0.5 * fr.setting["loss0"]
    N = res.kkt.value
    eps = 1e-3
    Te = float(flows.time_shift(3, N, eps))
    s = flows.first_saddle(m, res.kkt.direction, X, y, t1=Te + 5.0, delta=eps, mask=zp.mask)
    # measured: loss 10.7585 (from 28.53), ‖∇𝓛‖ 2.4e-5 < gtol 2.9e-5, Hessian min ≈ −8e-14
    # (degenerate in the zero units, L = 3), residual NCF of the zero units 18.6 > 0 → saddle
    assert s.method.startswith("event") and s.loss == pytest.approx(10.7585, abs=1e-3)
    assert s.residual_ncf > 1.0 and s.is_saddle
    with pytest.raises(flows.FlowError, match="never escaped"):
        flows.first_saddle(m, w0, X, y, t1=5.0, delta=1e-3, mask=zp.mask)   # same compiled solve


def test_limiting_reference_is_the_kkt_point_the_flow_escapes_to():
    """A start where two units' NCF blow-up times are close (0.1178 vs 0.1208; user audit, session 44): the
    paths escape on unit 0. Before, the reference KKT point came from projected ascent from w_0, which jumped
    to unit 3's basin: errors 1.16 / 1.20 / 1.21, exponent −0.009. It is now polished from the NCF flow's own
    direction (flows.limiting.ncf_escape_direction): measured errors 0.074 / 0.0081 / 0.0008, exponent 0.98."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5))
    y = rng.standard_normal(30)
    model = flows.two_layer(activation="square", width=4)
    p0 = model.init(jax.random.PRNGKey(1), 5)
    res = flows.limiting_trajectory(model, p0, X, y, loss="square", deltas=(1e-2, 1e-3, 1e-4))
    v_path = np.asarray(res.paths[1][-1, -1])               # second layer of the δ = 1e-4 path at the last time
    assert np.argmax(np.abs(v_path)) == np.argmax(np.abs(np.asarray(res.kkt.direction[1]))) == 0
    assert res.errors[-1] < 0.01 and res.exponent > 0.8


def test_flows_bad_data_and_sizes_are_named():
    """User audit (session 44): width 0 was accepted, starts=0 gave a numpy reduction error, an X/y length
    mismatch a dot_general TypeError, NaN labels KKT points of value NaN."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((10, 3)), rng.standard_normal(10)
    with pytest.raises(flows.FlowError, match="width"):
        flows.two_layer(width=0)
    m = flows.two_layer(width=2)
    with pytest.raises(flows.FlowError, match="starts"):
        flows.kkt_points(m, X, y, starts=0)
    with pytest.raises(flows.FlowError, match="one label per row"):
        flows.kkt_points(m, X, y[:7])
    with pytest.raises(flows.FlowError, match="finite"):
        flows.kkt_points(m, X, np.full(10, np.nan))
    with pytest.raises(flows.FlowError, match=r"deltas=\[0.01, -0.001\]"):
        flows.limiting_trajectory(m, m.init(jax.random.PRNGKey(0), 3), X, y, deltas=(1e-2, -1e-3))
