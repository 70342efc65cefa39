"""Bulk density, edges and hard-direction outliers of H = (1/n) Σ x_i x_iᵀ ⊗ D_i (m = 2,
bounded D law) against dense eigh at small d; bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import spectral

DELTA = 6.0


def toy_D(zeta, u):
    """Bounded m = 2 law with a negative spike along the hard coordinate ζ (D ∈ [−2, 1.5])."""
    al = 1.0 - 3.0 * jnp.tanh(jnp.maximum(zeta**2 - 1.0, 0.0))
    be = 0.3 * jnp.tanh(u[..., 0])
    ga = 1.0 + 0.5 * jnp.tanh(u[..., 1])
    return jnp.stack([jnp.stack([al, be], -1), jnp.stack([be, ga], -1)], -2)


@pytest.fixture(scope="module")
def law():
    k1, k2 = jax.random.split(jax.random.key(0))
    zeta = jax.random.normal(k1, (20000,))
    return spectral.law_from_samples(toy_D(zeta, jax.random.normal(k2, (20000, 2))), zeta=zeta, unbounded=())


@pytest.fixture(scope="module")
def dense():
    d = 300
    n = int(DELTA * d)
    kx, ku = jax.random.split(jax.random.key(101))
    X = jax.random.normal(kx, (n, d))
    H = spectral.dense_block_matrix(X, toy_D(X[:, 0], jax.random.normal(ku, (n, 2))))
    ev, V = np.linalg.eigh(np.asarray(H))
    return ev, np.sum(V[:2] ** 2, axis=0)       # θ* = e_1: rows 0..m-1 of the eigenvectors


def test_outlier_vs_dense(law, dense):
    ev, c2 = dense
    out = spectral.outlier(law, DELTA, "bottom")
    # theory (2·10^4 samples): λ0 = −1.276, cos² = 0.765 (2·10^5 samples: −1.2852, 0.7648).
    # dense d = 300/500, 2 seeds each: λ_min = −1.304, −1.223, −1.252, −1.294; cos² = 0.781,
    # 0.771, 0.739, 0.762 — finite-d spread ±0.05 in λ, ±0.03 in cos²; tolerances 0.1 / 0.06.
    assert bool(out.exists) and int(out.status) == spectral.SUCCESS
    assert abs(float(out.eigenvalue) - ev[0]) < 0.1
    assert abs(float(out.cosine2) - c2[0]) < 0.06
    assert float(out.eigenvalue) < float(out.edge) < ev[1] + 0.1   # edge above the outlier, near λ_2
    # the hard-direction weight of the eigenvector is concentrated on the outlier
    assert c2[0] > 10 * c2[1:5].max()
    top = spectral.outlier(law, DELTA, "top")                       # nothing on the top side
    assert not bool(top.exists) and int(top.status) == spectral.NO_OUTLIER and np.isnan(float(top.eigenvalue))
    # top edge (fold of the real branch) vs the largest dense eigenvalue: 2.066 vs 2.04–2.07 (d = 300–500)
    assert abs(float(top.edge) - ev[-1]) < 0.1


def test_density_vs_dense(law, dense):
    ev, _ = dense
    grid = jnp.linspace(-1.0, 2.4, 40)
    res = spectral.stieltjes(law, grid, DELTA, eps=2e-3)
    assert bool(jnp.all(res.converged)) and bool(jnp.all(jnp.imag(jnp.trace(res.S, axis1=-2, axis2=-1)) > 0))
    rho = np.asarray(res.density)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (rho[1:] + rho[:-1]) * np.diff(np.asarray(grid)))])
    emp = np.array([np.mean(ev <= g) for g in np.asarray(grid)])
    ks = np.max(np.abs(cdf - emp))
    # measured: KS = 0.0047, mass 0.998 at d = 300 (one seed; grid step 0.087, eps = 2e-3); tol 0.03
    assert abs(cdf[-1] - 1.0) < 0.01 and ks < 0.03


def test_vmap_over_delta(law):
    lam = jnp.array([0.5, 1.0])
    res = spectral.stieltjes(law, lam[:, None], jnp.array([4.0, 8.0])[None, :], eps=1e-2)
    assert res.density.shape == (2, 2) and bool(jnp.all(res.converged))
    one = spectral.stieltjes(law, 1.0, 8.0, eps=1e-2)
    assert abs(float(one.density) - float(res.density[1, 1])) < 1e-8


# ---------------------------------------------------------------------------------- bad input

def test_bad_inputs(law):
    D = np.asarray(law.D[:500])
    with pytest.raises(spectral.SpectralError, match="not symmetric"):
        spectral.law_from_samples(D + np.array([[0, 0.1], [0, 0]]))
    Dn = D.copy()
    Dn[3, 0, 0] = np.nan
    with pytest.raises(spectral.SpectralError, match="NaN"):
        spectral.law_from_samples(Dn)
    with pytest.raises(spectral.SpectralError, match="delta"):
        spectral.stieltjes(law, 0.5, 0.0)
    with pytest.raises(ValueError, match="delta"):                     # SpectralError is a ValueError
        spectral.bulk_edge(law, -1.0)
    ub = spectral.law_from_samples(D, zeta=law.zeta[:500], unbounded=("bottom",))
    with pytest.raises(spectral.SpectralError, match="convention"):
        spectral.bulk_edge(ub, DELTA, "bottom")
    strict = spectral.outlier(ub, DELTA, "bottom", convention="strict")
    assert int(strict.status) == spectral.UNBOUNDED_SUPPORT and not bool(strict.exists)
    assert strict.convention == "strict" and "unbounded" in strict.setting["note"]
    # non-convergence: failure status (throw=False) or SpectralError, never a valid-looking number
    bad = spectral.stieltjes(law, 0.5, DELTA, eps=1e-6, max_steps=1, stages=1, solver="damped", throw=False)
    assert int(bad.status) == spectral.MAX_ITERS and not bool(bad.converged)
    with pytest.raises(spectral.SpectralError, match="did not converge"):
        spectral.stieltjes(law, 0.5, DELTA, eps=1e-6, max_steps=1, stages=1, solver="damped")
    with pytest.raises(spectral.SpectralError, match="zeta"):
        spectral.outlier(spectral.law_from_samples(D, unbounded=()), DELTA)
    for bad_steps in (0, 2.5):
        with pytest.raises(spectral.SpectralError, match="probe_steps"):
            spectral.bulk_edge(law, DELTA, probe_steps=bad_steps)
    for bad_patience in (0, 1.5, True):
        with pytest.raises(spectral.SpectralError, match="probe_patience"):
            spectral.outlier(law, DELTA, probe_patience=bad_patience)


def test_probe_step_cap_leaves_edge_and_outlier_unchanged(law):
    """Edge-bisection probes stop after ``probe_steps`` Newton steps (default 20) instead of
    ``max_steps`` (60): probes inside the support run to the limit, probes outside converge in a
    few steps. With too few steps an outside probe near the edge would count as inside and move
    the edge outward; 20 must give the same numbers as 60 (5000 samples of the toy law, δ = 6;
    measured also on phase-retrieval DMFT laws, m = 4: bit-identical). Checked without the patience
    rule (``probe_patience=None``), which now stops the inside probes before either cap."""
    small = spectral.law_from_samples(np.asarray(law.D[:5000]), zeta=np.asarray(law.zeta[:5000]), unbounded=())
    a = spectral.outlier(small, DELTA, "bottom", probe_patience=None)
    b = spectral.outlier(small, DELTA, "bottom", probe_steps=60, probe_patience=None)
    assert a.setting["probe_steps"] == 20 and b.setting["probe_steps"] == 60
    for q in ("edge", "eigenvalue", "cosine2", "margin"):
        assert abs(float(getattr(a, q)) - float(getattr(b, q))) <= 1e-12 * (1 + abs(float(getattr(b, q)))), q
    assert int(a.iterations) < int(b.iterations)           # the inside probes did stop earlier


def test_probe_patience_leaves_edge_and_outlier_unchanged(law):
    """A bisection probe also stops once ``probe_patience`` (default 3) Newton steps in a row bring
    no new smallest residual, and a failed continuation substep skips the next: only probes inside
    the support (no real solution, wandering iterates) stop earlier, so every bisection decision and
    hence the edge, the outlier and the solution S are bit-identical to ``probe_patience=None``
    (measured on 246 edges and outliers: phase-retrieval DMFT laws m = 4 at finite n, bounded GeLU /
    softplus / Huber laws m = 2 on both sides, toy laws m = 1–3; docs/spectral.md)."""
    small = spectral.law_from_samples(np.asarray(law.D[:5000]), zeta=np.asarray(law.zeta[:5000]), unbounded=())
    for side in ("bottom", "top"):
        a = spectral.outlier(small, DELTA, side)
        b = spectral.outlier(small, DELTA, side, probe_patience=None)
        assert a.setting["probe_patience"] == 3 and b.setting["probe_patience"] is None
        for q in ("edge", "eigenvalue", "cosine2", "margin"):
            np.testing.assert_array_equal(np.asarray(getattr(a, q)), np.asarray(getattr(b, q)), err_msg=f"{side} {q}")
        assert int(a.iterations) < int(b.iterations)       # the inside probes did stop earlier
        ea = spectral.bulk_edge(small, DELTA, side)
        eb = spectral.bulk_edge(small, DELTA, side, probe_patience=None)
        for q in ("edge", "S", "rho", "bracket"):
            np.testing.assert_array_equal(np.asarray(getattr(ea, q)), np.asarray(getattr(eb, q)), err_msg=f"{side} {q}")
        assert int(ea.iterations) < int(eb.iterations)


def test_secant_search_agrees_with_bisection(law):
    """``search="secant"`` (default) brackets the edge by aiming at the zero of (1 − ρ)² (linear at a
    square-root edge) and the outlier's root by regula falsi with the Illinois rule, with bisection
    safeguards; ``"bisection"`` halves every time. Both stop at the same bracket width (initial ·
    2^-44), so the edge may move by about one bracket (~1e-12; a probe within ~1e-12 of the fold can fail to
    converge and count as inside, so the bracket certifies the edge to that resolution), the margin at the
    edge like its square root, the outlier and cos² much less. Measured on 55 laws (toy m = 1–3 both
    sides, Huber m = 2 DMFT states, PR m = 4 finite-n; session 42, docs/spectral.md): every existence
    decision the same, |Δedge| ≤ 3.3e-12, |Δmargin| ≤ 5.2e-6, |Δoutlier| ≤ 1.9e-12, |Δcos²| ≤ 3.0e-11,
    2.0× fewer Newton steps (median; 1.46–2.68×), 18–30 probes instead of 44."""
    small = spectral.law_from_samples(np.asarray(law.D[:5000]), zeta=np.asarray(law.zeta[:5000]), unbounded=())
    for side in ("bottom", "top"):
        a = spectral.bulk_edge(small, DELTA, side)
        b = spectral.bulk_edge(small, DELTA, side, search="bisection")
        assert a.setting["search"] == "secant" and b.setting["search"] == "bisection"
        assert int(b.probes) == 44 and int(a.probes) < 44 and int(a.iterations) < int(b.iterations)
        assert float(a.bracket) <= float(b.bracket) * (1 + 1e-9)                  # the same final tolerance
        assert abs(float(a.edge) - float(b.edge)) < 1e-11
        oa = spectral.outlier(small, DELTA, side)
        ob = spectral.outlier(small, DELTA, side, search="bisection")
        assert bool(oa.exists) == bool(ob.exists) == (side == "bottom")
        assert abs(float(oa.margin) - float(ob.margin)) < 1e-5
        if side == "bottom":
            assert abs(float(oa.eigenvalue) - float(ob.eigenvalue)) < 1e-10
            assert abs(float(oa.cosine2) - float(ob.cosine2)) < 1e-9
            assert int(oa.iterations) < int(ob.iterations)
    with pytest.raises(spectral.SpectralError, match="search"):
        spectral.outlier(small, DELTA, search="brent")


def test_edge_searches_reach_the_marchenko_pastur_edges():
    """D ≡ 1 (m = 1): H = (1/n) Σ x xᵀ, whose support is [(1 − δ^{-1/2})², (1 + δ^{-1/2})²] for δ ≥ 1
    (closed form). Both searches end within 5e-12 of it (measured ≤ 1.2e-12 at δ = 1.5, 2, 10, 100,
    session 42), the secant one with fewer probes."""
    mp = spectral.law_from_samples(np.ones((4, 1, 1)), zeta=np.zeros(4), unbounded=())
    for dv in (2.0, 10.0):
        for side, sign in (("bottom", -1.0), ("top", 1.0)):
            exact = (1.0 + sign / np.sqrt(dv)) ** 2
            for search in ("secant", "bisection"):
                e = spectral.bulk_edge(mp, dv, side, search=search)
                assert abs(float(e.edge) - exact) < 5e-12, (dv, side, search, float(e.edge) - exact)
                assert int(e.probes) < 30 if search == "secant" else int(e.probes) == 44


@pytest.mark.slow
def test_unbounded_finite_n():
    """THEORY §2 check: phase retrieval, quadratic student at init, D = 6r² − 2y, δ = 8,
    n = 8000: truncated-law root −2.237 (THEORY), dense d = 1000: −2.246. With 4·10^5
    samples we get −2.2488; with 10^5 samples −2.31 (the 1/n quantile is MC-noisy);
    here 1.2·10^5 antithetic samples, tolerance 0.08."""
    import dmft

    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    prob = dmft.Problem(pr, dmft.TwoLayer(activation=lambda r: r**2, width=1, second_layer=jnp.ones(1)))
    kz, kr = jax.random.split(jax.random.key(1))
    z = jax.random.normal(kz, (60000,))
    z = jnp.concatenate([z, -z])
    r = jax.random.normal(kr, (120000, 1))
    law = spectral.law_from_problem(prob, z**2, r, jnp.ones(1), zeta=z)
    assert "bottom" in law.unbounded                                # detected by the tail test
    with pytest.raises(spectral.SpectralError, match="unbounded"):
        spectral.outlier(law, 8.0, "bottom")
    for bad in (2.5, 0, float("nan")):                               # n: a positive integer (user audit)
        with pytest.raises(spectral.SpectralError, match="positive integer"):
            spectral.bulk_edge(law, 8.0, "bottom", convention="finite-n", n=bad)
    o = spectral.outlier(law, 8.0, "bottom", convention="finite-n", n=8000)
    assert o.convention == "finite-n" and bool(o.exists)
    assert abs(float(o.eigenvalue) + 2.246) < 0.08


def test_outlier_level(law):
    """``level``: an outlier counts only below min(edge, level) (THEORY's *negative* outlier with
    level = −ridge). The margin is μ_min A at that cut: negative iff λ0 < cut, increasing as the cut
    moves out, and equal to the edge margin when the level lies above the edge."""
    base = spectral.outlier(law, DELTA, "bottom")
    lam0, edge = float(base.eigenvalue), float(base.edge)
    above = spectral.outlier(law, DELTA, "bottom", level=edge + 1.0)
    assert float(above.margin) == pytest.approx(float(base.margin), rel=1e-12)
    mid = spectral.outlier(law, DELTA, "bottom", level=0.5 * (lam0 + edge))
    assert bool(mid.exists) and float(mid.eigenvalue) == pytest.approx(lam0, abs=1e-8)
    assert float(base.margin) < float(mid.margin) < 0
    below = spectral.outlier(law, DELTA, "bottom", level=lam0 - 0.2)
    assert not bool(below.exists) and int(below.status) == spectral.NO_OUTLIER and float(below.margin) > 0
    # the margin at the cut is μ_min of A(λ) with the real Stieltjes transform at λ = cut
    lam = lam0 - 0.2
    S = np.real(np.asarray(spectral.stieltjes(law, lam, DELTA, 1e-10).S))
    A = np.asarray(spectral.A_matrix(jnp.asarray(S), lam, law, DELTA))
    assert float(below.margin) == pytest.approx(np.linalg.eigvalsh(A)[0], abs=1e-6)


def test_padding_before_the_jitted_solvers_leaves_the_law_unchanged(law):
    """``for_jit`` pads the sample axis to a bucketed size with weight-0 copies (one compilation for
    the different n of a δ grid or of finite-n truncations): the padded solve equals the unpadded
    one to round-off."""
    from spectral.law import BlockLaw, for_jit, padded_size
    from spectral.outliers import _outlier_core_jit

    assert [padded_size(n) for n in (100, 256, 300, 400, 2040, 3000, 20000)] == [100, 256, 384, 512, 2048, 3072, 20480]
    sub = spectral.law_from_samples(law.D[:3000], zeta=law.zeta[:3000], unbounded=())
    padded = for_jit(sub)
    assert padded.size == 3072 and float(jnp.sum(padded.weights[3000:])) == 0.0
    raw = BlockLaw(D=sub.D, weights=sub.weights, zeta=sub.zeta, unbounded=(), source="")   # not padded
    ref = _outlier_core_jit(raw, jnp.asarray(DELTA, float), jnp.asarray(0), 1e-12, 60, 0.5, "newton", 44, 2,
                            jnp.asarray(jnp.inf))
    o = spectral.outlier(sub, DELTA, "bottom")
    assert bool(o.exists) and bool(ref[3])
    for got, want in ((o.eigenvalue, ref[0]), (o.cosine2, ref[1]), (o.edge, ref[2]), (o.margin, ref[5])):
        assert float(got) == pytest.approx(float(want), rel=1e-9, abs=1e-12)
    e = spectral.bulk_edge(sub, DELTA, side="bottom")
    assert float(e.edge) == pytest.approx(float(ref[2]), rel=1e-9)


def test_unbounded_support_from_the_problem_not_the_sample_tail():
    """Whether D(r, y) is unbounded because y is comes from the problem (label rays, D at growing
    labels), so the strict convention does not depend on which sample tail a DMFT state happened to
    draw: square loss on y = z² with a GeLU student is unbounded below (D = ∇F∇Fᵀ + (F − y)∇²F),
    a Huber loss keeps it bounded, a saturating link is bounded, Gaussian label noise with a tanh
    student makes both sides unbounded."""
    from dmft import activations

    r = jax.random.normal(jax.random.key(3), (2000, 2))
    y = jax.random.normal(jax.random.key(4), (2000,)) ** 2
    a = jnp.full(2, 0.5)

    def prob(link, loss, act=activations.gelu, noise_dim=0):
        return dmft.Problem(dmft.Teacher(link=link, k=1, noise_dim=noise_dim),
                            dmft.TwoLayer(activation=act, width=2, second_layer=a, train_second_layer=False), loss=loss)

    pr = lambda z, e: z[0] ** 2  # noqa: E731
    assert dmft.Teacher(link=pr, k=1).unbounded_label_levels().keys() == {"above"}
    # GeLU'' = φ(r)(2 − r²) takes both signs: D → −∞ where |r| < √2 and +∞ beyond as y grows
    assert spectral.unbounded_through_labels(prob(pr, dmft.square_loss), r, a) == ("bottom", "top")
    quad = prob(pr, dmft.square_loss, activations.quadratic)  # F'' = 2a > 0: bottom only (from the labels)
    assert spectral.unbounded_through_labels(quad, r, a) == ("bottom",)
    assert "bottom" in spectral.law_from_problem(prob(pr, dmft.square_loss), y, r, a).unbounded
    assert spectral.unbounded_through_labels(prob(pr, dmft.huber_loss(1.0)), r, a) == ()
    sat = lambda z, e: jnp.tanh(2 * z[0])  # noqa: E731
    assert dmft.Teacher(link=sat, k=1).unbounded_label_levels() == {}
    assert spectral.unbounded_through_labels(prob(sat, dmft.square_loss), r, a) == ()
    noisy = lambda z, e: jnp.tanh(2 * z[0]) + 0.3 * e[0]  # noqa: E731
    assert spectral.unbounded_through_labels(prob(noisy, dmft.square_loss, jnp.tanh, 1), r, a) == ("bottom", "top")


def test_unbounded_through_preactivations_from_the_problem():
    """Tails driven by r (not by the labels), decided from the problem, the same for every sample.

    Closed forms: D = ℓ''·∇F∇Fᵀ + ℓ'·∇²F with ∇²F = diag(a_j σ''(r_j)). Quadratic readout + Huber:
    ∇F∇Fᵀ = 4 (a∘r)(a∘r)ᵀ grows like |r|² where y ≈ F(r) (y = z² reaches any F ≥ 0): top only.
    GeLU, square loss, bounded link, m = 2: at r = (s, 2), D_22 = (F − y)·a_2·σ''(2) with
    σ''(2) = φ(2)(2 − 4) < 0 falls like −s (and like +s at r = (s, 0)): both sides. One GeLU unit
    (m = 1): σ'' decays faster than the residual grows: bounded. Softplus (σ'' > 0, F ≥ 0, |y| ≤ 1):
    top only. Huber + GeLU (the two_route setting): bounded."""
    from dmft import activations

    def prob(link, loss, act, m):
        return dmft.Problem(dmft.Teacher(link=link, k=1, noise_dim=0),
                            dmft.TwoLayer(activation=act, width=m, second_layer=jnp.full(m, 1.0 / m), train_second_layer=False),
                            loss=loss)

    pr = lambda z, e: z[0] ** 2  # noqa: E731
    sat = lambda z, e: jnp.tanh(2 * z[0])  # noqa: E731
    quad_huber = prob(pr, dmft.huber_loss(1.0), activations.quadratic, 2)
    a2 = jnp.full(2, 0.5)
    sides = []
    for k in range(4):  # four independent samples of the same law: one answer
        r = jax.random.normal(jax.random.key(10 + k), (2000, 2))
        y = jax.random.normal(jax.random.key(20 + k), (2000,)) ** 2
        assert spectral.unbounded_through_preactivations(quad_huber, y, r, a2) == ("top",)
        sides.append(spectral.law_from_problem(quad_huber, y, r, a2).unbounded)
    assert sides == [("top",)] * 4
    r = jax.random.normal(jax.random.key(3), (2000, 2))
    yb = jnp.tanh(2 * jax.random.normal(jax.random.key(4), (2000,)))
    gelu_sq = prob(sat, dmft.square_loss, activations.gelu, 2)
    assert spectral.unbounded_through_preactivations(gelu_sq, yb, r, a2) == ("bottom", "top")
    assert spectral.law_from_problem(gelu_sq, yb, r, a2).unbounded == ("bottom", "top")
    # the closed form behind the flag: at r = (s, 2), y = 0, λ_min(D) → D_22 with slope
    # dF/ds · a_2 σ''(2) = ½ · ½ · φ(2)(2 − 4) per unit s
    lo = [float(np.linalg.eigvalsh(np.asarray(dmft.sample_hessian(gelu_sq, 0.0, jnp.array([s, 2.0]), a2)))[0]) for s in (100.0, 1000.0)]
    phi2 = np.exp(-2.0) / np.sqrt(2 * np.pi)
    assert (lo[1] - lo[0]) / 900.0 == pytest.approx(0.25 * phi2 * (2 - 4), rel=1e-3)
    r1 = r[:, :1]
    assert spectral.unbounded_through_preactivations(prob(sat, dmft.square_loss, activations.gelu, 1), yb, r1, jnp.ones(1)) == ()
    assert spectral.unbounded_through_preactivations(prob(sat, dmft.square_loss, jax.nn.softplus, 2), yb, r, a2) == ("top",)
    assert spectral.unbounded_through_preactivations(prob(pr, dmft.huber_loss(1.0), activations.gelu, 2), r[:, 0] ** 2, r, a2) == ()
    assert spectral.unbounded_through_preactivations(prob(sat, dmft.square_loss, jax.nn.relu, 2), yb, r, a2) == ()
