"""Hard-direction outliers against finite-d Hessians at growing d (issue #3 acceptance).

1. m = 2 toy law (bounded D, δ = 6; the ``bench_spectral`` law): predicted bottom outlier and
   squared cosine against the smallest eigenpair of ``(1/n) Σ x_i x_iᵀ ⊗ D_i`` (matrix-free
   Lanczos, float64) at d = 1000, 2000, 4000, several seeds per d; theory Monte Carlo error
   from two independent law samples.
2. DMFT state (phase retrieval, quadratic student m = 1, δ = 8, η = 0.01, t = 40; unbounded
   D = 6r² − 2y, finite-n convention n = δd): the outlier predicted from the DMFT law of
   (ζ, D) at t against the Lanczos bottom eigenpairs of the Hessian of the network trained by
   ``dmft.simulate`` to the same t, at d = 1000, 2000, 4000. The finite-n law cuts the 1/n
   tail of D, so the DMFT needs paths ≫ n (800 000 paths: ≥ 25 beyond the cut at n = 32 000;
   m = 1 and T = 40 keep that ~20 s a key on 2 cores). The finite-n edge is set by the largest
   y among n samples, so the seed spread is large. Near the edge the localized eigenvectors of
   the extreme samples share the outlier's hard weight: besides the bottom eigenvector's cos²,
   the hard weight summed over the eigenvectors below the predicted finite-n edge is compared
   with the predicted cos² (the residue of the hard direction's resolvent at the outlier).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
import spectral

from .bench_spectral import toy_D, toy_law

NAME = "spectral_finite_size"


def _se(x):
    x = np.asarray(x, float)
    return float(np.std(x, ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


def _power_fit(ds, dev, se, note="not resolved: deviation within 2 s.e. of zero at some d"):
    """Exponent p of |deviation| ∝ d^p, fitted only where the deviation is resolved (> 2 s.e. at
    every d); else ``note``."""
    ds, dev, se = (np.asarray(v, float) for v in (ds, dev, se))
    if np.all(np.abs(dev) > 2 * se) and ds.size >= 2:
        return float(np.polyfit(np.log(ds), np.log(np.abs(dev)), 1)[0])
    return note


def _row(q, th, th_se, sim, sim_se, d, seeds, tol):
    dev = abs(sim - th)
    return dict(quantity=q, theory=float(th), theory_stderr=float(th_se), simulation=float(sim), sim_stderr=float(sim_se),
                d=int(d), seeds=int(seeds), tolerance=float(tol), agree=bool(dev <= tol))


def _welch_row(q, keys, seeds, d, relative: bool):
    """Theory (independent law or DMFT keys) against finite-d seeds: tolerance the issue's 3 % of the theory
    (``relative``; else 0.03 absolute, for cos²) plus the Welch-t multiple of the combined s.e. with the coverage of
    3 normal s.e. (``bench_first_phase.welch_row``; session 54; was 3 s.e.: with 4–6 keys and 4–8 seeds that covers
    ~94–98 %); fewer than 3 on a side → not assessed. Shared by ``spectral_finite_size`` and ``spectral_dmft_state``."""
    from .bench_first_phase import welch_row
    keys = np.asarray(keys, float)
    return welch_row(q, keys, seeds, d, 0.03 * abs(keys.mean()) if relative else 0.03,
                     "3 % of the theory" if relative else "0.03")


def toy_rows(toy: dict) -> list:
    """The toy m = 2 outlier rows per d, from the stored per-key theory and per-seed Lanczos values."""
    th_l, th_c = toy["theory"]["eigenvalue"], toy["theory"]["cosine2"]
    acc = []
    for d, rec in toy["per_d"].items():
        acc.append(_welch_row("toy m=2 δ=6: bottom outlier location (3% + Welch t s.e.)", th_l, rec["eigenvalue"], int(d),
                              True))
        acc.append(_welch_row("toy m=2 δ=6: outlier squared cosine (3% + Welch t s.e.)", th_c, rec["cosine2"], int(d),
                              True))
    return acc


STATE_TAG = "DMFT state PR quadratic m=1 δ=8 t=40, finite-n n=δd"


def state_rows(dm: dict) -> list:
    """The DMFT-state rows per d (finite-n convention), from the stored per-key theory and per-seed Lanczos values."""
    acc = []
    for d, p in dm["per_d"].items():
        d, lam2 = int(d), np.asarray(p["eigenvalues"])[:, 1]
        acc += [_welch_row(f"{STATE_TAG}: bottom outlier vs smallest eigenvalue (3% + Welch t s.e.)", p["theory_eigenvalue"],
                           p["eigenvalue"], d, True),
                _welch_row(f"{STATE_TAG}: outlier cos² vs hard weight of the bottom eigenvector (0.03 + Welch t s.e.)",
                           p["theory_cosine2"], p["cosine2"], d, False),
                _welch_row(f"{STATE_TAG}: outlier cos² vs hard weight summed over the eigenvectors below the predicted edge "
                           "(0.03 + Welch t s.e.)", p["theory_cosine2"], p["hard_weight_below_edge"], d, False),
                _welch_row(f"{STATE_TAG}: bulk edge of the truncated law vs second smallest eigenvalue (3% + Welch t s.e.)",
                           p["theory_edge"], lam2, d, True)]
    return acc


def reanalyze(res: dict) -> dict:
    """The outlier / cos² / edge rows recomputed from the stored per-key and per-seed values (Welch t, session 54)."""
    return dict(res, accuracy=toy_rows(res["data"]["toy"]) + state_rows(res["data"]["dmft_state"]))


@jax.jit
def _toy_bottom(X, D, key):
    r = spectral.lanczos_extreme(spectral.block_matvec(X, D), (X.shape[1], D.shape[-1]), 1, key,
                                 which="smallest", tol=1e-9, throw=False)
    return r.eigenvalues[0], spectral.subspace_overlap(r.eigenvectors, 1)[0], r.status, r.iterations


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"
    outdir = pathlib.Path(outdir)
    # theory: mean over `keys` independent laws; s.e. = sd over keys / √keys (a 2-key spread
    # underestimated it 5-fold: measured sd of the toy outlier at 50 000 samples is 0.012)
    # keys and seeds (session 54): 8 / 16 for the toy, 8 / 8 for the DMFT state, so that the Welch-t tolerance
    # multiple is ~3.5–4.5 (with 6 keys × 4 seeds it was 7.7–8.9)
    S = dict(toy=dict(delta=6.0, law_samples=50_000, keys=8, ds=[1000, 2000, 4000], seeds=16),
             dmft=dict(delta=8.0, lr=0.01, steps=40, paths=800_000, keys=8, ds=[1000, 2000, 4000], seeds=8, lanczos_k=4))
    if tiny:
        S["toy"].update(law_samples=20_000, keys=3, ds=[250, 500], seeds=3)
        S["dmft"].update(paths=100_000, keys=3, ds=[250, 500], seeds=3)
    if not quick:
        S["toy"].update(ds=[1000, 2000, 4000, 8000], seeds=16)
        S["dmft"].update(paths=3_200_000, ds=[1000, 2000, 4000, 8000], seeds=16)
    acc, perf, data = [], [], {}

    # ---- 1. toy law -----------------------------------------------------------------------
    T = S["toy"]
    dl = T["delta"]
    th_l, th_c = [], []
    for k in range(T["keys"]):
        o = spectral.outlier(toy_law(T["law_samples"], k), dl, "bottom")
        th_l.append(float(o.eigenvalue))
        th_c.append(float(o.cosine2))
    lam_th, c2_th = np.mean(th_l), np.mean(th_c)
    lam_th_se, c2_th_se = _se(th_l), _se(th_c)
    toy = dict(theory=dict(eigenvalue=th_l, cosine2=th_c, edge=float(o.edge)), per_d={})
    for d in T["ds"]:
        n = int(dl * d)
        lam, c2, its = [], [], []
        t0 = time.perf_counter()
        for s in range(T["seeds"]):
            kx, ku, kl = jax.random.split(jax.random.key(1000 * d + s), 3)
            X = jax.random.normal(kx, (n, d))
            D = toy_D(X[:, 0], jax.random.normal(ku, (n, 2)))
            ev, c, st, it = _toy_bottom(X, D, kl)
            if int(st) != 0:
                raise RuntimeError(f"Lanczos did not converge (toy, d={d}, seed {s}, status {int(st)})")
            lam.append(float(ev))
            c2.append(float(c))
            its.append(int(it))
        perf.append(dict(what=f"toy m=2: Lanczos bottom eigenpair, d={d}, n={n} ({T['seeds']} seeds)",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=f"matvecs per seed {its}"))
        toy["per_d"][str(d)] = dict(eigenvalue=lam, cosine2=c2, matvecs=its)
    ds = np.array(T["ds"], float)
    dev_l = np.array([abs(np.mean(toy["per_d"][str(int(d))]["eigenvalue"]) - lam_th) for d in ds])
    dev_c = np.array([abs(np.mean(toy["per_d"][str(int(d))]["cosine2"]) - c2_th) for d in ds])
    se_l = np.array([np.hypot(_se(toy["per_d"][str(int(d))]["eigenvalue"]), lam_th_se) for d in ds])
    se_c = np.array([np.hypot(_se(toy["per_d"][str(int(d))]["cosine2"]), c2_th_se) for d in ds])
    toy["deviation"] = dict(eigenvalue=dev_l.tolist(), cosine2=dev_c.tolist(),
                            eigenvalue_in_se=(dev_l / se_l).tolist(), cosine2_in_se=(dev_c / se_c).tolist())
    # a power law in d is only fitted where the deviations are resolved (> 2 s.e. at every d)
    toy["fitted_exponent"] = {
        q: _power_fit(ds, dv, se, "not resolved: deviations within 2 s.e. of zero at some d (finite-size bias below the "
                                  "seed noise)")
        for q, dv, se in (("eigenvalue", dev_l, se_l), ("cosine2", dev_c, se_c))}
    data["toy"] = toy

    # ---- 2. DMFT state vs trained network ---------------------------------------------------
    Dm = S["dmft"]
    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    prob = dmft.Problem(pr, dmft.TwoLayer(activation=lambda r: r**2, width=1, second_layer=jnp.ones(1)))
    dl, lr, steps = Dm["delta"], Dm["lr"], Dm["steps"]
    trajs = [dmft.solve(prob, dl, lr, steps, Dm["paths"], jax.random.key(70 + k), save_samples_at=(steps,))
             for k in range(Dm["keys"])]
    lawds = [spectral.law_from_dmft(prob, tr, steps) for tr in trajs]

    kz = Dm["lanczos_k"]

    def lanczos_bottom(X, y, W, a, key):
        r = spectral.lanczos_extreme(spectral.hessian_vector_product(prob, X, y, a, W, method="blocks"), W.shape, kz, key,
                                     which="smallest", tol=1e-8, throw=False)
        return r.eigenvalues, spectral.subspace_overlap(r.eigenvectors, 1), r.status

    lanczos_bottom = jax.jit(lanczos_bottom)
    dm = dict(per_d={})
    for d in Dm["ds"]:
        n = int(dl * d)
        outs = [spectral.outlier(lw, dl, "bottom", convention="finite-n", n=n, throw=False) for lw in lawds]
        if not all(bool(o.exists) for o in outs):
            raise RuntimeError(f"DMFT state, d={d}: a key's finite-n law has no bottom outlier ({[bool(o.exists) for o in outs]})")
        th = [float(o.eigenvalue) for o in outs]
        thc = [float(o.cosine2) for o in outs]
        the = [float(o.edge) for o in outs]
        edge_th = float(np.mean(the))
        ev_all, w_all = [], []
        t0 = time.perf_counter()
        for s in range(Dm["seeds"]):  # one seed per simulate call: X is n×d float64 (1 GB at d = 4000)
            sim = dmft.simulate(prob, d, dl, lr, steps, 1, jax.random.key(800 + 10 * d + s), return_weights=True)
            X, y = dmft.simulation_data(prob, sim, 0)
            ev, w, st = lanczos_bottom(X, y, sim.W[0], sim.a[0], jax.random.key(s))
            if int(st) != 0:
                raise RuntimeError(f"Lanczos did not converge (DMFT state, d={d}, seed {s}, status {int(st)})")
            ev_all.append(np.asarray(ev).tolist())
            w_all.append(np.asarray(w).tolist())
            del X, y, sim
        ev_all, w_all = np.array(ev_all), np.array(w_all)
        below = ev_all < edge_th
        if np.any(below[:, -1]):
            raise RuntimeError(f"DMFT state, d={d}: all {kz} Lanczos eigenvalues lie below the predicted edge {edge_th:.3f} "
                               "in some seed; raise lanczos_k")
        w_below = np.sum(np.where(below, w_all, 0.0), axis=1)
        lam, c2 = ev_all[:, 0], w_all[:, 0]
        perf.append(dict(what=f"DMFT-state check: GD + Lanczos ({kz} smallest) at d={d}, n={n} ({Dm['seeds']} seeds)",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
        dm["per_d"][str(d)] = dict(theory_eigenvalue=th, theory_cosine2=thc, theory_edge=the, eigenvalues=ev_all.tolist(),
                                   hard_weights=w_all.tolist(), eigenvalue=lam.tolist(), cosine2=c2.tolist(),
                                   below_edge=below.sum(axis=1).tolist(), hard_weight_below_edge=w_below.tolist())
    dm["deviation"] = {}
    per = [dm["per_d"][str(d)] for d in Dm["ds"]]
    for q, key_th in (("eigenvalue", "theory_eigenvalue"), ("cosine2", "theory_cosine2"),
                      ("hard_weight_below_edge", "theory_cosine2")):
        dev = np.array([np.mean(p[q]) - np.mean(p[key_th]) for p in per])
        se = np.array([np.hypot(_se(p[q]), _se(p[key_th])) for p in per])
        dm["deviation"][q] = dict(value=dev.tolist(), in_se=(dev / se).tolist(), fitted_exponent=_power_fit(Dm["ds"], dev, se))
    data["dmft_state"] = dm
    acc += toy_rows(toy) + state_rows(dm)

    res = dict(setting=S, accuracy=acc, performance=perf, data=data, figure="spectral_finite_size.png")
    replot(res, outdir)
    return res


def replot(res, outdir):
    """The figure from the result dict (``python -m benchmarks replot spectral_finite_size``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    toy, dm = res["data"]["toy"], res["data"]["dmft_state"]
    ds_toy = sorted(int(d) for d in toy["per_d"])
    ds_dm = sorted(int(d) for d in dm["per_d"])
    lam_th, c2_th = np.mean(toy["theory"]["eigenvalue"]), np.mean(toy["theory"]["cosine2"])
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    for d in ds_toy:
        pdd = toy["per_d"][str(d)]
        axes[0].errorbar([d], [np.mean(pdd["eigenvalue"])], [_se(pdd["eigenvalue"])], fmt="o", color="C0")
        axes[1].errorbar([d], [np.mean(pdd["cosine2"])], [_se(pdd["cosine2"])], fmt="o", color="C1")
    axes[0].axhline(lam_th, color="C0", lw=0.8, label="theory (block Stieltjes)")
    axes[1].axhline(c2_th, color="C1", lw=0.8, label="theory")
    axes[0].set_title("toy m=2: bottom outlier vs d")
    axes[1].set_title("toy m=2: cos² vs d")
    for i, d in enumerate(ds_dm):
        pdd = dm["per_d"][str(d)]
        ev = np.array(pdd["eigenvalues"])
        axes[2].errorbar([d], [ev[:, 0].mean()], [_se(ev[:, 0])], fmt="o", color="C2",
                         label="smallest eigenvalue" if i == 0 else None)
        axes[2].plot([d], [np.mean(pdd["theory_eigenvalue"])], "k_", ms=14, label="outlier (finite-n theory)" if i == 0 else None)
        axes[2].errorbar([d], [ev[:, 1].mean()], [_se(ev[:, 1])], fmt="s", color="C3", ms=4,
                         label="second smallest" if i == 0 else None)
        axes[2].plot([d], [np.mean(pdd["theory_edge"])], "_", color="C3", ms=14, label="edge (finite-n theory)" if i == 0 else None)
        axes[3].errorbar([d * 0.97], [np.mean(pdd["cosine2"])], [_se(pdd["cosine2"])], fmt="o", color="C4",
                         label="bottom eigenvector" if i == 0 else None)
        axes[3].errorbar([d * 1.03], [np.mean(pdd["hard_weight_below_edge"])], [_se(pdd["hard_weight_below_edge"])], fmt="D",
                         color="C5", ms=4, label="summed below the edge" if i == 0 else None)
        axes[3].plot([d], [np.mean(pdd["theory_cosine2"])], "k_", ms=14, label="outlier cos² (theory)" if i == 0 else None)
    axes[2].set_title("DMFT state (PR, quadratic m=1): bottom eigenvalues", fontsize=9)
    axes[3].set_title("DMFT state: hard weight (GD ± s.e.)", fontsize=9)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("d")
        ax.legend(fontsize=7) if ax.get_legend_handles_labels()[0] else None
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "spectral_finite_size.png", dpi=110)
    plt.close(fig)

