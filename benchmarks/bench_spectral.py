"""Limiting Hessian spectra (spectral package) against finite-d dense/Lanczos spectra:
THEORY §4 reference values, bulk KS distance and hard-direction outlier (m = 2 toy law). The
THEORY §2 DMFT-state checks are ``spectral_finite_size`` (unbounded D, finite-n convention) and
``spectral_dmft_state`` (bounded D)."""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "spectral"


def toy_D(zeta, u):
    al = 1.0 - 3.0 * jnp.tanh(jnp.maximum(zeta**2 - 1.0, 0.0))
    be = 0.3 * jnp.tanh(u[..., 0])
    ga = 1.0 + 0.5 * jnp.tanh(u[..., 1])
    return jnp.stack([jnp.stack([al, be], -1), jnp.stack([be, ga], -1)], -2)


def toy_setting(tiny: bool) -> dict:
    """The m = 2 toy law's check (``bench_spectral``): theory CDF (engine settings) and a refined reference
    theory; dense spectra at several d; negative controls (the engine's theory at wrong δ: 10 % and 25 %)."""
    return dict(m=2, delta=6.0, law_samples=20_000 if tiny else 50_000, grid=[-1.0, 2.4], points=81, eps=2e-3,
                refined=dict(law_samples=50_000 if tiny else 200_000, law_key=1, points=161 if tiny else 321,
                             eps=1e-3 if tiny else 5e-4),
                ds=[250, 500] if tiny else [250, 500, 1000, 2000], seeds=[8, 8] if tiny else [32, 16, 8, 8],
                resolvent=dict(lam=[-1.0, 2.4, 18], etas=[0.05, 0.2, 0.5], jacobian_step=0.03,
                               quadrature=dict(panels=[2, 6], order=6, noise_nodes=12) if tiny else
                               dict(panels=[2, 10], order=8, noise_nodes=20),
                               refined_quadrature=dict(panels=[2, 10], order=8, noise_nodes=20) if tiny else
                               dict(panels=[4, 20], order=10, noise_nodes=30),
                               statistic="δ̂ = δ + <g_d − g_theory, J>/<J, J> over Re and Im of every grid point, "
                                         "g = (1/2d) tr (H − z)^-1 = tr S(z)/2, J = dg_theory/dδ (quadrature law, "
                                         "central difference)"),
                matrix_key=100, control_deltas=[6.6, 7.5], law_key=0,
                D="[[1-3tanh((zeta^2-1)_+), 0.3tanh(u1)], [., 1+0.5tanh(u2)]]",
                ks="sup over the grid points of |theory CDF − empirical CDF of the 2d eigenvalues|; theory CDF: trapezoid "
                   "integral of the Stieltjes density from the grid's left end")


def toy_law(N: int, key: int):
    k1, k2 = jax.random.split(jax.random.key(key))
    zeta = jax.random.normal(k1, (N,))
    import spectral
    return spectral.law_from_samples(toy_D(zeta, jax.random.normal(k2, (N, 2))), zeta=zeta, unbounded=())


def toy_blocks(d: int, delta: float, key):
    """The data ``X`` (n, d), n = δ d, and the blocks ``D_i`` (n, 2, 2) of the toy law (ζ_i = X[i, 0])."""
    n = int(delta * d)
    kx, ku = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    return X, toy_D(X[:, 0], jax.random.normal(ku, (n, 2)))


def toy_spectrum(d: int, delta: float, key, vectors: bool = True, blocks: bool = False):
    """Eigenvalues (and eigenvectors, else None) of the dense (1/n) Σ x_i x_iᵀ ⊗ D_i of the toy law, n = δ d;
    with ``blocks``, also the law of the matrix's own (ζ_i, D_i) (the conditional theory's input)."""
    import spectral
    X, D = toy_blocks(d, delta, key)
    H = np.asarray(spectral.dense_block_matrix(X, D))
    out = np.linalg.eigh(H) if vectors else (np.linalg.eigvalsh(H), None)
    return out + (spectral.law_from_samples(D, zeta=X[:, 0], unbounded=(), source="the matrix's own blocks"),) if blocks else out


