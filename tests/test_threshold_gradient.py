"""Parametric families and the implicit derivative of the threshold (issue #7), checked against
closed forms and central finite differences of the same per-key threshold."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
from dmft import families as fam
from dmft.stationary import Warmup
from spectral.threshold_gradient import ThresholdGradientError, threshold_gradient


def link(z, e):
    return z[0] + z[1] ** 2 - 1.0


TEACHER = dmft.Teacher(link=link, k=2, noise_dim=0)


def family(p):
    """Staircase y = z1 + z2² − 1, m = 2, a = (1, 1/2) frozen, SoftplusT(β), PseudoHuber(w), ridge."""
    return dmft.Problem(teacher=TEACHER,
                        student=dmft.TwoLayer(activation=fam.SoftplusT(p["beta"]), width=2, second_layer=jnp.array([1.0, 0.5])),
                        loss=fam.PseudoHuber(p["width"]), ridge=p["ridge"],
                        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))))


def test_family_values():
    r = jnp.linspace(-3, 3, 13)
    c = np.array([0.3, -0.5, 0.2, 0.1, -0.05])
    np.testing.assert_allclose(fam.Hermite(c)(r), np.polynomial.hermite_e.hermeval(np.asarray(r), c), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fam.SoftplusT(1.0)(r), jax.nn.softplus(r), rtol=1e-14)
    np.testing.assert_allclose(fam.SiLUT(1.0)(r), jax.nn.silu(r), rtol=1e-14)
    np.testing.assert_allclose(fam.GeLUT(1.0)(r), dmft.activations.gelu(r), rtol=1e-12)
    np.testing.assert_allclose(fam.Combination([0.0, 1.0, 0.0, 0.0])(r), jax.nn.softplus(r), rtol=1e-14)
    # pseudo-Huber: ½e² near 0, ℓ'' = (1 + (e/w)²)^{-3/2} in (0, 1]
    ph = fam.PseudoHuber(2.0)
    e = jnp.linspace(-50, 50, 101)
    d2 = jax.vmap(jax.grad(jax.grad(lambda x: ph(0.0, x))))(e)
    np.testing.assert_allclose(d2, (1 + (e / 2.0) ** 2) ** -1.5, rtol=1e-12)
    assert abs(float(ph(0.0, 1e-3)) - 0.5e-6) < 1e-12


def test_prox_derivative_in_activation_parameter():
    """The prox's implicit rule now includes ∂g/∂θ: JVP in β equals central differences."""
    from dmft.prox import make_prox

    key = jax.random.key(0)
    y = jax.random.normal(key, (64,))
    b = jax.random.normal(jax.random.fold_in(key, 1), (64, 2))
    V = jnp.array([[0.7, 0.1], [0.1, 0.5]])

    def out(beta):
        pb = family(dict(beta=beta, width=jnp.asarray(1.0), ridge=jnp.asarray(0.3)))
        return make_prox(pb, y, 40)(b, V, pb.student.second_layer, b)

    _, jv = jax.jvp(out, (jnp.asarray(1.2),), (jnp.asarray(1.0),))
    h = 1e-5
    fd = (out(jnp.asarray(1.2 + h)) - out(jnp.asarray(1.2 - h))) / (2 * h)
    assert float(jnp.max(jnp.abs(jv))) > 1e-3  # the parameter matters
    np.testing.assert_allclose(jv, fd, rtol=1e-6, atol=1e-8)


def test_threshold_gradient_matches_finite_differences():
    """Per-key δ_NN (separation criterion) of the stationary route and dδ_NN/dβ by implicit
    differentiation vs central differences (h = 1e-4) of the same per-key root. Measured at 1024
    paths: relative difference 5e-9 (β), 2e-9 (width), 2e-8 (ridge) — bench_threshold_gradient;
    tolerance 1e-5 covers the root tolerance (1e-10·δ) amplified by 1/h."""
    params = dict(beta=jnp.asarray(1.0), width=jnp.asarray(1.0), ridge=jnp.asarray(0.3))
    kw = dict(key=jax.random.key(3), paths=512, warmup=Warmup(0.5, 60, 512), level="edge")
    res = threshold_gradient(family, params, delta0=1.3, **kw)
    assert res.cut == "edge" and res.margin_delta < 0 and 1.0 < res.delta_nn < 1.6
    assert abs(res.diagnostics["newton"][-1]["margin"]) < 1e-8
    h = 1e-4
    roots = [threshold_gradient(family, dict(params, beta=params["beta"] + s * h), delta0=res.delta_nn, start=res.state,
                                **kw).delta_nn for s in (1, -1)]
    fd = (roots[0] - roots[1]) / (2 * h)
    assert abs(fd) > 1e-2
    assert abs(float(res.gradient["beta"]) - fd) <= 1e-5 * abs(fd)
    # the derivative needs a converged fixed point: a clear error otherwise
    # (an unreachable residual_tol takes the same path as an LM solve stopped early, without
    # compiling the solve again for another max_iters)
    with pytest.raises(ThresholdGradientError, match="not converged"):
        threshold_gradient(family, params, delta0=1.3, residual_tol=1e-30, start=res.state, **kw)
    # far from the root Newton does not wander off: no sign change within δ0·(1 ± window) is an error
    with pytest.raises(ThresholdGradientError, match="no sign change"):
        threshold_gradient(family, params, delta0=3.0, window=0.1, start=res.state, **kw)


