"""Logistic loss ℓ(p, y) = ln(1 + e^{−py}) in flows (fast, < 15 s):
(a) the label vector / NCF convention e_y = −∂_pℓ(0, y) = y/2 (not rescaled to y);
(b) on linearly separable data the gradient flow diverges (saddle at infinity) and is detected
    through `diverge_norm`, while on non-separable data it stays bounded."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import flows

# separable by sign(x_0); the control flips one label so that no separator exists
X = jnp.array([[1.0, 0.3], [0.8, -0.5], [-1.2, 0.2], [-0.7, -0.4]])
Y_SEP = jnp.array([1.0, 1.0, -1.0, -1.0])
Y_MIX = jnp.array([1.0, -1.0, -1.0, 1.0])
R = 4.0          # diverge_norm: ‖w‖ > R stops the flow (measured: t ≈ 29 for the separable data)


def test_logistic_label_vector_is_half_y():
    y = jnp.array([1.0, -1.0, -1.0, 1.0, 1.0])
    e = np.asarray(flows.label_vector("logistic", y))
    assert np.allclose(e, np.asarray(y) / 2, atol=1e-14)
    # independent of autodiff: central difference of ln(1+e^{-py}) at p = 0
    h = 1e-6
    fd = -(np.log1p(np.exp(-h * np.asarray(y))) - np.log1p(np.exp(h * np.asarray(y)))) / (2 * h)
    assert np.allclose(e, fd, atol=1e-9)
    assert not np.allclose(e, np.asarray(y))                     # not rescaled to the square-loss e_y


def test_logistic_ncf_is_half_square_ncf():
    m = flows.diagonal_linear()
    u = m.init(jax.random.PRNGKey(3), 2)
    n_log = float(flows.make_ncf(m, X, Y_SEP, "logistic")(u))
    n_sq = float(flows.make_ncf(m, X, Y_SEP, "square")(u))
    assert n_log == pytest.approx(float(jnp.dot(Y_SEP / 2, m(u, X))), rel=1e-12)
    assert n_log == pytest.approx(0.5 * n_sq, rel=1e-12)
    assert abs(n_sq) > 1e-3                                       # the comparison is not 0 == 0


def _norm(params):
    return float(jnp.linalg.norm(ravel_pytree(params)[0]))


def test_logistic_separable_diverges_to_infinity():
    m = flows.diagonal_linear()
    w0 = m.init(jax.random.PRNGKey(0), 2)
    fr = flows.gradient_flow(m, w0, X, Y_SEP, loss="logistic", t1=1e3, delta=1e-3,
                             stop_at_saddle=True, diverge_norm=R)
    assert fr.code == "diverged", fr.message
    assert fr.t_final < 1e3                                       # stopped by the event, not the horizon
    assert _norm(fr.final) > R
    assert fr.loss[fr.ts <= fr.t_final].min() < 0.05 * fr.setting["loss0"]   # loss → 0 as ‖w‖ → ∞

    # control: non-separable labels, same loss and solver → bounded, no divergence
    fc = flows.gradient_flow(m, w0, X, Y_MIX, loss="logistic", t1=1e3, delta=1e-3,
                             stop_at_saddle=True, diverge_norm=R)
    assert fc.code != "diverged", fc.message
    assert _norm(fc.final) < R


def test_first_saddle_reports_at_infinity():
    m = flows.diagonal_linear()
    w0 = m.init(jax.random.PRNGKey(0), 2)
    sd = flows.first_saddle(m, w0, X, Y_SEP, loss="logistic", t1=1e3, delta=1e-3, diverge_norm=R,
                           n_save=200)   # same save grid as above: reuses the compiled solve
    assert sd.at_infinity
    assert sd.norm > R
    assert sd.flow.code == "diverged"