def toy_quadrature_law(panels=(2, 10), order=8, noise_nodes=20, L=8.5):
    """The m = 2 toy law by tensor quadrature (no Monte Carlo): ``|ζ|`` by composite Gauss–Legendre on [0, 1] and
    [1, L] (a panel boundary at the kink of ``(ζ² − 1)_+``), weighted by twice the normal density, times
    Gauss–Hermite nodes for ``u1``, ``u2``. ``D`` depends on ζ through ζ² only, so folding ζ onto ``|ζ|`` is exact
    for the bulk and for the hard-direction expectations ``E[ζ² ·]``. Measured (session 54): refining to
    ``panels=(4, 20), order=10, noise_nodes=30`` moves ``tr S/m`` by ≤ 2e-5 on the resolvent grid; a 50 000-sample
    Monte Carlo law is 0.013 away."""
    import spectral
    from spectral.quadrature import gauss_legendre_composite
    z1, w1 = gauss_legendre_composite(0.0, 1.0, panels[0], order)
    z2, w2 = gauss_legendre_composite(1.0, L, panels[1], order)
    zp = np.concatenate([z1, z2])
    wp = np.concatenate([w1, w2]) * 2.0 * np.exp(-0.5 * zp**2) / np.sqrt(2 * np.pi)
    u, wu = np.polynomial.hermite_e.hermegauss(noise_nodes)
    Z, U1, U2 = np.meshgrid(zp, u, u, indexing="ij")
    W = (wp[:, None, None] * (wu / wu.sum())[None, :, None] * (wu / wu.sum())[None, None, :]).ravel()
    zeta = jnp.asarray(Z.ravel())
    D = toy_D(zeta, jnp.stack([jnp.asarray(U1.ravel()), jnp.asarray(U2.ravel())], -1))
    return spectral.law_from_samples(D, zeta=zeta, weights=jnp.asarray(W / W.sum()), unbounded=(), source="quadrature")


def resolvent_grid(R) -> np.ndarray:
    """The complex grid z = λ + iη (η rows, λ columns) of the resolvent check."""
    return np.linspace(*R["lam"])[None, :] + 1j * np.asarray(R["etas"], float)[:, None]


def resolvent_trace(ev, z) -> np.ndarray:
    """Normalized trace of the resolvent, ``(1/N) tr (H − z)⁻¹ = (1/N) Σ_l 1/(λ_l − z)``, from the N eigenvalues."""
    ev = np.asarray(ev, float)
    return np.mean(1.0 / (ev[:, None, None] - np.asarray(z)[None]), axis=0)


def theory_trace(law, z, delta) -> np.ndarray:
    """``tr S(z)/m`` of the block Stieltjes equation on the grid ``z`` (η rows); raises unless every point converged
    (a resolvent check on an unconverged solution would test the solver's stopping point, not the equation)."""
    import spectral
    out = []
    for row in np.asarray(z):
        st = spectral.stieltjes(law, jnp.asarray(row.real), delta, eps=float(row.imag[0]), throw=False)
        if not bool(np.all(np.asarray(st.converged))):
            raise AssertionError(f"stieltjes did not converge at eta={row.imag[0]:g}: residual {np.asarray(st.residual)}")
        S = np.asarray(st.S)
        out.append(np.trace(S, axis1=-2, axis2=-1) / S.shape[-1])
    return np.array(out)


def _flat(g) -> np.ndarray:
    g = np.asarray(g)
    return np.concatenate([g.real.reshape(g.shape[:-2] + (-1,)), g.imag.reshape(g.shape[:-2] + (-1,))], -1)


def delta_hat(g, g_ref, J, delta) -> np.ndarray:
    """The δ that a resolvent trace ``g`` implies: δ + ⟨g − g_ref, J⟩ / ⟨J, J⟩ (real and imaginary parts of every
    grid point), ``J = ∂g_ref/∂δ`` at fixed law — one number per matrix, in units a theorist reads (a δ error)."""
    Jv = _flat(J)
    return delta + _flat(np.asarray(g) - np.asarray(g_ref)) @ Jv / (Jv @ Jv)