def test_dmft_differentiable_at_degenerate_kernels():
    """The dynamic route differentiates dmft.solve: its eigh-based steps carry Daleckii–Krein JVPs,
    finite at degenerate kernels (Q0 = I), consistent with finite differences."""
    from dmft.solve import _psd_part, _solve_core, _sqrt_factor

    A = jnp.array([[1.0, 0.3, 0.0], [0.3, 0.2, 0.1], [0.0, 0.1, -0.4]])
    dA = jnp.array([[0.2, -0.1, 0.3], [-0.1, 0.5, 0.0], [0.3, 0.0, 0.1]])
    _, jv = jax.jvp(_psd_part, (A,), (dA,))
    h = 1e-6
    np.testing.assert_allclose(jv, (_psd_part(A + h * dA) - _psd_part(A - h * dA)) / (2 * h), atol=1e-8)
    for C in (A @ A.T, jnp.eye(3)):  # generic and degenerate
        F, dF = jax.jvp(_sqrt_factor, (C,), (dA,))
        np.testing.assert_allclose(dF @ F.T + F @ dF.T, dA, atol=1e-10)   # d(F Fᵀ) = dC
        # the JVP is the derivative of the function evaluated (session 51 audit: the forward pass was V√Λ, the
        # JVP that of S V₀, so jvp of the test error disagreed with finite differences for m ≥ 2)
        np.testing.assert_allclose(dF, (_sqrt_factor(C + h * dA) - _sqrt_factor(C - h * dA)) / (2 * h), atol=1e-8)
    pb = fam.staircase_family("gelu-t")(dict(beta=jnp.asarray(1.0), width=jnp.asarray(1.0), ridge=jnp.asarray(0.2)))

    def errors(d):   # m = 2: train error, and the test error (fresh field through _sqrt_factor of C(t, t))
        tr = _solve_core(pb, d, jnp.asarray(0.5), jax.random.key(1), 10, 256, (1,), (), 1e-8)
        return jnp.stack([tr.train_error[-1], tr.test_error[-1]])

    _, jd = jax.jvp(errors, (jnp.asarray(2.0),), (jnp.asarray(1.0),))
    fd = (errors(jnp.asarray(2.0 + 1e-5)) - errors(jnp.asarray(2.0 - 1e-5))) / 2e-5
    assert np.all(np.isfinite(jd))
    np.testing.assert_allclose(jd, fd, rtol=0, atol=1e-5 * (1 + float(jnp.max(jnp.abs(fd)))))


def test_design_cli_rejects_bad_input_before_solving():
    from typer.testing import CliRunner

    from dmft.cli import app

    runner = CliRunner()
    for args, msg in ((["--family", "nope"], "--family"), (["--criterion", "steepest"], "--criterion"),
                      (["--ridge", "0"], "--ridge"), (["--paths", "30"], "--paths")):
        res = runner.invoke(app, ["design"] + args)
        assert res.exit_code == 2 and msg in res.output, (args, res.output)


