"""The first phase at finite d, run to convergence (issue #4: does δ*(t) have a limit, and where?).

The dynamic DMFT reaches physical times t·η ≈ 10–50; the first phase of phase retrieval
relaxes over t·η ~ 10³–10⁴ (GeLU: the weights grow ~4× in norm first). Here the ground truth
goes where the DMFT cannot: GD with the hard rows of W frozen at M^0 = 0
(``dmft.simulate(..., freeze_hard=True)``: the manifold the d → ∞ first phase lives on), run
until the train error stops moving; then at the final state (``spectral.hard_outlier_at_state``)

- the bottom eigenpairs of the full W-Hessian and their weight on the hard rows (cos²),
- the edge of the Hessian restricted to the non-hard rows (``constrained_edge``),
- ``hard_weight_below_edge``: the summed hard weight of the eigenvectors below that edge
  (interlacing: at most h·m of them). O(1/d)·few without an outlier, O(1) with one;
- the outlier equation of THEORY §2 applied to the state's own empirical law of (ζ, D).

A δ grid at two d per setting shows where a hard outlier exists at the end of the first phase:
that is lim δ*(t) at finite d, the quantity the seed's δ_NN ≈ 6.0 (GeLU) / 3.6 (quadratic) is
about. ``delta_star_d`` is where the seed-mean ``hard_weight_below_edge`` crosses 0.25 (linear
interpolation on the grid; a finite-d convention, stated with its level).
"""

from __future__ import annotations

import pathlib
import time

import jax
import numpy as np

import dmft
import spectral
from dmft import activations
from dmft.simulate import simulation_data

from .bench_delta_star_trend import problem
from .bench_success_bounded import weighted_line

NAME = "first_phase"
LEVEL = 0.25  # hard_weight_below_edge level that defines the finite-d δ*_d


def _crossing(grid, w, level=LEVEL):
    """First δ where the seed-mean weight crosses ``level`` upwards (linear interpolation); nan if never,
    and nan if the weight is already at the level at the grid's first δ (the crossing lies below the
    grid: not a measurement, so not the first δ with a zero spread)."""
    if w[0] >= level:
        return float("nan")
    for i in range(1, len(grid)):
        if w[i - 1] < level <= w[i]:
            return float(grid[i - 1] + (level - w[i - 1]) * (grid[i] - grid[i - 1]) / (w[i] - w[i - 1]))
    return float("nan")


COVERAGE = 0.9973   # two-sided coverage of "3 s.e." for a normal s.e.; with K seeds the Student-t quantile gives it


def t_factor(k: int) -> float:
    """The multiple of a K-seed standard error with the coverage of 3 normal s.e. (Student t, K − 1 dof): 3.0 for
    K → ∞, 4.3 for 8 seeds, 19.2 for 3 (a 3-seed s.e. is itself uncertain by a factor ~2)."""
    from scipy import stats
    return float(stats.t.ppf(0.5 + COVERAGE / 2, k - 1))


def welch_tolerance(a, b) -> tuple[float, float, float]:
    """Tolerance for |mean(a) − mean(b)| of two independent samples (DMFT keys against GD seeds) with the
    coverage of 3 normal s.e.: the Student-t quantile at the Welch–Satterthwaite dof times the combined s.e.
    Returns (tolerance, t multiple, dof); nan (not assessed) where a side has < 3 finite values: with 2 the
    multiple can reach 236 (1 dof), a test that cannot fail. With 8 keys and 8 seeds of equal spread: 14 dof,
    multiple 3.6; with 3 and 3: 4 dof, 6.6 (3 s.e. covered only 96 % there)."""
    from scipy import stats
    a, b = (np.asarray(x, float) for x in (a, b))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 3 or len(b) < 3:
        return float("nan"), float("nan"), float("nan")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return 0.0, float("nan"), float("nan")
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    f = float(stats.t.ppf(0.5 + COVERAGE / 2, dof))
    return f * float(np.sqrt(va + vb)), f, float(dof)


def welch_rule(f: float, dof: float) -> str:
    """The ``tolerance_rule`` text of a :func:`welch_tolerance` row."""
    return f"t(0.99865, Welch {dof:.1f} dof) = {f:.2f} × combined s.e. (no allowance)"