def resolvent_rows(T, rs) -> list:
    """Rows of the resolvent check (session 54: the KS distance detects only a 25 % error in δ).

    Per matrix, δ̂ of ``delta_hat`` from its normalized resolvent trace on the grid, against two theories:
    - **conditional**: the equation solved with the matrix's own n blocks ``D_i`` (their empirical law; the theory
      has no Monte Carlo error of its own and the O(n^{-1/2}) fluctuation of the empirical law cancels: the seed
      spread is O(1/d), measured sd·d ≈ 13–19 at d = 250–2000, against 53–98 and growing for the other one);
    - **quadrature**: the exact law (``toy_quadrature_law``), so δ̂ also carries the law's sampling fluctuation.
    Each: δ̂ per d (reported: the finite-d bias is O(1/d)), and the d → ∞ limit of a weighted fit b + c/d against
    δ, tolerance t(0.99865, seeds − 1 of the smallest group)·s.e.(b) (+ for the quadrature theory, its measured
    discretization projected onto δ). The tolerance is the smallest δ error the check detects (in the note)."""
    from .bench_success_bounded import weighted_line
    R, ds, delta = T["resolvent"], T["ds"], T["delta"]
    acc = []
    for which, key, extra, what in (
            ("conditional", "delta_hat_conditional", 0.0, "the equation with each matrix's own n blocks D_i"),
            ("quadrature", "delta_hat_quadrature", rs["quadrature_discretization_delta"], "the exact law by quadrature")):
        per = [np.asarray(v, float) for v in rs[key]]
        fit = delta_limit(ds, per, delta, extra)
        for d, v, mu, s in zip(ds, per, fit["mean"], fit["stderr"]):
            acc.append(dict(quantity=f"m=2 toy resolvent: δ implied by (1/2d) tr (H − z)⁻¹ on the z grid, theory = {what} "
                                     "(reported; assessed through its d → ∞ limit)", theory=float(delta),
                            simulation=float(mu), sim_stderr=float(s), d=int(d), seeds=int(v.size), tolerance=None,
                            agree=None, reference="finite d"))
        b, b_se, tol = fit["b"], fit["b_stderr"], fit["tolerance"]
        acc.append(dict(quantity=f"m=2 toy resolvent: δ implied by (1/2d) tr (H − z)⁻¹, extrapolated to d → ∞ (fit b + c/d "
                                 f"over d = {ds}), theory = {what}", theory=float(delta), simulation=b, sim_stderr=b_se,
                        d=int(max(ds)), seeds=int(sum(v.size for v in per)), tolerance=float(tol),
                        tolerance_rule=fit["rule"]
                                       + (" + the quadrature's measured discretization, as a δ shift" if extra else ""),
                        agree=fit["agree"], reference="finite d, extrapolated",
                        note=(f"{which}: c = {fit['c']:.3g} ± {fit['c_stderr']:.2g}, χ² {fit['chi2']:.2f} on {fit['dof']} dof; "
                              f"detects a δ error of {100 * tol / delta:.2g} % (the KS rows: 25 %); grid "
                              f"λ ∈ [{R['lam'][0]:g}, {R['lam'][1]:g}] ({R['lam'][2]} points) × η ∈ {R['etas']}; the engine's "
                              f"default theory (a {T['law_samples']}-sample Monte Carlo law) implies δ = "
                              f"{rs['engine_mc_delta']:.4f}")))
    M = np.array([_flat(np.array(r[0]) + 1j * np.array(r[1])) for r in rs["mean_residual_conditional"]])
    S = np.array([np.concatenate([np.ravel(r[0]), np.ravel(r[1])]) for r in rs["stderr_residual_conditional"]])
    zs = []
    for j in range(M.shape[1]):
        beta, cov, _ = weighted_line(1.0 / np.asarray(ds, float), M[:, j], S[:, j])
        zs.append(beta[0] / np.sqrt(cov[0, 0]))
    zs = np.abs(zs)
    acc.append(dict(quantity=f"m=2 toy resolvent, pointwise: max over the {zs.size} grid components (Re, Im) of |b(z)|/s.e., "
                             "b(z) + c(z)/d fitted to (1/2d) tr (H − z)⁻¹ − the conditional theory (reported)",
                    theory=0.0, simulation=float(zs.max()), sim_stderr=None, d=int(max(ds)), seeds=int(sum(T["seeds"])),
                    tolerance=None, agree=None, reference="finite d, extrapolated",
                    note=(f"rms of the {zs.size} z-scores {np.sqrt(np.mean(zs**2)):.2f} (≈ 1 for an exact theory; somewhat "
                          "more with few seeds per d: Student t); not assessed: with the smallest group's seeds a Bonferroni t bound over "
                          "the components is too wide to fail; δ̂ is the assessed statistic")))
    return acc


def trapezoid_cdf(grid, rho):
    """CDF on ``grid`` of a density given there: the trapezoid integral from the grid's left end."""
    grid, rho = np.asarray(grid, float), np.asarray(rho, float)
    return np.concatenate([[0.0], np.cumsum(0.5 * (rho[1:] + rho[:-1]) * np.diff(grid))])


def theory_cdf(law, grid, delta, eps):
    """Theory CDF on ``grid``: the trapezoid integral of the Stieltjes density from the grid's left end."""
    import spectral
    st = spectral.stieltjes(law, grid, delta, eps=eps, throw=False)
    return trapezoid_cdf(grid, st.density), st