def test_design_wiring_families_and_best_iterate(monkeypatch):
    """Session 49 user audit. Combination silently dropped a 5th coefficient (zip), SoftplusT(β = 0) gave inf and
    β < 0 a reflected function, normalize with c = 0 gave NaN: all refused. design(): an empty trainable or a
    parameter the threshold does not depend on (gradient exactly 0: init_scale on the stationary route) was
    "converged" → refused / "no-dependence"; the result was the last iterate though Adam can step over a sharp
    minimum (1.289 then 1.298) → `best_step`. A synthetic threshold replaces threshold_gradient (wiring only)."""
    import importlib
    import types

    sd = importlib.import_module("spectral.design")    # the module (spectral.design is also the function)

    for bad in (lambda: fam.Combination([0.0, 1.0, 0.0, 0.0, 5.0]), lambda: fam.SoftplusT(0.0),
                lambda: fam.SoftplusT(-1.0), lambda: fam.Combination([0.0] * 4, normalize=True),
                lambda: fam.Hermite(1.0)):
        with pytest.raises(ValueError):
            bad()

    def fake(family, p, *, delta0, key, warmup, start, **kw):     # δ(c) = 1 + (c − 0.3)², flat in "s"
        c = float(p["c"])
        return types.SimpleNamespace(delta_nn=1.0 + (c - 0.3) ** 2, state=None,
                                     gradient=dict(c=jnp.asarray(2 * (c - 0.3)), s=jnp.asarray(0.0)))

    monkeypatch.setattr(sd, "threshold_gradient", fake)
    kw = dict(delta0=1.0, keys=[jax.random.key(0), jax.random.key(1)], paths=256, warmup=None)
    with pytest.raises(ValueError, match="trainable is empty"):
        sd.design(None, dict(c=0.0), trainable=(), **kw)
    flat = sd.design(None, dict(c=0.0, s=1.0), trainable=("s",), **kw)
    assert flat.status == "no-dependence" and len(flat.history) == 1
    import optax

    r = sd.design(None, dict(c=0.0, s=1.0), trainable=("c",), steps=6, optimizer=optax.sgd(1.05), **kw)
    d = [h["delta_nn"] for h in r.history]     # c − 0.3 = −0.3 · (−1.1)^k: every step overshoots further
    assert r.best_step == 0 == int(np.argmin(d)) and r.best["delta_nn"] == min(d) < d[-1]
    assert "the best iterate is step 0" in r.message
    assert r.setting["key_data"] == [[0, 0], [0, 1]] and r.setting["family"] == "NoneType"


def test_dynamic_route_matches_margin_curve_at_its_jitter():
    """Session 50 user audit: the dynamic route's δ*(t) (1.24118) was not a root of margin_curve at the same key
    (root 1.24223, 2048 paths, t = 20): the route runs the DMFT at Cholesky jitter 1e-8, margin_curve at 1e-13.
    margin_curve / delta_star now take chol_jitter; at 1e-8 the route's root is a root of margin_curve."""
    T = dmft.Teacher(link=lambda z, e: z[0] + z[1] ** 2 - 1.0, k=2, noise_dim=0)

    def family(p):
        return dmft.Problem(teacher=T, student=dmft.TwoLayer(activation=fam.SoftplusT(p["beta"]), width=2,
                                                             second_layer=jnp.array([1.0, 0.5])),
                            loss=fam.PseudoHuber(1.0), ridge=0.3, init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))))

    from spectral.threshold_gradient import DYNAMIC_CHOL_JITTER
    from spectral.thresholds import margin_curve

    res = threshold_gradient(family, dict(beta=jnp.asarray(1.0)), delta0=1.2, key=jax.random.key(0), paths=256,
                             level="edge", route="dynamic", lr=0.5, steps=8)
    mc = margin_curve(family(dict(beta=1.0)), [res.delta_nn], lr=0.5, steps=8, times=(8,), paths=256,
                      key=jax.random.key(0), convention="strict", level="edge", chol_jitter=DYNAMIC_CHOL_JITTER)
    assert abs(float(mc.margin[0, 0])) < 1e-6        # margin slope ≈ −0.2 per unit δ: the roots agree to ~5e-6


def test_traced_family_parameter_out_of_range_gives_nan_not_another_function():
    """Session 51 audit: under vmap/jit a SoftplusT β < 0 silently gave the reflected function (concrete values are
    refused at construction). Now NaN for an invalid traced β / width; valid traced values and concrete ones are
    unchanged, and gradients through a valid β stay finite."""
    import dmft.families as fam

    r = jnp.linspace(-2.0, 2.0, 5)
    out = np.asarray(jax.vmap(lambda b: fam.SoftplusT(b)(r))(jnp.array([1.5, -1.0, 0.0])))
    np.testing.assert_allclose(out[0], np.asarray(jax.nn.softplus(1.5 * r) / 1.5), rtol=1e-15)
    assert np.all(np.isnan(out[1:]))
    assert np.all(np.isnan(np.asarray(jax.vmap(lambda w: fam.Huber(w)(0.3, r))(jnp.array([-1.0])))))
    assert np.all(np.isnan(np.asarray(jax.vmap(lambda w: fam.PseudoHuber(w)(0.3, r))(jnp.array([0.0])))))
    assert np.all(np.isnan(np.asarray(jax.vmap(lambda b: fam.SmoothReLUPower(2.0, b)(r))(jnp.array([-2.0])))))
    assert np.isfinite(float(jax.grad(lambda b: fam.SoftplusT(b)(r).sum())(1.5)))
    for bad in (lambda: fam.Huber(-1.0), lambda: fam.PseudoHuber(0.0), lambda: fam.SoftplusT(-1.0)):
        with pytest.raises(ValueError, match="must be finite and > 0"):
            bad()
