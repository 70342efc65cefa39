"""Does the first phase of the bounded GeLU setting converge? δ*(t) over a 3.75× longer horizon, and
the DMFT law against the finite-d first phase at the same times (issue #4 items 2 and 4).

Setting: ``two_route``'s GeLU row — staircase ``y = z_1 + z_2² − 1`` (z_2 hard), m = 2,
``a = (1, 1/2)`` frozen, Q0 = I, M0 = 0, Huber loss (width 1: D bounded, strict convention),
ridge 0.2, THEORY's negative-outlier criterion (``level="auto"``). There the trend route stopped at
t·η = 40 (train error −2.2% over the last half: not converged), so the GD success curves of
``success_bounded`` (t·η = 600) were compared with a δ*(t) curve, not a δ_NN. Here:

1. **DMFT**: ``spectral.thresholds.delta_star`` at η = 0.5 for 300 steps (t·η up to 150; η = 1 is
   at the edge of stability here: the train error flips every step), independent keys; δ*(t) per
   time, the engine's stationarity verdict, and a weighted fit δ*(t) = c + b·log(t·η) over
   t·η ≥ 20 (b > 0 resolved = aging, no limit on the horizon). Since session 51 the times start at
   t·η = 0.5 (grid from δ = 1): ``success_bounded`` reads the smallest δ*(t), the lower end of the δ where
   the DMFT has a hard outlier at some time. Measured (3 keys × 2048 paths): δ*(t) rises monotonically,
   1.83 ± 0.20, 1.92 ± 0.18, 2.02 ± 0.16, 2.11 ± 0.05, 2.16 ± 0.03, 2.19 ± 0.02, 2.27 ± 0.03, 2.26 ± 0.02,
   2.32 ± 0.03, 2.36 ± 0.06, 2.44 ± 0.01 at t·η = 0.5, 1, 2, 4, 6, 10, 20, 40, 80, 120, 150; b = 0.112 ± 0.010
   (the run before, times from t·η = 10: 0.072 ± 0.014; both resolved, aging).
2. **Finite d**: GD with the hard rows frozen at M^0 = 0 (``dmft.simulate(..., freeze_hard=True)``,
   the manifold the d → ∞ first phase lives on; same η, checkpoints by ``save_weights_at``) at
   δ = 2, 2.5, 3 and t·η = 20, 80, 150; at each state ``spectral.hard_outlier_at_state`` (dense):
   the bottom eigenvalue of the full W-Hessian (ridge included), the summed hard weight of the
   eigenvectors below the constrained (non-hard-row) edge, that edge, and the outlier equation and
   bulk edge on the state's own empirical law. Against it, the DMFT law at the same (δ, t)
   (``dmft.solve`` + ``spectral.outlier``, separation level, + ridge). Rows: the outlier against the
   state's law and against the dense bottom eigenvalue where every key and seed has one, else whether both
   have one; the bulk edge against the state's law. Tolerances: the t multiple at the Welch dof of the
   combined s.e. (keys and seeds independent; coverage of 3 normal s.e.; session 53, ``reanalyze`` —
   before, 3 % + 3 combined s.e.).
3. **Finite size of the dense edge** (δ = 3, t·η = 150, d = 500, 1000, 2000): the smallest
   constrained eigenvalue lies above the law's edge by a gap that shrinks with d (paired per
   state; fitted exponent): rows at t(0.99865, seeds − 1) s.e. of the paired gap (session 53; before 3 s.e.).
"""

from __future__ import annotations

import pathlib
import time

import jax
import numpy as np

import dmft
import spectral
from dmft.simulate import simulation_data
from spectral.thresholds import delta_star

from .bench_first_phase import COVERAGE, t_factor, welch_rule, welch_tolerance
from .bench_spectral_finite_size import _power_fit, _se
from .bench_success_bounded import weighted_line
from .bench_two_route import problem

NAME = "aging_bounded"
ACT, RIDGE = "gelu", 0.2
WEIGHT_LEVEL = 0.25  # summed hard weight below the constrained edge that counts as a finite-d outlier (first_phase's)


def log_fit(t, y, se):
    """Weighted least squares y = c + b·log t over the finite points; returns (c, b, se_c, se_b, χ², dof)."""
    t, y, se = (np.asarray(v, float) for v in (t, y, se))
    ok = np.isfinite(y) & np.isfinite(se) & (se > 0)
    beta, cov, chi2 = weighted_line(np.log(t[ok]), y[ok], se[ok])
    return float(beta[0]), float(beta[1]), float(np.sqrt(cov[0, 0])), float(np.sqrt(cov[1, 1])), chi2, int(ok.sum() - 2)