def welch_row(q, theory, reference, d, allowance: float = 0.0, allowance_text: str = "") -> dict:
    """A row of theory samples (independent Monte Carlo keys) against reference samples (finite-d seeds): tolerance
    ``allowance`` (named by ``allowance_text`` in the rule) + :func:`welch_tolerance`; fewer than 3 finite values on a
    side → not assessed (tolerance and agree None)."""
    a, b = np.asarray(theory, float), np.asarray(reference, float)
    wt, f, dof = welch_tolerance(a, b)
    row = dict(quantity=q, theory=float(a.mean()), theory_stderr=float(a.std(ddof=1) / np.sqrt(a.size)),
               simulation=float(b.mean()), sim_stderr=float(b.std(ddof=1) / np.sqrt(b.size)),
               d=int(d) if isinstance(d, (int, np.integer)) else d, seeds=int(b.size))
    if not np.isfinite(wt):
        return dict(row, tolerance=None, agree=None, note="not assessed: fewer than 3 keys or seeds")
    tol = float(allowance + wt)
    rule = welch_rule(f, dof)
    if allowance_text:
        rule = f"{allowance_text} + " + rule.replace(" (no allowance)", "")
    return dict(row, tolerance=tol, agree=bool(abs(a.mean() - b.mean()) <= tol), tolerance_rule=rule)


def _paired(row):
    """Per-seed (equation on the state's law, bottom eigenvalue of the same state) when every seed's equation has an
    outlier, else None."""
    ps = row["per_seed"]
    if len(ps) < 2 or not all(p.get("theory_exists") for p in ps):
        return None
    return np.array([p["theory_outlier"] for p in ps]), np.array([p["eigenvalues"][0] for p in ps])


def accuracy_rows(rows) -> list:
    """Theory at the state against the finite-d eigenpair, per (setting, d, δ) where every seed's equation has an
    outlier. Both sides are computed on the same K states, so the test is on the paired difference Δ = equation −
    eigenvalue: mean ± s.e. over seeds, tolerance ``t_factor(K)`` s.e. (session 52; before, 3 combined unpaired
    s.e., where the state-to-state spread, common to both sides, hides a shift of Δ. With 8 seeds the square loss
    has Δ < 0 at 6 of 6 (d, δ), resolved at d = 400, δ = 4: −0.0025 ± 0.0003; the Huber loss none: 9 of 13
    negative. The 3-seed runs had read −0.0027 ± 0.00013 at one point: a 3-seed s.e., hence the t factor). Then per (setting, δ) with ≥ 2 d: the d → ∞ limit of Δ from a weighted fit Δ(d) = b + c/√d,
    b against 0 (an outlier next to the bulk edge moves by O(d^{-1/2}) at finite d; the model is an assumption,
    its χ² is recorded)."""
    acc, by_delta = [], {}
    for row in rows:
        pr = _paired(row)
        if pr is None:
            continue
        th, fd = pr
        k = len(th)
        diff = th - fd
        se_t, se_f, se_d = (float(v.std(ddof=1) / np.sqrt(k)) for v in (th, fd, diff))
        tol = t_factor(k) * se_d
        acc.append(dict(quantity=f"first phase {row['setting']} δ={row['delta']}: outlier (equation on the state's law vs "
                                 f"bottom eigenvalue, paired over the same states)",
                        theory=float(th.mean()), theory_stderr=se_t, simulation=float(fd.mean()), sim_stderr=se_f,
                        paired_difference=float(diff.mean()), paired_stderr=se_d, d=row["d"], seeds=k, tolerance=tol,
                        tolerance_rule=f"|mean Δ| ≤ t(0.99865, {k - 1} dof) = {t_factor(k):.2f} paired s.e.",
                        agree=bool(abs(diff.mean()) <= tol), reference="finite d (same states)"))
        by_delta.setdefault((row["setting"], row["delta"]), []).append((row["d"], float(diff.mean()), se_d, k))
    paired = [r for r in acc if "paired_difference" in r]
    if len(paired) >= 5:
        # the per-(d, δ) rows have few seeds each; a shift common to all of them shows in their signs (session 52,
        # 3-seed runs: 9 of 9 and 9 of 10 negative; 8-seed reruns: 6 of 6 for the square loss, 9 of 13 for Huber)
        from scipy import stats
        neg = sum(r["paired_difference"] < 0 for r in paired)
        p = float(stats.binomtest(neg, len(paired), 0.5).pvalue)
        acc.append(dict(quantity=f"first phase, all (setting, d, δ) rows: sign of Δ = equation − bottom eigenvalue "
                                 f"({neg} of {len(paired)} negative; two-sided sign-test p = {p:.2g}); disagreement = a "
                                 f"common finite-d shift (the d → ∞ rows say whether it vanishes)",
                        theory=0.5, simulation=neg / len(paired), sim_stderr=None, d=f"{min(r['d'] for r in paired)}…"
                        f"{max(r['d'] for r in paired)}", seeds=min(r["seeds"] for r in paired), tolerance="sign test p > 0.0027",
                        sign_test_p=p, agree=bool(p > 1 - COVERAGE), reference="finite d (same states)"))
    for (setting, delta), pts in by_delta.items():
        if len(pts) < 2:
            continue
        ds, dm, se, ks = (np.array(v, float) for v in zip(*sorted(pts)))
        (b, c), cov, chi2 = weighted_line(ds ** -0.5, dm, se)
        b_se = float(np.sqrt(cov[0, 0]))
        kmin = int(ks.min())
        tol = t_factor(kmin) * b_se
        acc.append(dict(quantity=f"first phase {setting} δ={delta}: d → ∞ limit of Δ = equation − bottom eigenvalue "
                                 f"(weighted fit b + c/√d over d = {[int(x) for x in ds]})",
                        theory=0.0, simulation=float(b), sim_stderr=b_se, d=f"{int(ds[0])}…{int(ds[-1])} → inf",
                        seeds=kmin, tolerance=tol, tolerance_rule=f"{t_factor(kmin):.2f} s.e. (t, {kmin - 1} dof)",
                        agree=bool(abs(b) <= tol), coefficient_c=float(c), coefficient_c_stderr=float(np.sqrt(cov[1, 1])),
                        chi2=chi2 if ds.size > 2 else 0.0, dof=int(ds.size - 2),   # 2 d: an exact fit (χ² rounding)
                        reference="finite d, extrapolated"))
    return acc


