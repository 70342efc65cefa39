"""DMFT states with a bounded-below D: predicted bulk and hard-direction outliers against the
Hessian of the network GD trained to the same time, at d = 1000, 2000, 4000 (issue #3).

Two settings, both phase retrieval ``y = z²`` (hard only), width m = 2, frozen second layer,
Huber loss of width 1, no ridge, ``Q_0 = I``, ``M^0 = 0``, δ = 8, η = 0.1, t = 20 steps (t·η = 2):
- ``quadratic``: ``σ(r) = r²``, ``a = (0.6, 0.4)`` (unequal, so no exact rotation symmetry of the
  hidden units). ``ℓ' ∈ [−1, 1]`` and ``∇²F = 2 diag(a)``, so ``D = ℓ''·F'F'ᵀ + ℓ'·∇²F ≥ −1.2``:
  bounded below (the top side is unbounded through ``r²`` and enters neither the left edge nor
  the bottom outliers). Two bottom outliers (one per eigenvalue branch of the 2×2 matrix A).
- ``gelu``: ``σ(r) = rΦ(r)``, ``a = (1, 1)``: ``F'`` and ``∇²F`` are bounded, so D is bounded on
  both sides (≥ −2φ(0) = −0.798). One bottom outlier; the second branch stops just short of the
  edge (margin ≈ +0.03), a near-threshold case.
The strict convention applies (no finite-n truncation, unlike ``spectral_finite_size``'s
square-loss check).

Theory (``keys`` independent DMFT solves): the law of (ζ, D) at t, every bottom outlier
(``spectral.all_outliers``), their squared cosines with the hard subspace, the bulk left edge
(``spectral.bulk_edge``) and the bulk density (``spectral.stieltjes``). Simulation:
``dmft.simulate`` to the same t (hard overlap started at exactly 0, as in the DMFT), the
W-Hessian at the final state: the 3 smallest eigenpairs by Lanczos (hard-row weight of each
eigenvector), the smallest eigenvalue with the hard rows removed (the bulk edge seen by the rest,
``spectral.finite_state``'s constrained edge), and at d ≤ ``dense_max`` all eigenvalues by dense
eigh for the Kolmogorov distance to the theory CDF. Tolerances: 3% of the value plus the Welch-t
multiple of the combined s.e. of keys and seeds (coverage of 3 normal s.e.; ``location_rows``, session 54) for
locations and the edge, 0.03 plus the same for cos²; the
Kolmogorov distance is reported, not assessed (``ks_row``; session 53, ``reanalyze``: the fixed 0.03 used
before could not detect even a 50 % error in δ — ``bench_spectral`` — and the null of this theory, a
DMFT law of finitely many paths, is not measured here; ``bench_spectral`` and ``bench_stieltjes_grid``
assess the density against a measured null); the trend in d of each deviation is reported (a power
law is fitted only where the deviation is resolved).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
import spectral

from spectral.finite_state import hard_rows_shifted, shift_above

from .bench_spectral import (delta_hat, delta_limit, ks_distance, resolvent_grid, resolvent_trace, theory_trace,
                             trapezoid_cdf)
from .bench_spectral_finite_size import _power_fit, _se, _welch_row

NAME = "spectral_dmft_state"


def _gelu(r):
    return r * jax.scipy.stats.norm.cdf(r)


ACTIVATIONS = {"quadratic": lambda r: r**2, "gelu": _gelu}


def problem(a=(0.6, 0.4), huber_width=1.0, activation="quadratic"):
    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    m = len(a)
    return dmft.Problem(pr, dmft.TwoLayer(activation=ACTIVATIONS[activation], width=m, second_layer=jnp.asarray(a, float)),
                        loss=dmft.huber_loss(huber_width), init=dmft.Init(q0=jnp.eye(m), overlap=jnp.zeros((1, m))))


def settings(mode: str) -> dict:
    """Two settings: the quadratic student (two outliers; D bounded below only) and GeLU (one outlier,
    a second branch just short of leaving the bulk; D bounded on both sides: ℓ'' ∈ {0, 1}, F' and
    ∇²F bounded)."""
    common = dict(huber_width=1.0, delta=8.0, lr=0.1, steps=20, paths=50_000, keys=8, ds=[1000, 2000, 4000], seeds=8,
                  dense_max=2000, lanczos=dict(k=3, tol=1e-8, max_iters=300), density=dict(grid=[-1.0, 6.0, 281], eps=2e-3),
                  hard_rows="the first teacher axis (simulate's Θ* = e_1)",
                  resolvent=dict(ds=[500, 1000, 2000, 4000], seeds=[16, 16, 8, 4], dense_max=2000, points=18,
                                 etas=[0.05, 0.2, 0.5], jacobian_step=0.05, key_offset=5000,
                                 statistic="δ̂ = δ + <g − g_ref, J>/<J, J> over Re and Im of every grid point, "
                                           "g = (1/2d) tr (H − z)^-1 = tr S(z)/2, J = dg/dδ at key 0's DMFT law "
                                           "(central difference); λ spans the density grid"))
    S = dict(settings=[
        dict(common, name="quadratic", activation="quadratic", a=[0.6, 0.4],
             problem="phase retrieval y=z^2, quadratic student m=2, a=(0.6, 0.4) frozen, Huber loss width 1, ridge 0, Q0=I, M0=0",
             convention="strict (D >= -1.2: bounded below; top side unbounded through r^2, not used)"),
        dict(common, name="gelu", activation="gelu", a=[1.0, 1.0], density=dict(grid=[-0.6, 3.4, 281], eps=2e-3),
             problem="phase retrieval y=z^2, GeLU (x Phi(x)) student m=2, a=(1, 1) frozen, Huber loss width 1, ridge 0, Q0=I, M0=0",
             convention="strict (D bounded on both sides, D >= -2 phi(0) = -0.798)")])
    for st in S["settings"]:
        if mode == "quick":
            st.update(paths=10_000, keys=3, ds=[250, 500], seeds=3, dense_max=500,
                      density=dict(st["density"], grid=st["density"]["grid"][:2] + [141], eps=4e-3),
                      resolvent=dict(st["resolvent"], ds=[250, 500], seeds=[4, 4], dense_max=500))
        if mode == "full":
            st.update(ds=[1000, 2000, 4000, 8000], seeds=8, dense_max=2000,
                      resolvent=dict(st["resolvent"], ds=[500, 1000, 2000, 4000, 8000], seeds=[16, 16, 8, 8, 8],
                                     dense_max=4000))
    return S


def _finite_d(prob, k, tol, max_iters):
    """Jitted: bottom ``k`` eigenpairs of H at (X, y, W, a) with their hard-row weights, and the
    two smallest eigenvalues of H with the hard row (index 0) removed (``spectral.finite_state``'s
    constrained edge; X is an argument, not a closed-over constant)."""

    def f(X, y, W, a, key):
        D = spectral.finite_blocks(prob, X, y, a, W)
        mv = spectral.block_matvec(X, D)
        r = spectral.lanczos_extreme(mv, W.shape, k, key, which="smallest", tol=tol, max_iters=max_iters, throw=False)
        mv_c = hard_rows_shifted(mv, jnp.arange(W.shape[0]) == 0, shift_above(D, X.shape[0], W.shape[0]))
        rc = spectral.lanczos_extreme(mv_c, W.shape, 2, jax.random.fold_in(key, 1), which="smallest", tol=tol,
                                      max_iters=max_iters, throw=False)
        weight = jnp.sum(r.eigenvectors[:, 0, :] ** 2, axis=-1)
        return r.eigenvalues, weight, r.status, r.iterations, rc.eigenvalues, rc.status, rc.iterations

    return jax.jit(f)


def location_rows(tag: str, th: dict, rec: dict, d: int, n_out: int) -> list:
    """Outlier locations, cos² (hard-row weight) and the bulk edge at one d: the DMFT keys (theory) against the GD
    seeds at the issue's 3 % (0.03 absolute for cos²) plus the Welch-t multiple of the combined s.e.
    (``bench_spectral_finite_size._welch_row``; session 54, before: 3 s.e., which with 4 keys and 4 seeds covers
    only ~96 %)."""
    lam, c2 = np.asarray(th["eigenvalue"])[:, :n_out], np.asarray(th["cosine2"])[:, :n_out]
    ev, w = np.asarray(rec["eigenvalues"]), np.asarray(rec["hard_weight"])
    out = []
    for j in range(n_out):
        label = ("first (smallest)", "second", "third")[j]
        out.append(_welch_row(f"{tag}: {label} bottom outlier vs j-th eigenvalue (3% + Welch t s.e.)", lam[:, j], ev[:, j],
                              d, True))
        out.append(_welch_row(f"{tag}: {label} outlier cos² vs hard-row weight (0.03 + Welch t s.e.)", c2[:, j], w[:, j],
                              d, False))
    out.append(_welch_row(f"{tag}: bulk left edge vs smallest eigenvalue off the hard rows (3% + Welch t s.e.)",
                          th["edge"], np.asarray(rec["constrained"])[:, 0], d, True))
    return out


def ks_row(tag: str, ks, d: int) -> dict:
    """The Kolmogorov distance of the theory CDF to the dense eigenvalues: reported, not assessed (no measured null)."""
    return dict(quantity=f"{tag}: Kolmogorov distance, theory CDF vs dense eigenvalues (reported)", theory=0.0,
                theory_stderr=0.0, simulation=float(np.mean(ks)), sim_stderr=float(_se(ks)), d=int(d), seeds=len(ks),
                tolerance=None, agree=None, reference="finite d",
                note="not assessed: no measured null for a DMFT law of finitely many paths; a fixed 0.03 (used before "
                     "session 53) cannot detect a 50 % error in δ (bench_spectral); the density is assessed against a "
                     "measured null in spectral.json and stieltjes_grid.json")


def resolvent_rows(tag: str, R: dict, rz: dict, delta: float) -> list:
    """Rows of the resolvent check at a DMFT state (session 54; the KS distance is blind to a 25 % error in δ).

    Per GD network, δ̂ (``bench_spectral.delta_hat``) of its normalized resolvent trace or of a theory, splitting the
    comparison "dense spectrum vs the DMFT theory" in two:
    - **conditional**: the spectrum against the equation solved with the network's own n blocks D_i — is the Hessian
      of a trained network the block sample-covariance form at its own blocks (x_i treated as fresh)? O(1/d) bias
      expected if so: d → ∞ limit of b + c/d over the dense d, tolerance t(0.99865, seeds − 1)·s.e.(b);
    - **law**: the theory with the network's own blocks against the theory with the DMFT law (no eigenvalues needed:
      reaches the largest d) — is the DMFT's law of D right? Welch t against the DMFT keys' δ̂ at the largest d
      (the keys' spread is the DMFT's Monte Carlo error), the other d reported;
    - **total** (spectrum against the DMFT theory = conditional + law): reported per d."""
    from .bench_first_phase import welch_rule, welch_tolerance
    keys = np.asarray(rz["delta_hat_keys"], float)
    ds = [int(d) for d in rz["ds"]]
    dense = [d for d in ds if rz["per_d"][str(d)]["delta_hat_conditional"]]
    acc = []
    for d in dense:
        v = np.asarray(rz["per_d"][str(d)]["delta_hat_conditional"], float)
        acc.append(dict(quantity=f"{tag}: resolvent, δ implied by (1/2d) tr (H − z)⁻¹ against the equation at the network's "
                                 "own blocks D_i (conditional; reported, assessed through its d → ∞ limit)",
                        theory=float(delta), theory_stderr=0.0, simulation=float(v.mean()), sim_stderr=_se(v), d=d,
                        seeds=int(v.size), tolerance=None, agree=None, reference="finite d"))
    if len(dense) >= 2:
        fit = delta_limit(dense, [rz["per_d"][str(d)]["delta_hat_conditional"] for d in dense], delta)
        acc.append(dict(quantity=f"{tag}: resolvent, conditional δ̂ extrapolated to d → ∞ (fit b + c/d over d = {dense})",
                        theory=float(delta), theory_stderr=0.0, simulation=fit["b"], sim_stderr=fit["b_stderr"], d=max(dense),
                        seeds=int(sum(len(rz["per_d"][str(d)]["delta_hat_conditional"]) for d in dense)),
                        tolerance=fit["tolerance"], tolerance_rule=fit["rule"], agree=fit["agree"],
                        reference="finite d, extrapolated",
                        note=f"c = {fit['c']:.3g} ± {fit['c_stderr']:.2g}, χ² {fit['chi2']:.2f} on {fit['dof']} dof; "
                             f"detects a δ error of {100 * fit['tolerance'] / delta:.2g} %"))
    for d in ds:
        v = np.asarray(rz["per_d"][str(d)]["delta_hat_law"], float)
        last = d == max(ds)
        tol, f, dof = welch_tolerance(keys, v) if last else (float("nan"),) * 3
        acc.append(dict(quantity=f"{tag}: resolvent, δ implied by the theory at the network's own blocks D_i against the "
                                 f"DMFT law (law check{'' if last else '; reported'})",
                        theory=float(delta), theory_stderr=_se(keys), simulation=float(v.mean()), sim_stderr=_se(v), d=d,
                        seeds=int(v.size), tolerance=None if not np.isfinite(tol) else float(tol),
                        agree=None if not np.isfinite(tol) else bool(abs(v.mean() - delta) <= tol),
                        reference="finite d", **(dict(tolerance_rule=welch_rule(f, dof)) if last and np.isfinite(tol) else {}),
                        note=f"theory: {keys.size} DMFT keys (δ̂ spread per key {np.std(keys, ddof=1):.3g})"
                             + ("" if not last or np.isfinite(tol) else "; not assessed: fewer than 3 keys or seeds")))
    for d in dense:
        v = np.asarray(rz["per_d"][str(d)]["delta_hat_total"], float)
        acc.append(dict(quantity=f"{tag}: resolvent, δ implied by (1/2d) tr (H − z)⁻¹ against the DMFT theory (total = "
                                 "conditional + law; reported)", theory=float(delta), theory_stderr=_se(keys),
                        simulation=float(v.mean()), sim_stderr=_se(v), d=d, seeds=int(v.size), tolerance=None, agree=None,
                        reference="finite d"))
    return acc


def resolvent_check(prob, S: dict, laws: list) -> tuple:
    """The data of :func:`resolvent_rows`: the DMFT theory per key, its Jacobian in δ, and per GD network (keys
    apart from the main loop's) the resolvent trace of the dense Hessian (d ≤ dense_max) and the theory at the
    network's own blocks. Returns (data, performance rows)."""
    R, dl = S["resolvent"], S["delta"]
    z = resolvent_grid(dict(lam=S["density"]["grid"][:2] + [R["points"]], etas=R["etas"]))
    t0 = time.perf_counter()
    g_keys = np.array([theory_trace(law, z, dl) for law in laws])
    g_th, h = g_keys.mean(0), R["jacobian_step"]
    J = (theory_trace(laws[0], z, dl + h) - theory_trace(laws[0], z, dl - h)) / (2 * h)
    perf = [dict(what=f"{S['name']}: resolvent theory, tr S/2 on {z.size} complex z for {len(laws)} DMFT laws + Jacobian",
                 value=time.perf_counter() - t0, unit="s", ratio=None, note="incl. compilation")]
    rz = dict(ds=R["ds"], delta_hat_keys=delta_hat(g_keys, g_th, J, dl).tolist(),
              theory=[g_th.real.tolist(), g_th.imag.tolist()], jacobian=[J.real.tolist(), J.imag.tolist()], per_d={})
    for d, seeds in zip(R["ds"], R["seeds"]):
        rec = dict(delta_hat_conditional=[], delta_hat_law=[], delta_hat_total=[])
        t0 = time.perf_counter()
        for s in range(seeds):
            sim = dmft.simulate(prob, d, dl, S["lr"], S["steps"], 1, jax.random.key(R["key_offset"] + 10 * d + s),
                                return_weights=True)
            X, y = dmft.simulation_data(prob, sim, 0)
            D = spectral.finite_blocks(prob, X, y, sim.a[0], sim.W[0])
            ge = theory_trace(spectral.law_from_samples(D, unbounded=(), source="the network's own blocks"), z, dl)
            rec["delta_hat_law"].append(float(delta_hat(ge, g_th, J, dl)))
            if d <= R["dense_max"]:
                g = resolvent_trace(np.linalg.eigvalsh(np.asarray(spectral.dense_block_matrix(X, D))), z)
                rec["delta_hat_conditional"].append(float(delta_hat(g, ge, J, dl)))
                rec["delta_hat_total"].append(float(delta_hat(g, g_th, J, dl)))
            del X, y, sim, D
        perf.append(dict(what=f"{S['name']}: resolvent check at d={d}: GD + own-block theory"
                              + (" + dense eigvalsh" if d <= R["dense_max"] else "") + f" ({seeds} seeds)",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note="incl. compilation"))
        rz["per_d"][str(d)] = rec
    return rz, perf


def reanalyze(res: dict) -> dict:
    """The Kolmogorov-distance rows become reported (not assessed): their fixed 0.03 had no measured null; the
    resolvent rows are recomputed from the stored δ̂; the location rows with their Welch-t tolerance."""
    acc, done = [], set()
    for r in res["accuracy"]:
        if "Kolmogorov distance" in r["quantity"]:
            name = next(S["name"] for S in res["setting"]["settings"] if f"PR {S['name']} " in r["quantity"])
            r = ks_row(r["quantity"].split(": Kolmogorov")[0], res["data"][name]["per_d"][str(r["d"])]["ks"], r["d"])
        if " (3% + " in r["quantity"] or " (0.03 + " in r["quantity"]:    # location rows: Welch t (session 54)
            S = next(S for S in res["setting"]["settings"] if r["quantity"].startswith(_tag(S) + ":"))
            if (S["name"], r["d"]) in done:
                continue
            done.add((S["name"], r["d"]))
            dat = res["data"][S["name"]]
            acc += location_rows(_tag(S), dat["theory"], dat["per_d"][str(r["d"])], r["d"], dat["theory"]["outliers"])
            continue
        if ": resolvent, " in r["quantity"]:      # each setting's block recomputed in place
            S = next(S for S in res["setting"]["settings"] if r["quantity"].startswith(_tag(S) + ":"))
            if S["name"] in done:
                continue
            done.add(S["name"])
            acc += resolvent_rows(_tag(S), S["resolvent"], res["data"][S["name"]]["resolvent"], S["delta"])
            continue
        acc.append(r)
    return dict(res, accuracy=acc)


def _tag(S: dict) -> str:
    return f"DMFT state PR {S['name']} m=2 Huber δ={S['delta']:g} tη={S['lr'] * S['steps']:g}"


def run_setting(S: dict):
    """Theory and finite-d spectra for one setting: (accuracy rows, performance rows, data)."""
    prob = problem(tuple(S["a"]), S["huber_width"], S["activation"])
    dl, lr, steps = S["delta"], S["lr"], S["steps"]
    tag = _tag(S)
    acc, perf, data = [], [], dict(theory={}, per_d={})

    # ---- theory: DMFT law at t, every bottom outlier, edge, density ----------------------------
    th = dict(eigenvalue=[], cosine2=[], margin=[], edge=[], unbounded=[], exists=[], status=[])
    t0 = time.perf_counter()
    laws = []
    for k in range(S["keys"]):
        tr = dmft.solve(prob, dl, lr, steps, S["paths"], jax.random.key(70 + k), save_samples_at=(steps,))
        law = spectral.law_from_dmft(prob, tr, steps)
        if "bottom" in law.unbounded:
            raise RuntimeError("the DMFT law came out unbounded below; this benchmark's settings must keep D bounded below")
        o = spectral.all_outliers(law, dl, "bottom")
        e = spectral.bulk_edge(law, dl, "bottom")
        for key_, v in (("eigenvalue", o.eigenvalue), ("cosine2", o.cosine2), ("margin", o.margin), ("exists", o.exists),
                        ("status", o.status)):
            th[key_].append(np.asarray(v).tolist())
        th["edge"].append(float(e.edge))
        th["unbounded"].append(list(law.unbounded))
        laws.append(law)
    perf.append(dict(what=f"{S['name']}: theory, {S['keys']} DMFT solves (T={steps}, {S['paths']} paths) + all_outliers + bulk_edge",
                     value=time.perf_counter() - t0, unit="s", ratio=None, note="incl. compilation"))
    exists = np.array(th["exists"])
    if not np.all(exists == exists[0]):
        raise RuntimeError(f"{S['name']}: the number of outliers differs between keys ({th['exists']}): the setting is at a "
                           "branch threshold; move it")
    n_out = int(exists[0].sum())
    th["outliers"] = n_out
    lam = np.array(th["eigenvalue"])[:, :n_out]
    c2 = np.array(th["cosine2"])[:, :n_out]
    lam_th, c2_th = lam.mean(axis=0), c2.mean(axis=0)
    lam_se = lam.std(axis=0, ddof=1) / np.sqrt(S["keys"])
    c2_se = c2.std(axis=0, ddof=1) / np.sqrt(S["keys"])
    edge_th, edge_se = float(np.mean(th["edge"])), _se(th["edge"])
    lo, hi, num = S["density"]["grid"]
    grid = np.linspace(lo, hi, int(num))
    t0 = time.perf_counter()
    st = spectral.stieltjes(laws[0], jnp.asarray(grid), dl, eps=S["density"]["eps"], throw=False)
    rho = np.asarray(st.density)
    cdf = trapezoid_cdf(grid, rho)
    perf.append(dict(what=f"{S['name']}: theory density, stieltjes on {grid.size} λ, m=2, {laws[0].size} samples",
                     value=time.perf_counter() - t0, unit="s", ratio=None,
                     note=f"converged {int(np.sum(np.asarray(st.converged)))}/{grid.size}"))
    th.update(density=dict(grid=grid.tolist(), density=rho.tolist(), cdf_at_grid_end=float(cdf[-1]),
                           converged=int(np.sum(np.asarray(st.converged)))))
    data["theory"] = th

    # ---- finite d: GD to the same t, Lanczos and dense spectra ---------------------------------
    lz = S["lanczos"]
    fd = _finite_d(prob, lz["k"], lz["tol"], lz["max_iters"])
    hist = None
    for d in S["ds"]:
        n = int(round(dl * d))
        rec = dict(eigenvalues=[], hard_weight=[], constrained=[], iterations=[], ks=[], hard_overlap=[], train_error=[])
        t0 = time.perf_counter()
        for s in range(S["seeds"]):  # one seed per simulate call: X is n×d float64 (1 GB at d = 4000)
            sim = dmft.simulate(prob, d, dl, lr, steps, 1, jax.random.key(900 + 10 * d + s), return_weights=True)
            X, y = dmft.simulation_data(prob, sim, 0)
            ev, w, status, its, evc, stc, itc = fd(X, y, sim.W[0], sim.a[0], jax.random.key(s))
            if int(status) != 0 or int(stc) != 0:
                raise RuntimeError(f"Lanczos did not converge ({S['name']}, d={d}, seed {s}: status {int(status)}, "
                                   f"constrained {int(stc)})")
            rec["eigenvalues"].append(np.asarray(ev).tolist())
            rec["hard_weight"].append(np.asarray(w).tolist())
            rec["constrained"].append(np.asarray(evc).tolist())
            rec["iterations"].append([int(its), int(itc)])
            rec["hard_overlap"].append(np.asarray(sim.overlap[-1]).ravel().tolist())
            rec["train_error"].append(float(sim.train_error[-1]))
            if d <= S["dense_max"]:
                D = spectral.finite_blocks(prob, X, y, sim.a[0], sim.W[0])
                evd = np.linalg.eigvalsh(np.asarray(spectral.dense_block_matrix(X, D)))
                rec["ks"].append(ks_distance(cdf, grid, evd))
                rec["dense_bottom"] = rec.get("dense_bottom", []) + [evd[:3].tolist()]
                hist = (d, evd)
            del X, y, sim
        perf.append(dict(what=f"{S['name']}: GD to t + Lanczos (+ dense eigh where d ≤ {S['dense_max']}) at d={d}, n={n} "
                              f"({S['seeds']} seeds)", value=time.perf_counter() - t0, unit="s", ratio=None,
                         note=f"Lanczos matvecs per seed (full, constrained) {rec['iterations']}"))
        ev = np.array(rec["eigenvalues"])
        w = np.array(rec["hard_weight"])
        edge_d = np.array(rec["constrained"])[:, 0]
        acc += location_rows(tag, th, rec, d, n_out)
        if rec["ks"]:
            acc.append(ks_row(tag, rec["ks"], d))
        # the first eigenvalue past the predicted outliers should be bulk: at the constrained edge
        rec.update(n=n, next_eigenvalue_minus_edge=(ev[:, n_out] - edge_d).tolist(),
                   next_hard_weight=w[:, n_out].tolist())
        data["per_d"][str(d)] = rec

    # ---- finite-size trend ----------------------------------------------------------------------
    ds = np.array(S["ds"], float)
    quantities = [(f"outlier_{j + 1}", lam_th[j], lam_se[j], lambda r, j=j: np.array(r["eigenvalues"])[:, j]) for j in range(n_out)]
    quantities += [(f"cosine2_{j + 1}", c2_th[j], c2_se[j], lambda r, j=j: np.array(r["hard_weight"])[:, j]) for j in range(n_out)]
    quantities += [("edge", edge_th, edge_se, lambda r: np.array(r["constrained"])[:, 0])]
    trend = {}
    for q, thv, thse, get in quantities:
        vals = [get(data["per_d"][str(int(d))]) for d in ds]
        dev = np.array([v.mean() - thv for v in vals])
        se = np.array([np.hypot(_se(v), thse) for v in vals])
        trend[q] = dict(deviation=dev.tolist(), stderr=se.tolist(), deviation_in_se=(dev / se).tolist(),
                        fitted_exponent=_power_fit(ds, dev, se))
    data["finite_size_trend"] = trend
    data["resolvent"], p = resolvent_check(prob, S, laws)
    perf += p
    acc += resolvent_rows(tag, S["resolvent"], data["resolvent"], dl)
    data["_plot"] = dict(lam=lam_th.tolist(), c2=c2_th.tolist(), edge=edge_th, grid=grid.tolist(), rho=rho.tolist(),
                         hist_d=None if hist is None else hist[0],
                         hist=None if hist is None else np.histogram(hist[1], bins=120, range=(lo, hi), density=True)[0].tolist())
    return acc, perf, data


def _plot(res: dict, outdir: pathlib.Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = res["setting"]["settings"]
    fig, axes = plt.subplots(len(sets), 5, figsize=(20, 3.6 * len(sets)), squeeze=False)
    for row, S in zip(axes, sets):
        dat = res["data"][S["name"]]
        P, per_d = dat["_plot"], dat["per_d"]
        for j, lam in enumerate(P["lam"]):
            c = f"C{j}"
            for d in S["ds"]:
                v = np.array(per_d[str(d)]["eigenvalues"])[:, j]
                wv = np.array(per_d[str(d)]["hard_weight"])[:, j]
                row[0].errorbar([d], [v.mean()], [_se(v)], fmt="o", color=c)
                row[1].errorbar([d], [wv.mean()], [_se(wv)], fmt="o", color=c)
            row[0].axhline(lam, color=c, lw=0.8, label=f"theory outlier {j + 1}")
            row[1].axhline(P["c2"][j], color=c, lw=0.8, label=f"theory cos² {j + 1}")
        for d in S["ds"]:
            v = np.array(per_d[str(d)]["constrained"])[:, 0]
            row[2].errorbar([d], [v.mean()], [_se(v)], fmt="o", color="C2")
        row[2].axhline(P["edge"], color="C2", lw=0.8, label="theory edge")
        row[0].set_title(f"{S['name']}: bottom outliers vs d (GD ± s.e.)")
        row[1].set_title(f"{S['name']}: cos² / hard-row weight vs d")
        row[2].set_title(f"{S['name']}: bulk left edge vs d")
        for ax in row[:3]:
            ax.set_xscale("log")
            ax.set_xlabel("d")
            ax.legend(fontsize=7)
        g = np.array(P["grid"])
        if P["hist"] is not None:
            edges = np.linspace(g[0], g[-1], len(P["hist"]) + 1)
            row[3].stairs(P["hist"], edges, fill=True, alpha=0.5, label=f"dense eigh, d={P['hist_d']}")
        row[3].plot(g, P["rho"], "k", lw=0.9, label="theory density")
        row[3].set_yscale("log")
        row[3].set_ylim(1e-3, None)
        row[3].legend(fontsize=7)
        row[3].set_title(f"{S['name']}: bulk density at the DMFT state")
        rz = dat.get("resolvent")
        if rz:
            for k_, lab, c, dx in (("delta_hat_conditional", "spectrum vs own-block theory", "k", 0.97),
                                   ("delta_hat_law", "own-block theory vs DMFT law", "C0", 1.0),
                                   ("delta_hat_total", "spectrum vs DMFT theory", "C3", 1.03)):
                pts = [(int(d), np.asarray(v[k_])) for d, v in rz["per_d"].items() if v[k_]]
                row[4].errorbar([d * dx for d, _ in pts], [v.mean() for _, v in pts], [_se(v) for _, v in pts], fmt="o",
                                color=c, label=lab)
            keys = np.asarray(rz["delta_hat_keys"])
            row[4].axhspan(S["delta"] - 3 * _se(keys), S["delta"] + 3 * _se(keys), color="r", alpha=0.15,
                           label="δ ± 3 s.e. (DMFT keys)")
            row[4].axhline(S["delta"], color="r", lw=0.8)
            row[4].set_xscale("log")
            row[4].set_xlabel("d")
            row[4].set_ylabel("δ implied by the resolvent trace")
            row[4].legend(fontsize=7)
            row[4].set_title(f"{S['name']}: resolvent check")
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "spectral_dmft_state.png", dpi=110)
    plt.close(fig)


def replot(res: dict, outdir: pathlib.Path):
    _plot(res, outdir)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S = settings(mode)
    acc, perf, data = [], [], {}
    for st in S["settings"]:
        a, p, dat = run_setting(st)
        acc += a
        perf += p
        data[st["name"]] = dat
    res = dict(setting=S, accuracy=acc, performance=perf, data=data, figure="spectral_dmft_state.png")
    _plot(res, outdir)
    return res