def _fisher_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact p of equal proportions k1/n1 (DMFT keys with an outlier) and k2/n2 (finite-d states);
    the existence rows agree unless p < 1 − 0.9973 (session 53; before, "both 0 or both 1", which 1 of 8 keys
    against 0 of 8 states failed)."""
    from scipy import stats
    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]])[1])


def _welch(a, b) -> dict:
    """Tolerance of DMFT keys ``a`` against finite-d seeds ``b`` (independent): the t multiple at the Welch dof of
    the combined s.e., coverage of 3 normal s.e. (session 53; before, 3 % + 3 combined s.e.)."""
    tol, f, dof = welch_tolerance(a, b)
    return dict(value=tol, rule=welch_rule(f, dof))


def _row(quantity, theory, theory_se, sim, sim_se, d, seeds, tol, note=None):
    ok = all(np.isfinite(x) for x in (theory, sim, tol["value"]))   # else not assessed (None): a side has no number
    r = dict(quantity=quantity, theory=theory, theory_stderr=theory_se, simulation=sim, sim_stderr=sim_se, d=d,
             seeds=seeds, tolerance=tol, agree=bool(abs(theory - sim) <= tol["value"]) if ok else None)
    if note:
        r["note"] = note
    return r


def _state_record(pb, X, y, W, a):
    """Dense spectrum of the full W-Hessian at a finite-d state, and the theory on that state's own law."""
    so = spectral.hard_outlier_at_state(pb, X, y, W, a, k=6, method="dense", theory=True)
    ev, hw = np.asarray(so.eigenvalues), np.asarray(so.hard_weight)
    return dict(bottom=float(ev[0]), hard_weight_below_edge=float(hw[ev < so.constrained_edge].sum()),
                constrained_edge=float(so.constrained_edge), hard_weight0=float(hw[0]), law_edge=float(so.theory_edge),
                law_outlier=float(so.theory_outlier), law_exists=bool(so.theory_exists))


def edge_gap_fit(fss):
    """Per d: mean and s.e. of the paired gap (dense smallest constrained eigenvalue − law edge of the same
    state); the exponent p of gap ∝ d^p where resolved at every d."""
    gap = np.asarray(fss["constrained_edge"], float) - np.asarray(fss["law_edge"], float)   # (len(d), seeds)
    g, g_se = gap.mean(1), np.array([_se(v) for v in gap])
    return dict(gap=g.tolist(), gap_stderr=g_se.tolist(), gap_exponent=_power_fit(fss["d"], g, g_se))