def reanalyze(res: dict) -> dict:
    """The accuracy rows again from the stored per-seed states (``accuracy_rows``: paired differences, Student-t
    tolerance, d → ∞ fit); no GD or Hessian is recomputed."""
    return dict(res, accuracy=accuracy_rows(res["data"]["rows"]))


def verdicts(rows) -> dict:
    """Per (setting, d): on how many (δ, seed) the equation's outlier verdict matches the finite-d
    ``hard_weight_below_edge ≥ LEVEL``."""
    out = {}
    for row in rows:
        for p in row["per_seed"]:
            if "theory_exists" not in p or p["theory_status"] == "not computed":
                continue
            key = f"{row['setting']} | d={row['d']}"
            n, k = out.get(key, (0, 0))
            out[key] = (n + 1, k + int(bool(p["theory_exists"]) == (p["hard_weight_below_edge"] >= LEVEL)))
    return {k: dict(cases=n, agree=a) for k, (n, a) in out.items()}


def run(mode: str, outdir: pathlib.Path, settings=None, quick_settings=None, name: str = NAME,
        problem_note: str = "phase retrieval y=z^2, square loss, ridge 0, M0=0, hard rows of W frozen",
        standard=None) -> dict:
    """``settings`` / ``quick_settings`` override the default list (e.g. ``bench_first_phase_bounded``);
    a setting may carry ``loss="huber:w"``; ``standard`` overrides the standard mode's ``ds`` / ``seeds``."""
    quick, tiny = mode != "full", mode == "quick"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    default = settings is None
    settings = settings if settings is not None else [
        dict(name="quadratic, m=4, a=1/4 frozen, Q0=I", act="quadratic", a=0.25, lr=0.2, steps=4000,
             grid=[2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0]),
        dict(name="gelu, m=4, a=1/4 frozen, Q0=I (CLI default)", act="gelu", a=0.25, lr=4.0, steps=4000,
             grid=[3.0, 4.5, 6.0, 8.0, 11.0, 15.0]),
        dict(name="gelu, m=4, a=1/2 frozen, Q0=I", act="gelu", a=0.5, lr=1.0, steps=4000,
             grid=[3.0, 4.5, 6.0, 8.0, 11.0, 15.0]),
    ]
    # 8 seeds (session 52; 3 before): the rows test paired differences at the Student-t multiple of their s.e.,
    # 19.2 for 3 seeds and 4.3 for 8
    S = dict(ds=[200, 400], seeds=8, key=0, level=LEVEL, k=6, theory=True)
    if quick and not tiny and standard:
        S.update(standard)
    if tiny:  # quick: no theory-at-state (one outlier solve per n = one compilation each)
        S.update(ds=[100, 200], seeds=2, theory=False)
        if default:
            settings = settings[:2]
            settings[0].update(grid=[2.5, 5.0], steps=2000)
            settings[1].update(grid=[4.0, 15.0], steps=2000)
        elif quick_settings is not None:
            settings = quick_settings
    if not quick:
        S.update(ds=[400, 800, 1600], seeds=8)
    rows, perf, summary = [], [], []
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.8), squeeze=False)
    for si, st in enumerate(settings):
        loss = st.get("loss", "square")
        P = problem(activations.get(st["act"]), a=st["a"],
                    loss=dmft.square_loss if loss == "square" else dmft.huber_loss(float(loss.split(":")[1])))
        for d in S["ds"]:
            w_mean, w_se = [], []
            for delta in st["grid"]:
                t0 = time.perf_counter()
                sim = dmft.simulate(P, d=d, delta=delta, lr=st["lr"], steps=st["steps"], seeds=S["seeds"],
                                    key=jax.random.fold_in(jax.random.key(S["key"]), d), return_weights=True,
                                    freeze_hard=True, test_samples=1024)
                jax.block_until_ready(sim.W)
                t_sim = time.perf_counter() - t0
                tr = np.asarray(sim.train_error_seeds)
                per_seed = []
                t1 = time.perf_counter()
                for s in range(S["seeds"]):
                    X, y = simulation_data(P, sim, s)
                    o = spectral.hard_outlier_at_state(P, X, y, sim.W[s], sim.a[s], k=S["k"], theory=S["theory"])
                    per_seed.append(dict(
                        eigenvalues=o.eigenvalues.tolist(), hard_weight=o.hard_weight.tolist(),
                        constrained_edge=o.constrained_edge, gap=o.gap, hard_weight_below_edge=o.hard_weight_below_edge,
                        theory_outlier=o.theory_outlier, theory_cosine2=o.theory_cosine2, theory_edge=o.theory_edge,
                        theory_margin=o.theory_margin, theory_exists=o.theory_exists, theory_status=o.theory_status,
                        train_final=float(tr[s, -1]),
                        train_rel_change_last_half=float(abs(tr[s, -1] - tr[s, st["steps"] // 2]) / tr[s, st["steps"] // 2]),
                        gram_trace=float(np.trace(np.asarray(sim.gram_seeds[s, -1]))),
                        hard_overlap_max=float(np.abs(np.asarray(sim.overlap_seeds[s, -1])).max())))
                t_spec = time.perf_counter() - t1
                wb = np.array([p["hard_weight_below_edge"] for p in per_seed])
                w_mean.append(float(wb.mean()))
                w_se.append(float(wb.std(ddof=1) / np.sqrt(len(wb))))
                rows.append(dict(setting=st["name"], d=d, delta=delta, lr=st["lr"], steps=st["steps"],
                                 physical_time=st["lr"] * st["steps"], seeds=S["seeds"],
                                 hard_weight_below_edge_mean=float(wb.mean()),
                                 hard_weight_below_edge_stderr=float(wb.std(ddof=1) / np.sqrt(len(wb))),
                                 theory_exists_fraction=float(np.mean([p["theory_exists"] for p in per_seed])),
                                 per_seed=per_seed, wall_sim_s=t_sim, wall_spectral_s=t_spec))
                print(f"   {st['name']} d={d} δ={delta}: weight below edge {wb.mean():.3f} ± {wb.std(ddof=1) / np.sqrt(len(wb)):.3f}, "
                      f"gap {np.mean([p['gap'] for p in per_seed]):.4f}, train change {max(p['train_rel_change_last_half'] for p in per_seed):.1e} "
                      f"({t_sim:.0f}+{t_spec:.0f} s)", flush=True)
                perf.append(dict(what=f"first phase {st['act']} d={d} δ={delta}: GD {st['steps']} steps x {S['seeds']} seeds",
                                 value=t_sim, unit="s", ratio=None, note=jax.default_backend()))
            ds_d = _crossing(st["grid"], w_mean)
            summary.append(dict(setting=st["name"], d=d, delta_star_d=ds_d, level=LEVEL, grid=st["grid"],
                                hard_weight_below_edge=w_mean,
                                note=("nan: no crossing on the grid (no outlier at the end of the first phase for any δ "
                                      "on the grid)" if not np.isfinite(ds_d) else "")))
            axes[0, si].errorbar(st["grid"], w_mean, w_se, fmt="o-", label=f"d={d} ({S['seeds']} seeds)")
        axes[0, si].axhline(LEVEL, color="k", lw=0.6, ls="--")
        axes[0, si].set_title(st["name"], fontsize=8)
        axes[0, si].set_xlabel("δ")
        axes[0, si].set_ylabel("hard weight below the constrained edge")
        axes[0, si].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{name}.png", dpi=110)
    plt.close(fig)
    return dict(setting=dict(S, settings=settings, problem=problem_note,
                             observable=("hard_weight_below_edge = summed squared norm on the hard rows of the W-Hessian "
                                         "eigenvectors below the edge of the Hessian restricted to the non-hard rows"),
                             theory_at_state="outlier equation + bulk edge on the empirical law of (zeta, D) at the final state, "
                                             "finite-n convention (truncation at the 1-1/n quantile) where D is unbounded below"),
                accuracy=accuracy_rows(rows), performance=perf,
                data=dict(summary=summary, verdicts=verdicts(rows), rows=rows),
                figure=f"{name}.png")