def ks_distance(cdf, grid, ev) -> float:
    """Kolmogorov distance between a CDF given on ``grid`` and the empirical CDF of ``ev``, over the grid points."""
    ev = np.sort(np.asarray(ev))
    return float(np.max(np.abs(cdf - np.searchsorted(ev, np.asarray(grid), side="right") / ev.size)))


def seed_limit(ds, ks) -> dict:
    """Weighted fit of a per-seed statistic's mean over seeds = b + c/d (s.e. from the seeds), one list of seed
    values per d: its d → ∞ limit b. For the KS distance, b is the distance of the theory to the true limiting law
    (0 for an exact theory, up to its discretization; a wrong theory leaves b > 0); for the resolvent's δ̂, the δ
    the limiting spectrum implies."""
    from .bench_success_bounded import weighted_line
    m = np.array([np.mean(k) for k in ks])
    se = np.array([np.std(k, ddof=1) / np.sqrt(len(k)) for k in ks])
    beta, cov, chi2 = weighted_line(1.0 / np.asarray(ds, float), m, se)
    return dict(b=float(beta[0]), b_stderr=float(np.sqrt(cov[0, 0])), c=float(beta[1]), c_stderr=float(np.sqrt(cov[1, 1])),
                chi2=chi2, dof=len(ds) - 2, mean=m.tolist(), stderr=se.tolist())


def delta_limit(ds, per, delta, extra: float = 0.0) -> dict:
    """The assessed d → ∞ limit of a per-seed δ̂ (one list per d): :func:`seed_limit`'s b against the true δ at
    t(0.99865, seeds − 1 of the smallest group)·s.e.(b) plus ``extra`` (a measured error of the theory itself, as a
    δ shift). Returns the fit with ``tolerance``, ``t``, ``n_min``, ``rule`` (the base rule text) and ``agree``."""
    from .bench_first_phase import t_factor
    fit = seed_limit(ds, per)
    n_min = min(len(v) for v in per)
    tf = t_factor(n_min)
    tol = tf * fit["b_stderr"] + extra
    return dict(fit, tolerance=float(tol), t=tf, n_min=n_min, rule=f"t(0.99865, {n_min - 1} dof) = {tf:.2f} s.e.(b)",
                agree=bool(abs(fit["b"] - delta) <= tol))


