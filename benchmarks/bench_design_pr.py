"""A designed activation for phase retrieval, checked by gradient descent at finite d (issue #7).

Why this setting. In the staircase of bench_design_gd the design lowered the DMFT δ*(t) but GD
escaped to a lower plateau, and in the separation setting (bench_design_spectral) GD does not learn
the hard direction at all; neither could show a *learning* gain. Phase retrieval is the issue's own
prototype, and there GD does learn the hard direction on the horizon (bench_success: GeLU 50% points
3.67 / 4.75 / 5.40 at d = 500 / 1000 / 2000, quadratic 2.33 / 2.63 / 2.80).

Setting: y = z², m = 4, a = 1/4 frozen, Q0 = I, M0 = 0, square loss, ridge 0 (the ``deltann delta-nn``
default and bench_success's GeLU setting), η = 0.5.

Family (norm-matched, so no activation wins by its output scale): σ_α = ‖GeLU‖ · (GeLU + α He2)/‖GeLU +
α He2‖ with He2(r) = (r² − 1)/√2 and ‖f‖² = E[f(Z)²]. α = 0 is plain GeLU exactly (the network of
bench_success). α adds weight on the even Hermite component that phase retrieval's hard direction
needs (GeLU's own He2 coefficient is E[GeLU''(Z)]/√2 ≈ 0.28, vs 0.5 on He1).

The engine's side. The first phase does not converge in this setting (seed_claim.json, for GeLU and the
quadratic activation), so there is no δ_NN to minimize: the objective is δ*(t) of the dynamic DMFT at
the times ``design_times`` (finite-n convention n = δ·1000: D is unbounded below under square loss on
y = z², no strict-limit threshold), by ``spectral.delta_star`` (coarse grid, per-key refine, same keys
for every α: paired). The design is derivative-free (a scan of α, as in bench_design_gd: per-key roots
on this route are rough in the activation), argmin of the key-mean δ*(t) at the last design time.
Caveat (as delta_star_trend): with paths < n the truncation at the 1 − 1/n quantile removes no sample,
so the law is in effect truncated at ~1/paths.

GD: ``dmft.success_curve`` (random init, 1200 steps of η = 0.5: t·η = 600, 8 seeds, success = final hard
cos > 1/2 as bench_success), at d = 500 and 1000, key fold_in(key(1), d) for every activation (same data
and initial weights: paired). Claims tested: (1) δ*(t) of the designed activation is below GeLU's by
> 3 s.e. of the paired difference; (2) its GD success curve is shifted left: the paired area between
the final-cos curves has the sign of the DMFT shift by 3 s.e., the 50% point moves down by 2 s.e. (paired
bootstrap over seeds), and the GD shift is within 3 combined s.e. of the DMFT shift at each DMFT time;
(3) per activation, DMFT δ*(t) at each time vs the GD 50% point at d = 1000.

Measured (standard, 2026-12-03, 2-core CPU, 2139 s: DMFT scan 5 × ~240 s, GD 105 s (d = 500) and 355 s
(d = 1000) per activation; 2048 paths, 3 keys):
- DMFT δ*(t·η = 0, 2, 6): α = 0 (GeLU) 3.39 ± 0.21, 4.53 ± 0.24, 6.47 ± 0.08; α = 0.5 2.60, 3.43, 4.95;
  α = 1 2.40 ± 0.15, 3.08 ± 0.08, 4.63 ± 0.08; α = 2 2.20, 2.68, 4.65; α = 4 2.22, 2.92, 4.57. α = 2 and 4 are
  excluded: a refine sweep has locally unstable paths at η = 0.5 (fractions 0.003 and 1.0; the coarse sweeps
  were stable). Designed: α = 1. Paired DMFT shifts −0.98 ± 0.15, −1.45 ± 0.26, −1.84 ± 0.14.
- GD 50% points GeLU → designed: d = 500 4.00 ± 0.35 → 3.20 ± 0.28 (paired shift −0.80 ± 0.42, 1.9 s.e.);
  d = 1000 4.67 ± 0.47 → 3.50 ± 0.18 (−1.17 ± 0.37, 3.1 s.e.). Paired final-cos areas +0.46 ± 0.08 and
  +0.52 ± 0.10 (6 and 5 s.e.). Each GD shift is within 3 combined s.e. of the DMFT shift at every time.
  Median escape (t·η) at δ = 4, 5, 6, 7 (d = 1000): GeLU 448, 235, 199, 107; designed 153, 46, 31, 20. The
  designed network's plateau is a little lower above threshold (final cos 0.86–0.89 vs 0.92–0.95 at δ = 6–7).
- Per activation, the d = 1000 50% point sits at δ*(t·η = 2) (GeLU 4.53 vs 4.67, designed 3.08 vs 3.50,
  within 3 s.e.), above δ*(0) and below δ*(t·η = 6) — as for the quadratic student (bench_finite_n_early).
- Both thresholds are far above δ_alg = 1/2.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from dmft import activations
from dmft import families as fam
from dmft.success import fifty_percent_point, success_curve
from spectral.thresholds import delta_star

from .bench_delta_star_trend import problem
from .bench_design_gd import paired_gd_area
from .bench_finite_n import _se
from .bench_success import curve_record

NAME = "design_pr"
THRESHOLD = 0.5
GELU = activations.get("gelu")


def he2(r):
    """Normalized second Hermite polynomial (r² − 1)/√2 (unit Gaussian norm)."""
    return (r * r - 1.0) / jnp.sqrt(2.0)


def family(alpha: float):
    """σ_α = ‖GeLU‖ (GeLU + α He2)/‖GeLU + α He2‖ (Gaussian norms): α = 0 is GeLU itself."""
    raw = fam.Combination(jnp.array([1.0, float(alpha)]), basis=(fam._gelu, he2))
    scale = float(fam.gaussian_norm(GELU)) / float(fam.gaussian_norm(raw))
    return lambda r: scale * raw(r)


def paired_fifty_shift(grid, cos_a, cos_b, boot=2000, seed=0):
    """Shift of the GD 50% point, a − b, and its s.e. by a paired bootstrap over seeds (the same seed
    indices resampled for both activations at each δ: same data and initial weights), with the
    fraction of resamples in which one of the two curves has no 50% crossing on the grid."""
    g = np.asarray(grid, float)
    ca, cb = np.asarray(cos_a, float), np.asarray(cos_b, float)           # (len(grid), seeds)

    def point(c):
        return fifty_percent_point(g, (c > THRESHOLD).mean(1), c.shape[1])[0]

    est = point(ca) - point(cb)
    rng = np.random.default_rng(seed)
    bs = []
    for _ in range(boot):
        i = rng.integers(0, ca.shape[1], size=ca.shape)
        bs.append(point(np.take_along_axis(ca, i, 1)) - point(np.take_along_axis(cb, i, 1)))
    bs = np.asarray(bs)
    ok = np.isfinite(bs)
    return dict(shift=float(est), shift_stderr=float(np.std(bs[ok], ddof=1)) if ok.sum() > 2 else float("nan"),
                bootstrap_nan_fraction=float(1 - ok.mean()), boot=boot)


def delta_alg() -> dict:
    """Weak-recovery optimum 1/E[(E[z²|y] − 1)²] of the phase-retrieval teacher by quadrature
    (``spectral.weak_recovery_threshold``; 1/2 for noiseless phase retrieval)."""
    import spectral

    return dict(value=float(spectral.weak_recovery_threshold(problem(GELU).teacher)),
                source="spectral.weak_recovery_threshold (quadrature)", note="noiseless phase retrieval: 1/2")


def settings(mode: str) -> dict:
    S = dict(target="phase retrieval y = z^2", student="m=4, a=1/4 frozen, Q0=I, M0=0", loss="square", ridge=0.0,
             family="sigma_alpha = |GeLU| (GeLU + alpha He2)/|GeLU + alpha He2|, He2 = (r^2-1)/sqrt2, Gaussian norms",
             alphas=[0.0, 0.5, 1.0, 2.0, 4.0],
             dmft=dict(lr=0.5, steps=12, times=[0, 4, 12], paths=2048, repeats=3, refine=4, key=11, d=1000,
                       grid=[1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0], convention="finite-n (n = δ d, d = 1000)"),
             gd=dict(ds=[500, 1000], grid=[2.0, 3.0, 4.0, 5.0, 6.0, 7.0], seeds=8, lr=0.5, steps=1200, key=1,
                     key_per_d="jax.random.fold_in(jax.random.key(key), d)", threshold=THRESHOLD),
             design=("argmin over the α scan of the key-mean DMFT δ*(t) at the last DMFT time, among α whose DMFT is locally "
                     "stable at every refine-grid δ (no Monte Carlo path with η·λ_max(D)/δ > 2: fixed-η GD diverges on "
                     "such samples, and the root would come from a diverging dynamics)"))
    if mode == "quick":
        S["alphas"] = [0.0, 1.0]
        S["dmft"].update(steps=4, times=[0, 4], paths=512, repeats=2, grid=[1.5, 3.0, 5.0, 8.0])
        S["gd"].update(ds=[200], grid=[2.0, 4.0, 6.0], seeds=4, steps=400)
    return S


def dmft_threshold(alpha, D):
    """δ*(t) of σ_α at the DMFT times (per-key roots kept, for paired differences)."""
    r = delta_star(problem(family(alpha)), grid=D["grid"], lr=D["lr"], steps=D["steps"], times=tuple(D["times"]),
                   paths=D["paths"], key=jax.random.key(D["key"]), convention="finite-n", d=D["d"], refine=D["refine"],
                   repeats=D["repeats"])
    return dict(delta_star=np.asarray(r.delta_star).tolist(), delta_star_stderr=np.asarray(r.delta_star_stderr).tolist(),
                per_key=np.asarray(r.per_repeat).tolist(), status=r.status, message=r.message,
                coarse_margin=np.asarray(r.coarse.margin).tolist(), coarse_train_error_last=np.asarray(r.coarse.train_error)[:, -1].tolist(),
                notes=list(r.coarse.notes)[:5], coarse_unstable_fraction=r.diagnostics["coarse_unstable_fraction"],
                fine_unstable_fraction=r.diagnostics["fine_unstable_fraction"],
                stable=bool(np.max(r.diagnostics["fine_unstable_fraction"]) == 0))


def accuracy_rows(S, theory, gd, alpha_opt) -> list:
    """Rows of theory against simulation, recomputed from the stored per-key roots and per-seed cos.
    The DMFT side is given at every DMFT time (which t·η a GD 50% point at t·η = 600 should be read
    against is not fixed by the theory: in this setting the first phase does not converge)."""
    D, G = S["dmft"], S["gd"]
    des, ref = theory["designed"], theory["gelu"]
    tl = lambda j: f"δ*(t·η={D['times'][j] * D['lr']:g})"
    shifts = []
    acc = []
    for j in range(len(D["times"])):
        diff = np.asarray(des["per_key"], float)[:, j] - np.asarray(ref["per_key"], float)[:, j]
        dm, dse = float(np.nanmean(diff)), _se(diff)
        shifts.append((dm, dse))
        acc.append(dict(quantity=f"DMFT {tl(j)}: designed (α={alpha_opt:g}) (theory) vs GeLU (simulation column), same keys",
                        theory=des["delta_star"][j], theory_stderr=des["delta_star_stderr"][j], simulation=ref["delta_star"][j],
                        sim_stderr=ref["delta_star_stderr"][j], d=f"{D['d']} (finite-n DMFT)", seeds=int(np.isfinite(diff).sum()),
                        paired_difference=dm, paired_stderr=dse, tolerance="lower by > 3 s.e. of the paired difference",
                        agree=bool(np.isfinite(dse) and dm < -3 * dse)))
    dm_last = shifts[-1][0]
    for d in G["ds"]:
        a, b = gd["designed"][str(d)], gd["gelu"][str(d)]
        area, area_se = paired_gd_area(a["cos_final"], b["cos_final"], G["grid"])
        jump = float(np.mean(b["cos_final"], 1)[-1] - np.mean(b["cos_final"], 1)[0])
        acc.append(dict(quantity=f"paired GD area between final-cos curves over δ, designed − GeLU (simulation); theory: "
                                 f"−(DMFT {tl(len(shifts) - 1)} shift) × jump height of the GeLU curve",
                        theory=float(-dm_last * jump), theory_stderr=None, simulation=area, sim_stderr=area_se, d=d,
                        seeds=G["seeds"], tolerance="sign of the theory value, by 3 s.e. (same data and init per seed)",
                        agree=bool(np.sign(area) == np.sign(-dm_last) and abs(area) > 3 * area_se)))
        sh = paired_fifty_shift(G["grid"], a["cos_final"], b["cos_final"])
        note = f"paired bootstrap over seeds, {sh['bootstrap_nan_fraction']:.1%} of resamples without a crossing"
        acc.append(dict(quantity=f"shift of the GD 50% point, designed − GeLU (simulation; {note}); theory: DMFT "
                                 f"{tl(len(shifts) - 1)} shift",
                        theory=dm_last, theory_stderr=shifts[-1][1], simulation=sh["shift"], sim_stderr=sh["shift_stderr"],
                        d=d, seeds=G["seeds"], tolerance="GD shift has the theory's sign, by 2 s.e.",
                        agree=bool(np.isfinite(sh["shift"]) and np.sign(sh["shift"]) == np.sign(dm_last)
                                   and abs(sh["shift"]) > 2 * sh["shift_stderr"])))
        for j, (dm, dse) in enumerate(shifts):
            se = float(np.hypot(dse, sh["shift_stderr"]))
            acc.append(dict(quantity=f"shift of the threshold, designed − GeLU: DMFT {tl(j)} (theory) vs GD 50% points "
                                     f"(simulation; {note})",
                            theory=dm, theory_stderr=dse, simulation=sh["shift"], sim_stderr=sh["shift_stderr"], d=d,
                            seeds=G["seeds"], tolerance="3 combined s.e.",
                            agree=bool(np.isfinite(sh["shift"]) and abs(sh["shift"] - dm) < 3 * se)))
    d = G["ds"][-1]
    for name, lab in (("gelu", "GeLU"), ("designed", f"designed (α={alpha_opt:g})")):
        th, g = theory[name], gd[name][str(d)]
        for j in range(len(D["times"])):
            se = float(np.hypot(th["delta_star_stderr"][j], g["delta_50_stderr"]))
            acc.append(dict(quantity=f"{lab}: DMFT {tl(j)} (theory, n = δ·{D['d']}) vs GD 50% point (final hard cos > "
                                     f"{THRESHOLD}, t·η = {G['steps'] * G['lr']:g})",
                            theory=th["delta_star"][j], theory_stderr=th["delta_star_stderr"][j], simulation=g["delta_50"],
                            sim_stderr=g["delta_50_stderr"], d=d, seeds=G["seeds"], tolerance="3 combined s.e.",
                            agree=bool(np.isfinite(g["delta_50"]) and abs(th["delta_star"][j] - g["delta_50"]) < 3 * se)))
    return acc


def figure(S, theory_scan, gd, alpha_opt, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    D, G = S["dmft"], S["gd"]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    r = jnp.linspace(-3, 3, 200)
    for a in sorted({0.0, alpha_opt}):
        ax[0].plot(r, family(a)(r), label=f"σ_α, α={a:g}" + (" (GeLU)" if a == 0 else " (designed)"))
    ax[0].set_xlabel("r")
    ax[0].set_ylabel("σ(r)")
    ax[0].legend(fontsize=8)
    al = [float(a) for a in S["alphas"]]
    unstable = [a for a in al if not theory_scan[str(a)].get("stable", True)]
    for j, t in enumerate(D["times"]):
        ax[1].errorbar(al, [theory_scan[str(a)]["delta_star"][j] for a in al],
                       [theory_scan[str(a)]["delta_star_stderr"][j] for a in al], fmt="o-", color=f"C{j}", label=f"t·η={t * D['lr']:g}")
        if unstable:
            ax[1].plot(unstable, [theory_scan[str(a)]["delta_star"][j] for a in unstable], "o", mfc="white", mec=f"C{j}", ms=7, zorder=5,
                       label="DMFT locally unstable at a refine δ (excluded)" if j == 0 else None)
    ax[1].axhline(0.5, color="gray", ls=":", lw=1, label="δ_alg = 1/2")
    ax[1].set_xlabel("α")
    ax[1].set_ylabel(f"DMFT δ*(t), n = δ·{D['d']} (mean ± s.e. over keys)")
    ax[1].legend(fontsize=8)
    for i, name in enumerate(("gelu", "designed")):
        for k, d in enumerate(G["ds"]):
            g = gd[name][str(d)]
            c = np.asarray(g["cos_final"])
            ax[2].errorbar(G["grid"], c.mean(1), c.std(1, ddof=1) / np.sqrt(c.shape[1]), fmt="o-" if k == len(G["ds"]) - 1 else "s:",
                           color=f"C{i}", label=f"GD d={d}: {name}" + (f" (α={alpha_opt:g})" if name == "designed" else ""))
        th = theory_scan[str(alpha_opt if name == "designed" else 0.0)]
        ax[2].axvline(th["delta_star"][-1], color=f"C{i}", ls="--", lw=1)
    ax[2].axhline(THRESHOLD, color="gray", lw=0.5)
    ax[2].set_xlabel("δ")
    ax[2].set_ylabel("final hard cos (mean ± s.e.)")
    ax[2].set_title(f"GD, t·η = {G['steps'] * G['lr']:g}; dashed: DMFT δ*(t·η={D['times'][-1] * D['lr']:g})", fontsize=9)
    ax[2].legend(fontsize=7)
    ax[0].set_title("phase retrieval, m=4, a=1/4 frozen, square loss", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)


def replot(res: dict, outdir: pathlib.Path):
    dg = res["diagnostics"]
    figure(res["setting"], dg["scan"], dg["gd"], dg["alpha_opt"], outdir)


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S = settings(mode)
    D, G = S["dmft"], S["gd"]
    perf, scan = [], {}
    for a in S["alphas"]:
        t0 = time.perf_counter()
        scan[str(float(a))] = dmft_threshold(a, D)
        perf.append(dict(what=f"DMFT δ*(t) of σ_α, α={a:g} ({len(D['grid'])}-point grid + {D['repeats']} x {D['refine']} refine, "
                              f"T={D['steps']}, {D['paths']} paths, {len(D['times'])} times)",
                         value=time.perf_counter() - t0, unit="s", ratio=None, note=f"{jax.default_backend()}; incl. compilation"))
        print(f"   α={a:g}: δ*(t) = {np.round(scan[str(float(a))]['delta_star'], 3).tolist()} ± "
              f"{np.round(scan[str(float(a))]['delta_star_stderr'], 3).tolist()} ({perf[-1]['value']:.0f} s)", flush=True)
    last = {a: scan[str(float(a))]["delta_star"][-1] for a in S["alphas"]}
    ok = [a for a in S["alphas"] if np.isfinite(last[a]) and scan[str(float(a))]["stable"]]
    if not ok:
        raise RuntimeError("no α of the scan has a threshold on the δ grid with a stable DMFT at the refine δ")
    alpha_opt = float(min(ok, key=lambda a: last[a]))
    theory = dict(gelu=scan["0.0"], designed=scan[str(alpha_opt)])
    gd = dict(gelu={}, designed={})
    for name, a in (("gelu", 0.0), ("designed", alpha_opt)):
        for d in G["ds"]:
            t0 = time.perf_counter()
            sc = success_curve(problem(family(a)), d, G["grid"], lr=G["lr"], steps=G["steps"], seeds=G["seeds"],
                               threshold=THRESHOLD, key=jax.random.fold_in(jax.random.key(G["key"]), d))
            wall = time.perf_counter() - t0
            gd[name][str(d)] = rec = curve_record(sc, G["lr"])
            perf.append(dict(what=f"GD success curve {name} (α={a:g}), d={d} ({len(G['grid'])} δ x {G['seeds']} seeds x "
                                  f"{G['steps']} steps, float32)", value=wall, unit="s", ratio=None,
                             note=f"{jax.default_backend()}; incl. compilation"))
            print(f"   GD {name} (α={a:g}) d={d}: success {sc.success.tolist()} -> 50% {sc.delta_50:.3f} ± "
                  f"{sc.delta_50_stderr:.3f}; mean cos {np.round(rec['cos_final_mean'], 3).tolist()} ({wall:.0f} s)", flush=True)
    acc = accuracy_rows(S, theory, gd, alpha_opt)
    figure(S, scan, gd, alpha_opt, outdir)
    return dict(setting=S, accuracy=acc, performance=perf, figure=f"{NAME}.png",
                diagnostics=dict(scan=scan, alpha_opt=alpha_opt, gd=gd,
                                 first_phase="not converged for GeLU and the quadratic activation in this setting "
                                             "(seed_claim.json): no δ_NN, the objective is δ*(t) at finite t",
                                 delta_alg=delta_alg()))
