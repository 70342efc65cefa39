"""Thresholds against GD: success curves (50% points per d), DMFT δ*(t) in the same setting
(finite-n convention at n = δ d), grokking curves, escape times (THEORY §2, §3)."""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft import activations
from dmft.success import success_curve
from spectral.thresholds import _root_on_grid, margins_from_sweep

NAME = "thresholds"

ACTS = {"quadratic": activations.quadratic, "gelu": activations.gelu}


def problem(act: str, m: int = 4):
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=ACTS[act], width=m, second_layer=jnp.ones(m) / m, train_second_layer=True),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(m), overlap=jnp.zeros((1, m))),
    )


def _gd_vs_dstar_row(act, S, dstar, gd50, gd50_se, d) -> dict:
    """GD's 50 % point after its whole run against the DMFT's δ*(t) at the DMFT horizon: shown, not assessed (agree
    None), and the row says why (session 51 referee: four such rows 8–9.5 s.e. apart read as unexplained)."""
    T = S["dmft"]["times"][-1]
    return dict(quantity=f"{act}: GD 50% point vs DMFT δ*(t={T}) (finite-n, n=δd)", theory=dstar, simulation=gd50,
                sim_stderr=gd50_se, d=d, seeds=S["seeds"], tolerance=None, agree=None,
                note=(f"not assessed: different times — GD's success is read after {S['steps']} steps "
                      f"(t·η = {S['steps'] * S['lr']:g}), δ*(t) at t = {T} (t·η = {T * S['lr']:g}), and the first phase "
                      "has not converged (δ*(t) still moves), so there is no δ_NN both should approach; the assessed "
                      "comparisons of this kind are in success / success_bounded / finite_n_success_law"))