def accuracy_rows(S, theory, sim_rec, fss):
    """Rows from the stored per-key DMFT laws and per-seed finite-d states (recomputable from the JSON).

    The bulk edge is compared with the edge of the finite-d state's own law (the DMFT against the
    dynamics); the dense smallest constrained eigenvalue converges to that edge slowly in d (rows of
    ``fss``: paired gap against 3 s.e.)."""
    acc = []
    for dl in S["fd_deltas"]:
        th, fd = theory[str(dl)], sim_rec[str(dl)]
        for j, t in enumerate(S["fd_times"]):
            tho = np.array([v[j] for v in th["outlier"]])
            the = np.array([v[j] for v in th["edge"]])
            fdb = np.array([v[j] for v in fd["bottom"]])
            fdw = np.array([v[j] for v in fd["hard_weight_below_edge"]])
            fde = np.array([v[j] for v in fd["constrained_edge"]])
            tag = f"aging bounded GeLU δ={dl:g} t·η={t:g}"
            flo = np.array([v[j] for v in fd["law_outlier"]], float)
            if np.all(np.isfinite(tho)) and np.all(np.isfinite(flo)):
                acc.append(_row(f"{tag}: hard outlier (DMFT law vs the law of the finite-d state)",
                                float(tho.mean()), _se(tho), float(flo.mean()), _se(flo), S["d"], S["seeds"],
                                _welch(tho, flo)))
            if np.all(np.isfinite(tho)) and np.all(fdw >= WEIGHT_LEVEL):
                acc.append(_row(f"{tag}: hard outlier of the full Hessian (DMFT law vs finite-d first phase)",
                                float(tho.mean()), _se(tho), float(fdb.mean()), _se(fdb), S["d"], S["seeds"],
                                _welch(tho, fdb)))
            else:
                fx = np.asarray([v[j] for v in fd["law_exists"]], float)
                p = _fisher_p(int(np.isfinite(tho).sum()), tho.size, int(fx.sum()), fx.size)
                acc.append(dict(quantity=f"{tag}: outlier exists (fraction of DMFT keys vs of finite-d states whose "
                                         "own law has one)",
                                theory=float(np.mean(np.isfinite(tho))), theory_stderr=None,
                                simulation=float(fx.mean()), sim_stderr=None, d=S["d"], seeds=S["seeds"],
                                tolerance=f"Fisher exact two-sided p ≥ {1 - COVERAGE:.4f} (p = {p:.3g})",
                                agree=bool(p >= 1 - COVERAGE),
                                note=f"dense spectrum: hard weight below the constrained edge ≥ {WEIGHT_LEVEL} at a "
                                     f"fraction {float(np.mean(fdw >= WEIGHT_LEVEL)):.2f} of the seeds"))
            fle = np.array([v[j] for v in fd["law_edge"]])
            acc.append(_row(f"{tag}: bulk edge of the full Hessian (DMFT law vs the law of the finite-d state)",
                            float(the.mean()), _se(the), float(fle.mean()), _se(fle), S["d"], S["seeds"],
                            _welch(the, fle),
                            note=f"dense smallest constrained eigenvalue of the same states: {fde.mean():.4g} ± "
                                 f"{_se(fde):.2g} (finite size: see the edge rows at δ={S['fss_delta']:g})"))
    for i, d in enumerate(fss["d"]):
        ce, le = np.asarray(fss["constrained_edge"][i]), np.asarray(fss["law_edge"][i])
        acc.append(_row(f"aging bounded GeLU δ={S['fss_delta']:g} t·η={fss['t_eta']:g}: dense smallest constrained "
                        f"eigenvalue vs the bulk edge of the same state's law (finite size)",
                        float(le.mean()), _se(le), float(ce.mean()), _se(ce), d, S["seeds"],
                        dict(value=float(t_factor(len(ce)) * fss["gap_stderr"][i]),
                             rule=f"t(0.99865, {len(ce) - 1} dof) = {t_factor(len(ce)):.2f} s.e. of the paired gap"),
                        note=f"gap {fss['gap'][i]:.4g} ± {fss['gap_stderr'][i]:.2g}; gap ∝ d^p, p = {fss['gap_exponent']}"))
    for r in acc:  # RESULTS.md wants a scalar tolerance (or a string)
        if isinstance(r["tolerance"], dict):
            r["tolerance_rule"] = r["tolerance"]["rule"]
            r["tolerance"] = r["tolerance"]["value"]
    return acc


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quick = mode == "quick"
    S = dict(act=ACT, ridge=RIDGE, level="auto", lr=0.5, grid=[1.0, 1.5, 2.0, 2.5, 3.0, 4.0],
             steps=120 if quick else 300, times=[2, 8, 20, 40, 80, 120] if quick else [1, 2, 4, 8, 12, 20, 40, 80, 160, 240, 300],
             paths=512 if quick else 2048, repeats=2 if quick else 3, refine=3 if quick else 5, key=0,
             fd_deltas=[2.0, 3.0] if quick else [2.0, 2.5, 3.0], fd_times=[20, 60] if quick else [20, 80, 150],
             d=200 if quick else 1000, seeds=3 if quick else 8, law_keys=3 if quick else 8,
             fss_d=[100, 200] if quick else [500, 1000, 2000], fss_delta=3.0,
             lr_note="η = 0.5: at η = 1 this setting sits at the edge of stability (train error flips every step, "
                     "alternation 1.0, relative amplitude 4.5e-3 at δ = 2, in the DMFT and in finite-d GD alike); "
                     "times are steps, t·η = steps × lr",
             target="y = z1 + z2^2 - 1 (z2 hard)", student="GeLU m=2, a=(1, 1/2) frozen, Q0=I, M0=0",
             loss="Huber width 1", convention="strict (D bounded)", weight_level=WEIGHT_LEVEL,
             fd_state="GD with hard rows frozen at M0=0 (freeze_hard), dense float64 Hessian incl. ridge; "
                      "law_*: the outlier equation and bulk edge on the empirical law of the same state",
             dmft_outlier="spectral.outlier level='edge' (separation) + ridge, bulk_edge + ridge",
             keys="delta_star: fold_in(key(key), 2); DMFT laws: fold_in(key(key), 100 + k); GD: fold_in(key(key), 1000 + i); "
                  "edge finite size: fold_in(key(key), 5000 + d)")
    pb = problem(S["act"], S["ridge"])
    root = jax.random.key(S["key"])
    acc, perf, data = [], [], {}

    # ---- 1. δ*(t) over the long horizon ---------------------------------------------------------
    t0 = time.perf_counter()
    b = delta_star(pb, grid=S["grid"], lr=S["lr"], steps=S["steps"], times=tuple(S["times"]), paths=S["paths"],
                   key=jax.random.fold_in(root, 2), convention="strict", refine=S["refine"], repeats=S["repeats"],
                   level=S["level"])
    t_ds = time.perf_counter() - t0
    tt = np.asarray(S["times"], float) * S["lr"]
    use = tt >= 20
    c, slope, c_se, slope_se, chi2, dof = log_fit(tt[use], b.delta_star[use], b.delta_star_stderr[use])
    data["delta_star"] = dict(t_eta=tt.tolist(), delta_star=b.delta_star.tolist(), stderr=b.delta_star_stderr.tolist(),
                              per_repeat=b.per_repeat.tolist(), status=b.status, message=b.message,
                              delta_nn=b.delta_nn, delta_nn_stderr=b.delta_nn_stderr, criterion=b.setting.get("criterion"),
                              train_error_change_last_half=b.diagnostics.get("train_error_change_last_half"),
                              delta_star_change_last_half=b.diagnostics.get("delta_star_change_last_half"),
                              coarse_margin=np.asarray(b.coarse.margin).tolist(),
                              log_fit=dict(form="delta*(t) = c + b log(t·η), weighted, t·η >= 20", c=c, b=slope,
                                           c_stderr=c_se, b_stderr=slope_se, chi2=chi2, dof=dof,
                                           b_in_se=slope / slope_se if slope_se > 0 else float("nan")))
    perf.append(dict(what=f"δ*(t) sweep: {len(S['grid'])} coarse δ + {S['refine']}×{S['repeats']} fine, "
                          f"{S['steps']} steps, {S['paths']} paths", value=t_ds, unit="s", ratio=None,
                     note="incl. compilation"))

    # ---- 2. DMFT laws at the finite-d (δ, t) points ------------------------------------------------
    t0 = time.perf_counter()
    fd_steps = tuple(int(round(t / S["lr"])) for t in S["fd_times"])
    theory = {}
    for dl in S["fd_deltas"]:
        per = dict(outlier=[], cosine2=[], edge=[], exists=[])
        for k in range(S["law_keys"]):
            tr = dmft.solve(pb, dl, S["lr"], max(fd_steps), S["paths"], jax.random.fold_in(root, 100 + k),
                            save_samples_at=fd_steps)
            o_row, c_row, e_row, x_row = [], [], [], []
            for st in fd_steps:
                law = spectral.law_from_dmft(pb, tr, st)
                o = spectral.outlier(law, dl, "bottom", throw=False)
                e = spectral.bulk_edge(law, dl, "bottom", throw=False)
                x_row.append(bool(o.exists))
                o_row.append(float(o.eigenvalue) + S["ridge"] if bool(o.exists) else float("nan"))
                c_row.append(float(o.cosine2) if bool(o.exists) else 0.0)
                e_row.append(float(e.edge) + S["ridge"])
            for key_, v in (("outlier", o_row), ("cosine2", c_row), ("edge", e_row), ("exists", x_row)):
                per[key_].append(v)
        theory[str(dl)] = per
    t_th = time.perf_counter() - t0

    # ---- 3. finite-d first phase at the same (δ, t) ------------------------------------------------
    t0 = time.perf_counter()
    sim_rec = {}
    for i, dl in enumerate(S["fd_deltas"]):
        sim = dmft.simulate(pb, S["d"], dl, S["lr"], max(fd_steps), S["seeds"], jax.random.fold_in(root, 1000 + i),
                            freeze_hard=True, return_weights=True, save_weights_at=fd_steps)
        keys_ = ("bottom", "hard_weight_below_edge", "constrained_edge", "hard_weight0", "law_edge", "law_outlier",
                 "law_exists")
        rec = {k_: [] for k_ in keys_}
        for s in range(S["seeds"]):
            X, y = simulation_data(pb, sim, s)
            rows = {k_: [] for k_ in keys_}
            for j in range(len(fd_steps)):
                W, a = sim.W_at[s, j], sim.a_at[s, j]  # (seeds, C, d, m), (seeds, C, m)
                for k_, v in _state_record(pb, X, y, W, a).items():
                    rows[k_].append(v)
            for k_ in keys_:
                rec[k_].append(rows[k_])
        rec["train_error"] = np.asarray(sim.train_error).tolist()
        sim_rec[str(dl)] = rec
    t_fd = time.perf_counter() - t0
    perf.append(dict(what=f"DMFT laws at {len(S['fd_deltas'])} δ × {S['law_keys']} keys ({S['paths']} paths)",
                     value=t_th, unit="s", ratio=None, note="incl. compilation"))
    perf.append(dict(what=f"finite-d first phase: GD d={S['d']}, {S['seeds']} seeds × {len(S['fd_deltas'])} δ + dense Hessians",
                     value=t_fd, unit="s", ratio=None, note="incl. compilation"))

    # ---- 4. finite size of the dense edge: smallest constrained eigenvalue vs the law edge of the state -----
    t0 = time.perf_counter()
    fss = dict(d=S["fss_d"], delta=S["fss_delta"], t_eta=S["steps"] * S["lr"], constrained_edge=[], law_edge=[])
    for d in S["fss_d"]:
        sim = dmft.simulate(pb, d, S["fss_delta"], S["lr"], S["steps"], S["seeds"], jax.random.fold_in(root, 5000 + d),
                            freeze_hard=True, return_weights=True, save_weights_at=(S["steps"],))
        ce, le = [], []
        for s in range(S["seeds"]):
            X, y = simulation_data(pb, sim, s)
            r = _state_record(pb, X, y, sim.W_at[s, 0], sim.a_at[s, 0])
            ce.append(r["constrained_edge"])
            le.append(r["law_edge"])
        fss["constrained_edge"].append(ce)
        fss["law_edge"].append(le)
    perf.append(dict(what=f"edge finite size: GD d={S['fss_d']}, {S['seeds']} seeds, {S['steps']} steps + dense Hessians",
                     value=time.perf_counter() - t0, unit="s", ratio=None, note="incl. compilation"))
    fss.update(edge_gap_fit(fss))

    acc = accuracy_rows(S, theory, sim_rec, fss)
    data.update(theory=theory, finite_d=sim_rec, fd_steps=list(fd_steps), edge_finite_size=fss)

    # ---- figure --------------------------------------------------------------------------------------
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    ax[0].errorbar(tt, b.delta_star, yerr=b.delta_star_stderr, fmt="o-", label=f"DMFT δ*(t), {S['repeats']} keys")
    xs = np.linspace(20, tt.max(), 50)
    ax[0].plot(xs, c + slope * np.log(xs), "k--", lw=0.8, label=f"c + b log(t·η), b = {slope:.3f} ± {slope_se:.3f}")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("t·η")
    ax[0].set_ylabel("δ*(t)")
    ax[0].set_title(f"bounded GeLU (ridge {S['ridge']}): {b.status}", fontsize=9)
    ax[0].legend(fontsize=8)
    for i, dl in enumerate(S["fd_deltas"]):
        th, fd = theory[str(dl)], sim_rec[str(dl)]
        ax[1].plot(S["fd_times"], np.nanmean(np.asarray(th["outlier"], float), axis=0), "o-", color=f"C{i}",
                   label=f"δ={dl:g} DMFT outlier")
        ax[1].plot(S["fd_times"], np.mean(np.asarray(th["edge"], float), axis=0), ":", color=f"C{i}")
        ax[1].plot(S["fd_times"], np.mean(np.asarray(fd["law_edge"], float), axis=0), "x", color=f"C{i}")
        ax[1].errorbar(S["fd_times"], np.mean(fd["bottom"], axis=0), yerr=[_se(c_) for c_ in np.asarray(fd["bottom"]).T],
                       fmt="s", mfc="none", color=f"C{i}", label=f"δ={dl:g} finite-d bottom (d={S['d']})")
    ax[1].axhline(0, color="k", lw=0.5)
    ax[1].set_xlabel("t·η")
    ax[1].set_ylabel("eigenvalue of the full Hessian")
    ax[1].set_title("outlier (solid/squares); bulk edge: DMFT (dotted), law of the finite-d state (x)", fontsize=9)
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)
    return dict(setting=S, accuracy=acc, performance=perf, data=data, figure=f"{NAME}.png")


def reanalyze(res: dict) -> dict:
    """Rows recomputed from the stored per-key DMFT laws and per-seed finite-d states with Welch-t tolerances
    (no 3 % allowance), Student-t multiples for the paired edge gaps and Fisher exact tests for existence."""
    d = res["data"]
    return dict(res, accuracy=accuracy_rows(res["setting"], d["theory"], d["finite_d"], d["edge_finite_size"]))