def toy_rows(T, toy) -> list:
    """Rows of the m = 2 toy check from the stored per-seed values (recomputed by the test).

    KS (session 53; before: one d, one seed, a fixed tolerance 0.03 that nothing measured): the finite-d KS
    distance to the reference theory per d (reported), and its d → ∞ limit b of ``seed_limit`` against 0 with
    tolerance t(0.99865, seeds − 1 of the smallest group) · s.e.(b) + the engine-vs-reference distance (the
    theory's own discretization, measured: with the reference's error at most half the engine's — 4× the samples,
    ε/4, 4× the grid — it bounds the reference's). The negative controls (the engine's theory at the wrong
    δ = ``control_deltas`` against the same matrices) say what this rule detects: their limits and whether the
    tolerance resolves them are in the row's note (measured: a 25 % error in δ is detected, a 10 % one is not;
    scratch runs, session 53: the sup distance of the engine's theory CDFs at δ = 6 and 6.6 is only 0.0085; the
    fixed 0.03 used before could not detect a 50 % error, δ = 9: 0.029).
    Outlier and cos² at the largest d: the issue's 3 % plus t(seeds − 1) s.e. of the seeds."""
    from .bench_first_phase import t_factor
    acc = []
    ds, nseeds = T["ds"], [len(k) for k in toy["ks"]]
    lim = seed_limit(ds, toy["ks"])
    ctl = {dc: seed_limit(ds, toy["ks_control"][str(dc)]) for dc in T["control_deltas"]}
    for d, k in zip(ds, toy["ks"]):
        acc.append(dict(quantity="m=2 toy bulk: Kolmogorov distance, reference theory CDF vs dense eigenvalues (reported; "
                                 "assessed through its d → ∞ limit)", theory=0.0, simulation=float(np.mean(k)),
                        sim_stderr=float(np.std(k, ddof=1) / np.sqrt(len(k))), d=int(d), seeds=len(k), tolerance=None,
                        agree=None, reference="finite d"))
    tf = t_factor(min(nseeds))
    tol = tf * lim["b_stderr"] + toy["engine_vs_reference"]
    acc.append(dict(quantity=f"m=2 toy bulk: Kolmogorov distance extrapolated to d → ∞ (fit b + c/d over d = {ds})",
                    theory=0.0, simulation=lim["b"], sim_stderr=lim["b_stderr"], d=int(max(ds)), seeds=int(sum(nseeds)),
                    tolerance=float(tol), tolerance_rule=f"t(0.99865, {min(nseeds) - 1} dof) = {tf:.2f} s.e.(b) + the "
                    "engine-vs-reference theory distance (measured discretization)",
                    agree=bool(abs(lim["b"]) <= tol), reference="finite d, extrapolated",
                    note=(f"c = {lim['c']:.3g} ± {lim['c_stderr']:.2g}, χ² {lim['chi2']:.2f} on {lim['dof']} dof; engine theory "
                          f"vs reference {toy['engine_vs_reference']:.4f}; negative controls (engine theory at the wrong δ, "
                          f"matrices at δ = {T['delta']:g}): " + "; ".join(
                              f"δ = {dc:g}: b = {c['b']:.4f} ± {c['b_stderr']:.4f}, "
                              f"{'resolved' if c['b'] - t_factor(min(nseeds)) * c['b_stderr'] > tol else 'NOT resolved'}"
                              for dc, c in ctl.items()))))
    b, c2 = np.asarray(toy["bottom"][-1]), np.asarray(toy["cosine2"][-1])
    tf = t_factor(len(b))
    quad = "quadrature_outlier" in toy      # session 54: the theory from the exact (quadrature) law, no Monte Carlo error
    for what, key, x in (("bottom outlier location", "outlier", b), ("outlier squared cosine with theta", "cosine2", c2)):
        th = toy[f"quadrature_{key}"] if quad else toy[f"theory_{key}"]
        se = float(np.std(x, ddof=1) / np.sqrt(len(x)))
        acc.append(dict(quantity=f"m=2 toy: {what} (the issue's 3% + t s.e.)", theory=float(th), simulation=float(np.mean(x)),
                        sim_stderr=se, d=int(ds[-1]), seeds=len(x), tolerance=float(0.03 * abs(th) + tf * se),
                        tolerance_rule=f"3% (issue #3) + t(0.99865, {len(x) - 1} dof) = {tf:.2f} s.e.",
                        agree=bool(abs(th - np.mean(x)) <= 0.03 * abs(th) + tf * se), reference="finite d",
                        **(dict(note=f"theory: the quadrature law (refined: {toy[f'quadrature_{key}_refined']:.7g}); the "
                                     f"engine's {T['law_samples']}-sample Monte Carlo law gives {toy[f'theory_{key}']:.5g}")
                           if quad else {})))
    return acc


def _row(q, th, sim, se, d, seeds, tol):
    return dict(quantity=q, theory=float(th), simulation=float(sim), sim_stderr=None if se is None else float(se),
                d=int(d), seeds=int(seeds), tolerance=float(tol), agree=bool(abs(th - sim) <= tol))