def reanalyze(res: dict) -> dict:
    """The GD-vs-δ*(t) rows again with their reason for not being assessed (``_gd_vs_dstar_row``)."""
    S = res["setting"]
    acc = [(_gd_vs_dstar_row(r["quantity"].split(":")[0], S, r["theory"], r["simulation"], r["sim_stderr"], r["d"])
            if ": GD 50% point vs DMFT δ*(t=" in r["quantity"] else r) for r in res["accuracy"]]
    return dict(res, accuracy=acc)


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"  # standard/quick share CPU sizes; quick trims further
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if quick:
        S = dict(ds=[100, 200], deltas=[1.5, 2.0, 2.5, 3.0, 4.0, 5.0], seeds=4, steps=2000, lr=0.1,
                 dmft=dict(steps=30, paths=2048, times=(10, 20, 30), grid=[1.5, 2.5, 3.5, 5.0, 7.0, 10.0]))
    else:
        S = dict(ds=[500, 1000, 2000, 4000], deltas=[1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0], seeds=8, steps=5000, lr=0.1,
                 dmft=dict(steps=100, paths=16384, times=(25, 50, 75, 100), grid=[1.5, 2.5, 3.5, 5.0, 7.0, 10.0, 14.0]))
    if tiny:
        S.update(ds=[100], deltas=[2.0, 3.5, 5.0], steps=800,
                 dmft=dict(steps=30, paths=512, times=(30,), grid=[1.5, 2.5, 3.5, 5.0, 7.0, 10.0]))
    setting = dict(S, problem="phase retrieval y=z^2, width m=4, a=1/m trained (same step), Q0=I, square loss, GD lr=0.1",
                   success="final hard-subspace cos ||Θ*ᵀW||_F/||W||_F > 0.5", convention="finite-n (D truncated at 1-1/n, n=δd)")
    acc, perf = [], []
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    out = {}
    for col, act in enumerate(("quadratic", "gelu")):
        P = problem(act)
        # ---- GD success curves ------------------------------------------------------
        curves = {}
        for d in S["ds"]:
            t0 = time.perf_counter()
            sc = success_curve(P, d, S["deltas"], lr=S["lr"], steps=S["steps"], seeds=S["seeds"], key=jax.random.key(d))
            curves[d] = sc
            perf.append(dict(what=f"success curve {act} d={d} ({len(S['deltas'])} δ x {S['seeds']} seeds x {S['steps']} steps)",
                             value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
            axes[0, col].plot(sc.deltas, sc.success, "o-", label=f"GD d={d}: 50% at {sc.delta_50:.2f}")
        # ---- DMFT δ*(t) in the same setting ----------------------------------------
        Sd = S["dmft"]
        t0 = time.perf_counter()
        traj = dmft.solve_sweep(P, jnp.asarray(Sd["grid"]), lr=S["lr"], steps=Sd["steps"], paths=Sd["paths"],
                                key=jax.random.key(99), save_samples_at=Sd["times"], throw=False)
        t_sweep = time.perf_counter() - t0
        perf.append(dict(what=f"DMFT δ sweep {act} m=4 ({len(Sd['grid'])} δ, T={Sd['steps']}, {Sd['paths']} paths)",
                         value=t_sweep, unit="s", ratio=None, note=jax.default_backend()))
        dstar = {}
        for d in S["ds"]:
            marg, ev, edge, cos2, notes = margins_from_sweep(P, traj, Sd["grid"], Sd["times"], convention="finite-n", d=d)
            roots = [_root_on_grid(np.asarray(Sd["grid"]), marg[:, j]) for j in range(len(Sd["times"]))]
            dstar[d] = dict(times=list(Sd["times"]), delta_star=[r[0] for r in roots], bracket=[r[1:] for r in roots],
                            margin=marg.tolist(), outlier=ev.tolist(), edge=edge.tolist(), cosine2=cos2.tolist())
            tt = np.array(Sd["times"])
            axes[1, 0 if act == "quadratic" else 1].plot(tt, [r[0] for r in roots], "s-", label=f"{act} δ*(t), n=δ·{d}")
            sc = curves[d]
            acc.append(_gd_vs_dstar_row(act, S, roots[-1][0], sc.delta_50, sc.delta_50_stderr, d))
        # ---- grokking: test error vs time, below and above the 50% point ----------------
        dbig = S["ds"][-1]
        sc = curves[dbig]
        ax = axes[0, 2]
        for i in (1, len(sc.deltas) - 2):
            ax.plot(sc.record_steps * S["lr"], sc.test_curves[i], label=f"GD {act} δ={sc.deltas[i]} d={dbig}")
        tdm = np.arange(Sd["steps"] + 1) * S["lr"]
        for i, dv in enumerate(Sd["grid"][:3]):
            ax.plot(tdm, np.asarray(traj.test_error[i]), "--", label=f"DMFT {act} δ={dv}")
        # escape time against log d at the largest δ where every d succeeds
        esc = {d: curves[d].escape_step for d in S["ds"]}
        j = len(S["deltas"]) - 1
        med = [float(np.median(np.where(esc[d][j] >= 0, esc[d][j], np.nan))) for d in S["ds"]]
        axes[1, 2].plot(np.log(S["ds"]), med, "o-", label=f"{act} δ={S['deltas'][j]}")
        if len(S["ds"]) >= 2 and np.all(np.isfinite(med)):
            slope = float(np.polyfit(np.log(S["ds"]), med, 1)[0])
            perf.append(dict(what=f"{act}: escape step vs log d at δ={S['deltas'][j]} (median over seeds)", value=slope,
                             unit="steps per unit log d", ratio=None, note=f"medians {med} at d={S['ds']}"))
        out[act] = dict(success={str(d): dict(success=curves[d].success.tolist(), delta_50=curves[d].delta_50,
                                              delta_50_stderr=curves[d].delta_50_stderr,
                                              escape_step=curves[d].escape_step.tolist(),
                                              cos_final=curves[d].cos_final.tolist()) for d in S["ds"]},
                        dmft_delta_star={str(d): dstar[d] for d in S["ds"]},
                        dmft_train_error_final=np.asarray(traj.train_error[:, -1]).tolist(),
                        dmft_failed_step=np.asarray(traj.failed_step).tolist(),
                        dmft_max_step_curvature=np.asarray(jnp.max(traj.max_step_curvature, axis=-1)).tolist())
        axes[0, col].set_title(f"GD success, {act} m=4")
        axes[0, col].set_xlabel("δ")
        axes[0, col].legend(fontsize=7)
    axes[0, 2].set_title("grokking: test error vs t·η")
    axes[0, 2].set_yscale("log")
    axes[0, 2].legend(fontsize=6)
    for ax, ttl in ((axes[1, 0], "DMFT δ*(t), quadratic"), (axes[1, 1], "DMFT δ*(t), GeLU")):
        ax.set_title(ttl)
        ax.set_xlabel("GD step t")
        ax.legend(fontsize=7)
    axes[1, 2].set_title("escape step vs log d")
    axes[1, 2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "thresholds.png", dpi=110)
    return dict(setting=setting, accuracy=acc, performance=perf, figure="thresholds.png", data=out)
