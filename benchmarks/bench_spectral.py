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
                ds=[250, 500] if tiny else [250, 500, 1000, 2000], seeds=[8, 8] if tiny else [16, 8, 8, 8],
                matrix_key=100, control_deltas=[6.6, 7.5], law_key=0,
                D="[[1-3tanh((zeta^2-1)_+), 0.3tanh(u1)], [., 1+0.5tanh(u2)]]",
                ks="sup over the grid points of |theory CDF − empirical CDF of the 2d eigenvalues|; theory CDF: trapezoid "
                   "integral of the Stieltjes density from the grid's left end")


def toy_law(N: int, key: int):
    k1, k2 = jax.random.split(jax.random.key(key))
    zeta = jax.random.normal(k1, (N,))
    import spectral
    return spectral.law_from_samples(toy_D(zeta, jax.random.normal(k2, (N, 2))), zeta=zeta, unbounded=())


def toy_spectrum(d: int, delta: float, key, vectors: bool = True):
    """Eigenvalues (and eigenvectors, else None) of the dense (1/n) Σ x_i x_iᵀ ⊗ D_i of the toy law, n = δ d."""
    import spectral
    n = int(delta * d)
    kx, ku = jax.random.split(key)
    X = jax.random.normal(kx, (n, d))
    H = np.asarray(spectral.dense_block_matrix(X, toy_D(X[:, 0], jax.random.normal(ku, (n, 2)))))
    return np.linalg.eigh(H) if vectors else (np.linalg.eigvalsh(H), None)


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


def ks_limit(ds, ks) -> dict:
    """Weighted fit of the seed-mean KS distance = b + c/d (s.e. from the seeds): the d → ∞ limit b is the
    distance of the theory to the true limiting law (0 for an exact theory, up to its discretization); a
    wrong theory leaves b > 0."""
    from .bench_success_bounded import weighted_line
    m = np.array([np.mean(k) for k in ks])
    se = np.array([np.std(k, ddof=1) / np.sqrt(len(k)) for k in ks])
    beta, cov, chi2 = weighted_line(1.0 / np.asarray(ds, float), m, se)
    return dict(b=float(beta[0]), b_stderr=float(np.sqrt(cov[0, 0])), c=float(beta[1]), c_stderr=float(np.sqrt(cov[1, 1])),
                chi2=chi2, dof=len(ds) - 2, mean=m.tolist(), stderr=se.tolist())


def toy_rows(T, toy) -> list:
    """Rows of the m = 2 toy check from the stored per-seed values (recomputed by the test).

    KS (session 53; before: one d, one seed, a fixed tolerance 0.03 that nothing measured): the finite-d KS
    distance to the reference theory per d (reported), and its d → ∞ limit b of ``ks_limit`` against 0 with
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
    lim = ks_limit(ds, toy["ks"])
    ctl = {dc: ks_limit(ds, toy["ks_control"][str(dc)]) for dc in T["control_deltas"]}
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
    for what, th, x in (("bottom outlier location", toy["theory_outlier"], b),
                        ("outlier squared cosine with theta", toy["theory_cosine2"], c2)):
        se = float(np.std(x, ddof=1) / np.sqrt(len(x)))
        acc.append(dict(quantity=f"m=2 toy: {what} (the issue's 3% + t s.e.)", theory=float(th), simulation=float(np.mean(x)),
                        sim_stderr=se, d=int(ds[-1]), seeds=len(x), tolerance=float(0.03 * abs(th) + tf * se),
                        tolerance_rule=f"3% (issue #3) + t(0.99865, {len(x) - 1} dof) = {tf:.2f} s.e.",
                        agree=bool(abs(th - np.mean(x)) <= 0.03 * abs(th) + tf * se), reference="finite d"))
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
    scan = dict(ks=[], ks_engine=[], ks_control={str(dc): [] for dc in T["control_deltas"]}, bottom=[], cosine2=[])
    t0 = time.perf_counter()
    for d, seeds in zip(T["ds"], T["seeds"]):
        per = {k_: [] for k_ in scan if k_ != "ks_control"} | {str(dc): [] for dc in T["control_deltas"]}
        for s in range(seeds):
            last = d == T["ds"][-1]        # eigenvectors (outlier cos²) at the largest d only
            ev, V = toy_spectrum(d, delta, jax.random.fold_in(jax.random.key(T["matrix_key"]), 1000 * d + s), vectors=last)
            per["ks"].append(ks_distance(cdf_ref, np.asarray(gr), ev))
            per["ks_engine"].append(ks_distance(cdf, g, ev))
            for dc in T["control_deltas"]:
                per[str(dc)].append(ks_distance(cdf_wrong[dc], g, ev))
            per["bottom"].append(float(ev[0]))
            per["cosine2"].append(float(np.sum(V[:2, 0] ** 2)) if last else None)
            evs = ev
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
               engine_vs_reference=float(np.max(np.abs(cdf - cdf_ref[::stride]))),
               mass_on_grid=float(cdf[-1]), reference_mass_on_grid=float(cdf_ref[-1]),
               converged=int(np.sum(np.asarray(st.converged))), reference_converged=int(np.sum(np.asarray(st_ref.converged))),
               **scan)
    acc += toy_rows(T, toy)
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

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
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
        f = ks_limit(T["ds"], ks_)
        ax[1].errorbar(inv, f["mean"], f["stderr"], fmt="o", color=c, label=lab)
        ax[1].plot(xs, f["b"] + f["c"] * xs, "--", color=c, lw=0.8)
    ax[1].set_xlabel("1/d")
    ax[1].set_ylabel("Kolmogorov distance")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "spectral.png", dpi=120)
    plt.close(fig)
    return dict(setting=dict(quick=quick, toy=T,
                             note="the THEORY §2 DMFT-state check is in spectral_finite_size (d = 1000-4000, paths >> n) "
                                  "and spectral_dmft_state (bounded D)"),
                data=dict(toy=toy),
                accuracy=acc, performance=perf, figure="spectral.png")


def reanalyze(res: dict) -> dict:
    """The m = 2 toy rows recomputed from the stored per-seed KS distances and eigenpairs (the other rows kept)."""
    toy = toy_rows(res["setting"]["toy"], res["data"]["toy"])
    rest = [r for r in res["accuracy"] if not r["quantity"].startswith("m=2 toy")]
    return dict(res, accuracy=rest + toy)