def probe_patience_row(call, what, repeats=3):
    """Time ``call()`` (an edge or outlier solve) with the default ``probe_patience`` against
    ``probe_patience=None`` (every probe inside the support runs to ``probe_steps``), both compiled
    first, repeats interleaved; the results must be bit-identical (docs/spectral.md)."""
    def timed(**kw):
        t0 = time.perf_counter()
        r = call(**kw)
        jax.block_until_ready(r.edge)
        return time.perf_counter() - t0, r
    (_, on), (_, off) = timed(), timed(probe_patience=None)          # compile both
    t_on, t_off = [], []
    for _ in range(repeats):
        t_on.append(timed()[0])
        t_off.append(timed(probe_patience=None)[0])
    fields = [f for f in ("edge", "S", "eigenvalue", "cosine2", "margin") if hasattr(on, f)]
    same = all(np.array_equal(np.asarray(getattr(on, f)), np.asarray(getattr(off, f))) for f in fields)
    if not same:
        raise AssertionError(f"{what}: probe_patience changed the result ({fields})")
    return dict(what=f"edge search with probe_patience={on.setting['probe_patience']} vs None: {what} (after compile)",
                value=float(np.median(t_on)), unit="s", ratio=float(np.median(t_off) / np.median(t_on)),
                note=(f"ratio = time without / with; median of {repeats} interleaved repeats: {np.median(t_off):.3f} s vs "
                      f"{np.median(t_on):.3f} s; Newton steps {int(np.sum(off.iterations))} vs {int(np.sum(on.iterations))}; "
                      f"{', '.join(fields)} bit-identical"))


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"  # standard/quick share CPU sizes; quick trims further
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import dmft
    import spectral

    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    acc, perf = [], []
    # ---- §4 reference values (quadrature) -------------------------------------------------
    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    t0 = time.perf_counter()
    ref = {(1.0,): (0.2307, 0.9581), (2.0,): (0.6389, 0.3395), (3.0,): (0.8454, 0.0350)}
    for (dl,), (c2, ed) in ref.items():
        r = spectral.spectral_method(lambda y: 1.0 - 1.0 / y, pr, dl)
        acc.append(_row(f"T*=1-1/y cos^2 at delta={dl} (THEORY §4)", c2, r.cosine2, None, 0, 0, 1e-3))
        acc.append(_row(f"T*=1-1/y right edge at delta={dl}", ed, r.edge, None, 0, 0, 1e-3))
        acc.append(_row(f"T*=1-1/y top eigenvalue at delta={dl} (= 1/delta)", 1 / dl, r.eigenvalue, None, 0, 0, 1e-3))
    r = spectral.spectral_method(lambda y: jnp.minimum(y, 3.0), pr, 2.0)
    acc += [_row("T=min(y,3) top eigenvalue at delta=2", 4.1279, r.eigenvalue, None, 0, 0, 1e-3),
            _row("T=min(y,3) edge at delta=2", 3.983, r.edge, None, 0, 0, 1e-3),
            _row("T=min(y,3) cos^2 at delta=2", 0.2544, r.cosine2, None, 0, 0, 1e-3),
            _row("T=min(y,3) threshold", 0.8009, spectral.spectral_method_threshold(lambda y: jnp.minimum(y, 3.0), pr),
                 None, 0, 0, 1e-3),
            _row("T* threshold", 0.5, spectral.spectral_method_threshold(lambda y: 1.0 - 1.0 / y, pr), None, 0, 0, 1e-3),
            _row("weak recovery delta_u noiseless", 0.5, spectral.weak_recovery_threshold(pr), None, 0, 0, 1e-3)]
    for Delta, v in [(0.1, 0.5181), (1.0, 0.6466)]:
        tn = dmft.Teacher(link=lambda z, e, D=Delta: z[0] ** 2 + jnp.sqrt(D) * e[0], k=1, noise_dim=1)
        acc.append(_row(f"weak recovery delta_u, y=z^2+sqrt({Delta}) xi", v, spectral.weak_recovery_threshold(tn),
                        None, 0, 0, 1e-3))
    perf.append(dict(what="all §4 values by quadrature", value=time.perf_counter() - t0, unit="s", ratio=None, note=""))

    # ---- m = 2 toy law: bulk KS against a measured null, and the outlier, vs dense eigh ----------
    T = toy_setting(tiny)
    delta, N = T["delta"], T["law_samples"]
    law = toy_law(N, 0)
    out = spectral.outlier(law, delta, "bottom")
    grid = jnp.linspace(*T["grid"], T["points"])
    t0 = time.perf_counter()
    cdf, st = theory_cdf(law, grid, delta, T["eps"])
    perf.append(dict(what=f"stieltjes, {grid.size} lambda, m=2, {N} samples (incl. compile)",
                     value=time.perf_counter() - t0, unit="s", ratio=None, note=f"{int(st.iterations.sum())} iterations"))
    rho, g = np.asarray(st.density), np.asarray(grid)
    R = T["refined"]                       # the reference theory: more samples (new key), smaller ε, finer grid
    t0 = time.perf_counter()
    gr = jnp.linspace(*T["grid"], R["points"])
    cdf_ref, st_ref = theory_cdf(toy_law(R["law_samples"], R["law_key"]), gr, delta, R["eps"])
    perf.append(dict(what=f"stieltjes, reference theory: {gr.size} lambda, {R['law_samples']} samples, eps={R['eps']:g} "
                          "(incl. compile)", value=time.perf_counter() - t0, unit="s", ratio=None,
                     note=f"{int(st_ref.iterations.sum())} iterations"))
    cdf_wrong = {dc: theory_cdf(law, grid, dc, T["eps"])[0] for dc in T["control_deltas"]}   # negative controls: wrong δ
    stride = (R["points"] - 1) // (T["points"] - 1)
    Rz = T["resolvent"]                    # the resolvent check: quadrature theory, its Jacobian in δ, its discretization
    zg, h = resolvent_grid(Rz), Rz["jacobian_step"]
    t0 = time.perf_counter()
    law_q = toy_quadrature_law(**Rz["quadrature"])
    g0 = theory_trace(law_q, zg, delta)
    J = (theory_trace(law_q, zg, delta + h) - theory_trace(law_q, zg, delta - h)) / (2 * h)
    g_fine = theory_trace(toy_quadrature_law(**Rz["refined_quadrature"]), zg, delta)
    g_mc = theory_trace(law, zg, delta)
    out_q = spectral.outlier(law_q, delta, "bottom")
    out_qf = spectral.outlier(toy_quadrature_law(**Rz["refined_quadrature"]), delta, "bottom")
    perf.append(dict(what=f"resolvent check theory: tr S/2 on {zg.size} complex z, quadrature law ({law_q.D.shape[0]} nodes) "
                          "at 3 δ, refined quadrature, engine Monte Carlo law (incl. compile)",
                     value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
    rs = dict(theory=[g0.real.tolist(), g0.imag.tolist()], jacobian=[J.real.tolist(), J.imag.tolist()],
              quadrature_discretization=float(np.max(np.abs(g0 - g_fine))),
              quadrature_discretization_delta=float(abs(delta_hat(g0, g_fine, J, delta) - delta)),
              engine_mc_discrepancy=float(np.max(np.abs(g_mc - g0))),
              engine_mc_delta=float(delta_hat(g_mc, g0, J, delta)),
              delta_hat_conditional=[], delta_hat_quadrature=[], mean_residual_conditional=[], stderr_residual_conditional=[])
    scan = dict(ks=[], ks_engine=[], ks_control={str(dc): [] for dc in T["control_deltas"]}, bottom=[], cosine2=[])
    t0 = time.perf_counter()
    for d, seeds in zip(T["ds"], T["seeds"]):
        per = {k_: [] for k_ in scan if k_ != "ks_control"} | {str(dc): [] for dc in T["control_deltas"]}
        gd, ge = [], []
        for s in range(seeds):
            last = d == T["ds"][-1]        # eigenvectors (outlier cos²) at the largest d only
            ev, V, own = toy_spectrum(d, delta, jax.random.fold_in(jax.random.key(T["matrix_key"]), 1000 * d + s),
                                      vectors=last, blocks=True)
            gd.append(resolvent_trace(ev, zg))
            ge.append(theory_trace(own, zg, delta))
            per["ks"].append(ks_distance(cdf_ref, np.asarray(gr), ev))
            per["ks_engine"].append(ks_distance(cdf, g, ev))
            for dc in T["control_deltas"]:
                per[str(dc)].append(ks_distance(cdf_wrong[dc], g, ev))
            per["bottom"].append(float(ev[0]))
            per["cosine2"].append(float(np.sum(V[:2, 0] ** 2)) if last else None)
            evs = ev
        gd, ge = np.array(gd), np.array(ge)
        rs["delta_hat_conditional"].append(delta_hat(gd, ge, J, delta).tolist())
        rs["delta_hat_quadrature"].append(delta_hat(gd, g0, J, delta).tolist())
        r_ = gd - ge
        rs["mean_residual_conditional"].append([r_.mean(0).real.tolist(), r_.mean(0).imag.tolist()])
        rs["stderr_residual_conditional"].append([(r_.real.std(0, ddof=1) / np.sqrt(seeds)).tolist(),
                                                  (r_.imag.std(0, ddof=1) / np.sqrt(seeds)).tolist()])
        for k_ in scan:
            if k_ == "ks_control":
                for dc in T["control_deltas"]:
                    scan[k_][str(dc)].append(per[str(dc)])
            else:
                scan[k_].append(per[k_])
    perf.append(dict(what=f"dense eigh of the m=2 toy matrix at d={T['ds']} ({T['seeds']} seeds)",
                     value=time.perf_counter() - t0, unit="s", ratio=None,
                     note="numpy eigvalsh; eigh with eigenvectors at the largest d"))
    toy = dict(theory_outlier=float(out.eigenvalue), theory_cosine2=float(out.cosine2),
               quadrature_outlier=float(out_q.eigenvalue), quadrature_cosine2=float(out_q.cosine2),
               quadrature_outlier_refined=float(out_qf.eigenvalue), quadrature_cosine2_refined=float(out_qf.cosine2),
               engine_vs_reference=float(np.max(np.abs(cdf - cdf_ref[::stride]))),
               mass_on_grid=float(cdf[-1]), reference_mass_on_grid=float(cdf_ref[-1]),
               converged=int(np.sum(np.asarray(st.converged))), reference_converged=int(np.sum(np.asarray(st_ref.converged))),
               **scan)
    acc += toy_rows(T, toy) + resolvent_rows(T, rs)
    # ---- speed: 512 λ, m = 4, one vmapped compile -----------------------------------------
    Ns, nl = (1_000, 64) if tiny else (2_000, 128) if quick else (100_000, 512)
    A = jax.random.normal(jax.random.key(11), (Ns, 4, 4)) / 2.0
    law4 = spectral.law_from_samples(jnp.tanh(A + jnp.swapaxes(A, 1, 2)), unbounded=())
    lam = jnp.linspace(-3.0, 3.0, nl)
    t0 = time.perf_counter()
    r4 = spectral.stieltjes(law4, lam, 4.0, eps=1e-2, throw=False)
    r4.density.block_until_ready()
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    r4 = spectral.stieltjes(law4, lam + 1e-3, 4.0, eps=1e-2, throw=False)
    r4.density.block_until_ready()
    t_run = time.perf_counter() - t0
    perf.append(dict(what=f"stieltjes {nl} lambda, m=4, {Ns} samples, eps=1e-2 (after compile)", value=t_run,
                     unit="s", ratio=None, note=(f"first call incl. compile {t_first:.1f}s; "
                                                 f"{int(r4.iterations.sum())} iterations total; "
                                                 f"converged {int(r4.converged.sum())}/{nl}; quick mode is reduced from 512 x 1e5 "
                                                 "(~2 us per sample-lambda-iteration on this 2-core CPU, complex128)")))

    # ---- speed: edge-bisection probes that stop when they stall (probe_patience; not in quick mode:
    # two more compilations for a timing, and the tests check the numbers) ------------------------
    if not tiny:
        perf += [probe_patience_row(lambda **kw: spectral.outlier(law, delta, "bottom", **kw),
                                    f"outlier, m=2 toy law, {N} samples"),
                 probe_patience_row(lambda **kw: spectral.bulk_edge(law4, 4.0, "bottom", **kw),
                                    f"bulk_edge, m=4, {Ns} samples")]

    fig, ax = plt.subplots(1, 3, figsize=(15, 3.4))
    ax[0].hist(evs, bins=120, density=True, alpha=0.5, label=f"dense eigh d={T['ds'][-1]}")
    ax[0].plot(g, rho, "k", lw=1, label="block Stieltjes")
    ax[0].axvline(float(out.eigenvalue), color="r", lw=0.8, label="predicted outlier")
    ax[0].legend(fontsize=7)
    ax[0].set_title(f"m=2 toy law, delta={delta}", fontsize=8)
    inv = 1.0 / np.asarray(T["ds"], float)
    xs = np.linspace(0, inv.max(), 20)
    curves = [(toy["ks"], "reference theory", "k")] + [(toy["ks_control"][str(dc)], f"control: engine theory at δ={dc:g}",
                                                          f"C{3 + i}") for i, dc in enumerate(T["control_deltas"])]
    for ks_, lab, c in curves:
        f = seed_limit(T["ds"], ks_)
        ax[1].errorbar(inv, f["mean"], f["stderr"], fmt="o", color=c, label=lab)
        ax[1].plot(xs, f["b"] + f["c"] * xs, "--", color=c, lw=0.8)
    ax[1].set_xlabel("1/d")
    ax[1].set_ylabel("Kolmogorov distance")
    ax[1].legend(fontsize=7)
    for k_, lab, c in (("delta_hat_conditional", "theory with the matrix's own D_i", "k"),
                       ("delta_hat_quadrature", "theory with the exact law (quadrature)", "C0")):
        f = seed_limit(T["ds"], rs[k_])
        ax[2].errorbar(inv, f["mean"], f["stderr"], fmt="o", color=c, label=lab)
        ax[2].plot(xs, f["b"] + f["c"] * xs, "--", color=c, lw=0.8)
    ax[2].axhline(delta, color="r", lw=0.8)
    ax[2].set_xlabel("1/d")
    ax[2].set_ylabel("δ implied by the resolvent trace")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "spectral.png", dpi=120)
    plt.close(fig)
    return dict(setting=dict(quick=quick, toy=T,
                             note="the THEORY §2 DMFT-state check is in spectral_finite_size (d = 1000-4000, paths >> n) "
                                  "and spectral_dmft_state (bounded D)"),
                data=dict(toy=toy, resolvent=rs),
                accuracy=acc, performance=perf, figure="spectral.png")


def reanalyze(res: dict) -> dict:
    """The m = 2 toy rows recomputed from the stored per-seed KS distances and eigenpairs (the other rows kept)."""
    toy = toy_rows(res["setting"]["toy"], res["data"]["toy"])
    if "resolvent" in res["data"]:
        toy += resolvent_rows(res["setting"]["toy"], res["data"]["resolvent"])
    rest = [r for r in res["accuracy"] if not r["quantity"].startswith("m=2 toy")]
    return dict(res, accuracy=rest + toy)
