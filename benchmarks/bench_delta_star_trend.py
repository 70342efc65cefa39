"""Long-horizon trend of δ*(t) (THEORY §2 "δ*(t) and δ_NN"): is the first phase converged?

Phase retrieval y = z², width m = 4, a = 1/m frozen, Q0 = I, square loss (the CLI's
`deltann delta-nn --target phase-retrieval --width 4` setting). DMFT δ sweep with a large
step (physical time t·η up to ~50), outlier margin at several t in the finite-n convention
(n = δd), δ*(t) from the first sign change on the grid. δ_NN = lim δ*(t) is only defined if
δ*(t) and the train error stop moving; this benchmark records whether they do.
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft import activations
from dmft.stationary import _state_at
from spectral.thresholds import _root_on_grid, margins_from_sweep

NAME = "delta_star_trend"


def problem(act, m=4, train_a=False, init_scale=1.0, a=None, loss=dmft.square_loss):
    """Phase retrieval y = z², ``loss`` (default square), second layer ``a`` for every unit (default
    1/m; frozen unless ``train_a``), Q0 = init_scale² I, M0 = 0."""
    a = 1.0 / m if a is None else a
    return dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
                        student=dmft.TwoLayer(activation=act, width=m, second_layer=jnp.full(m, a),
                                              train_second_layer=train_a),
                        loss=loss,
                        init=dmft.Init(q0=init_scale**2 * jnp.eye(m), overlap=jnp.zeros((1, m))))


def max_response(traj, t, lr, grid):
    """Largest eigenvalue of the integrated response V(t) = (1/δ) Σ_s η R_θ(t, s+1) per δ of the
    sweep (the stationary DMFT's V: finite iff the first phase converges)."""
    return np.linalg.eigvalsh(np.asarray(_state_at(traj, t, lr, jnp.asarray(grid))["V"])).max(-1)


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"  # standard/quick share CPU sizes; quick trims further
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S = dict(steps=96 if quick else 384, paths=1024 if quick else 8192, grid=[2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 11.0, 15.0],
             lr=dict(gelu=0.5, quadratic=0.1), ds=[1000], keys=[0, 1, 2])
    if tiny:
        S.update(steps=32, paths=256, keys=[0, 1], grid=[2.0, 3.0, 4.0, 6.0, 9.0, 15.0])
    S["times"] = [S["steps"] // 8, S["steps"] // 4, S["steps"] // 2, 3 * S["steps"] // 4, S["steps"]]
    if tiny:
        S["times"] = [S["steps"] // 2, S["steps"]]
    setting = dict(S, problem="phase retrieval y=z^2, m=4, a=1/4 frozen, Q0=I, square loss, ridge 0",
                   convention="finite-n (D truncated at its 1-1/n quantile, n=δd)",
                   caveat=("the truncation only resolves n when paths >> n; with paths < n no sample is removed and "
                           "the laws for every d coincide (effectively truncated at ~1/paths)"))
    perf, data = [], {}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for act_name in ("gelu", "quadratic"):
        P = problem(activations.get(act_name))
        lr = S["lr"][act_name]
        res = {}
        for kk in S["keys"]:
            t0 = time.perf_counter()
            traj = dmft.solve_sweep(P, jnp.asarray(S["grid"]), lr=lr, steps=S["steps"], paths=S["paths"],
                                    key=jax.random.key(kk), save_samples_at=tuple(S["times"]), throw=False)
            perf.append(dict(what=f"{act_name}: DMFT δ sweep ({len(S['grid'])} δ, T={S['steps']}, {S['paths']} paths)",
                             value=time.perf_counter() - t0, unit="s", ratio=None, note=jax.default_backend()))
            for d in S["ds"]:
                marg, ev, edge, cos2, notes = margins_from_sweep(P, traj, S["grid"], S["times"], convention="finite-n", d=d)
                roots = [_root_on_grid(np.asarray(S["grid"]), marg[:, j])[0] for j in range(len(S["times"]))]
                res.setdefault(d, []).append(dict(delta_star=roots, margin=marg.tolist(), outlier=ev.tolist(),
                                                  edge=edge.tolist(), cosine2=cos2.tolist()))
            tr = np.asarray(traj.train_error)
            data.setdefault(act_name, {})["train_error"] = tr[:, S["times"]].tolist()  # last key
            data[act_name]["max_step_curvature"] = np.asarray(jnp.max(traj.max_step_curvature, axis=-1)).tolist()
            data[act_name]["unstable_fraction_max"] = np.asarray(jnp.max(traj.unstable_fraction, axis=-1)).tolist()
            # integrated response V(t) = (1/δ) Σ_s η R_θ(t, s+1) (the stationary DMFT's V): it converges
            # iff the first phase does; growth in t = slow dynamics / no stationary point to continue to
            data[act_name]["V_trace_max_eig"] = [max_response(traj, t, lr, S["grid"]).tolist() for t in S["times"]]
        half = S["times"].index(S["steps"] // 2)
        for d in S["ds"]:
            ds_ = np.array([r["delta_star"] for r in res[d]])  # (keys, times)
            mean = np.nanmean(ds_, axis=0)
            se = np.nanstd(ds_, axis=0, ddof=1) / np.sqrt(np.sum(np.isfinite(ds_), axis=0)) if len(S["keys"]) > 1 else np.full(mean.shape, np.nan)
            late = mean[half:]
            change = float(np.nanmax(np.abs(late - late[-1])) / late[-1]) if np.all(np.isfinite(late)) else None
            data[act_name][f"d={d}"] = dict(times=S["times"], physical_time=[t * lr for t in S["times"]],
                                            delta_star=mean.tolist(), delta_star_stderr=se.tolist(),
                                            delta_star_per_key=ds_.tolist(), per_key=res[d],
                                            delta_star_change_last_half=change,
                                            beyond_grid=[bool(np.all(np.asarray(r["margin"])[:, j] >= 0)) for r in res[d]
                                                         for j in range(len(S["times"]))][-len(S["times"]):])
            axes[0].errorbar(np.array(S["times"]) * lr, mean, se, fmt="s-", label=f"{act_name} ({len(S['keys'])} keys)")
        tr = np.asarray(data[act_name]["train_error"])
        data[act_name]["train_change_last_half"] = (np.abs(tr[:, -1] - tr[:, half]) / tr[:, half]).tolist()
        ax = axes[1] if act_name == "gelu" else axes[2]
        marg = np.asarray(res[S["ds"][0]][0]["margin"])
        for j, t in enumerate(S["times"]):
            ax.plot(S["grid"], marg[:, j], "o-", label=f"t·η={t * lr:g}")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"{act_name}: outlier margin (n=δ·{S['ds'][0]})")
        ax.set_xlabel("δ")
        ax.legend(fontsize=7)
    axes[0].set_xlabel("physical time t·η")
    axes[0].set_ylabel("δ*(t) (nan: beyond the grid)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "delta_star_trend.png", dpi=100)
    return dict(setting=setting, accuracy=[], performance=perf, data=data, figure="delta_star_trend.png")
