"""What GD learns inside the window of ``bench_window_bounded`` (issue #4): the hard overlap after escape,
DMFT against finite-d GD from random initialization.

What. The setting of ``bench_window_bounded`` (y = z_1 + z_2² − 1, GeLU m = 2, a = (1, 1) frozen, Q0 = I,
Huber width 1, ridge 0.5, η = 0.5), where the first phase converges and its Hessian has a negative hard
outlier for δ below δ_up ≈ 5–6. Past the escape, GD does not reach a fixed "learned" overlap: it settles
at a new minimum whose hard overlap shrinks as the outlier approaches 0 (measured in session 29), so a
success criterion "hard cos > c" is not a threshold here. The parameter-free comparison is the final
hard overlap itself.

How. (1) DMFT: the same problem started with a small hard overlap M⁰_hard = ε·(1, −1)/√2 (the
antisymmetric mode of the two equal units carries the outlier; (1, 1) decays within 30 steps), run for
``dmft_steps`` steps, ``dmft.solve_sweep`` over the δ grid (one compilation), ``keys`` independent keys:
the final hard cos ‖M_hard‖/‖W‖ and its change over the last quarter (plateau reached or not). In the
d → ∞ limit GD from random initialization escapes from O(d^{-1/2}) along the same outlier and ends at
the same plateau (the escape time grows like log d, not the plateau). (2) GD: ``dmft.success_curve``
(random initialization, hard overlap O(d^{-1/2}), float32) at each d, ``seeds`` seeds, ``gd_steps``
steps; the final hard cos per seed.

Rows (``accuracy_rows``, recomputed from the stored per-key / per-seed values by the test): per (d, δ)
where the DMFT plateau is above ``PLATEAU_MIN`` in every key, DMFT final hard cos vs the seed mean of
GD's (3 combined s.e.; no finite-size allowance); elsewhere (no plateau) GD's seed-mean cos·√d at the
two d (an O(d^{-1/2}) fluctuation keeps it d-independent) — reported, with agreement = the two within
3 combined s.e.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft.success import hard_cosine, success_curve

from .bench_spectral_finite_size import _se
from .bench_two_route import problem
from .bench_window_bounded import A, ACT, RIDGE

NAME = "window_plateau"
PLATEAU_MIN = 0.1  # DMFT final hard cos above which the row compares plateaus (below: no escape at d → ∞)


def warm_problem(eps):
    p = problem(ACT, RIDGE, a=A)
    m0 = jnp.zeros((2, len(A))).at[1].set(eps * jnp.array([1.0, -1.0]) / jnp.sqrt(2.0))
    return dmft.Problem(teacher=dmft.Teacher(link=p.teacher.link, k=2, noise_dim=0, hard=(1,)), student=p.student,
                        loss=p.loss, ridge=p.ridge, init=dmft.Init(q0=p.init.q0, overlap=m0))


def _row(quantity, theory, theory_se, sim, sim_se, d, seeds, note=None):
    tol = 3 * float(np.hypot(theory_se, sim_se))
    ok = np.isfinite(theory) and np.isfinite(sim) and np.isfinite(tol)
    r = dict(quantity=quantity, theory=float(theory), theory_stderr=float(theory_se), simulation=float(sim),
             sim_stderr=float(sim_se), d=d, seeds=seeds, tolerance=tol, tolerance_rule="3 combined s.e.",
             agree=bool(ok and abs(theory - sim) <= tol))
    if note:
        r["note"] = note
    return r


def _breakdown(theory, i):
    """(note, broken) for δ index ``i``: where the solver flagged the field factor (runs that stored
    ``factor_breakdown``): which keys, from which step, the residual there and at the last step (docs/dmft.md,
    "Conditioning at late times"); ``broken`` when any key was flagged."""
    fb = theory.get("factor_breakdown")
    if not fb:
        return "", False
    bad = [(k, b[i], theory["factor_residual_final"][k][i]) for k, b in enumerate(fb) if b[i] is not None]
    if not bad:
        return "; field factor faithful at every step of every key", False
    return "; field factor flagged (values from that step on less reliable): " + ", ".join(
        f"key {k} from step {b[0]} (residual {b[1]:.2g}, {r:.2g} at the end)" for k, b, r in bad), True


def accuracy_rows(S, theory, gd):
    acc = []
    cos_th = np.asarray(theory["cos_final"], float)        # (keys, len(grid))
    chg = np.asarray(theory["cos_change_last_quarter"], float)
    tag = f"window plateau GeLU a=(1,1) ridge {S['ridge']:g}"
    for i, dl in enumerate(S["grid"]):
        th = cos_th[:, i]
        if np.all(th > PLATEAU_MIN):
            # S["plateau_change_max"] (window_plateau_paths; absent in window_plateau's committed setting): a DMFT
            # key whose hard cos still changes by more over the last quarter is not at its plateau, so the row
            # says so and does not count as agreement
            rising = "plateau_change_max" in S and bool(np.any(np.abs(chg[:, i]) > S["plateau_change_max"]))
            fnote, broken = _breakdown(theory, i)
            for d in S["ds"]:
                c = np.asarray(gd[str(d)]["cos_final"], float)[i]
                r = _row(f"{tag} δ={dl:g}: final hard cos, DMFT from M⁰_hard = {S['eps']:g} "
                         f"(t·η={S['dmft_steps'] * S['lr']:g}{', NOT at its plateau' if rising else ''}) vs GD from random "
                         f"init (t·η={S['gd_steps'] * S['lr']:g})", th.mean(), _se(th), c.mean(), _se(c), d, c.size,
                         note=f"DMFT change of the hard cos over the last quarter: {np.round(chg[:, i], 4).tolist()} (keys)"
                              + fnote)
                if rising:     # not compared: None, not False (referee audit, session 51: |diff| was inside the tolerance)
                    r["agree"] = None
                    r["tolerance_rule"] += f"; not compared: a DMFT key changed by > {S['plateau_change_max']:g} over the last quarter"
                if broken:
                    # a key's field factor broke before the last step: its final value is not the plateau (session 31:
                    # a key on its plateau 0.329 fell to 0.146 within 5 steps of the break)
                    r["agree"] = None
                    r["tolerance_rule"] += "; not compared: a DMFT key's field factor broke before the last step"
                acc.append(r)
        else:
            c = [np.asarray(gd[str(d)]["cos_final"], float)[i] * np.sqrt(d) for d in S["ds"]]
            acc.append(_row(f"{tag} δ={dl:g}: no DMFT plateau (final hard cos {np.round(th, 4).tolist()}); GD final "
                            f"hard cos·√d at d={S['ds'][0]} (theory column) vs d={S['ds'][-1]} (an O(d^-1/2) "
                            "fluctuation keeps it d-independent)", c[0].mean(), _se(c[0]), c[-1].mean(), _se(c[-1]),
                            f"{S['ds'][0]}, {S['ds'][-1]}", c[-1].size))
    return acc


def figure(S, theory, gd, outdir, name=NAME):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    th = np.asarray(theory["cos_final"], float)
    ax.errorbar(S["grid"], th.mean(0), [_se(v) for v in th.T], fmt="k-o",
                label=f"DMFT from M⁰_hard = {S['eps']:g}, t·η = {S['dmft_steps'] * S['lr']:g}")
    for c, d in enumerate(S["ds"]):
        g = np.asarray(gd[str(d)]["cos_final"], float)
        ax.errorbar(np.asarray(S["grid"]) + 0.05 * (c + 1), g.mean(1), [_se(v) for v in g], fmt="s", color=f"C{c}",
                    label=f"GD from random init, d={d}, t·η = {S['gd_steps'] * S['lr']:g}")
    ax.set_xlabel("δ")
    ax.set_ylabel("final hard cos ‖M_hard‖/‖W‖")
    ax.set_title(f"y = z1 + z2² − 1, GeLU m=2, a=(1,1), Huber, ridge {S['ridge']:g}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{name}.png", dpi=110)
    plt.close(fig)


def setting(quick: bool) -> dict:
    """The setting of ``run`` (also the base of ``bench_window_plateau_paths``)."""
    return dict(act=ACT, a=list(A), ridge=RIDGE, lr=0.5, eps=0.05, grid=[3.0, 4.0, 8.0] if quick else [3.0, 4.0, 5.0, 6.0, 8.0],
            dmft_steps=60 if quick else 300, paths=512 if quick else 4096, keys=2 if quick else 3,
            ds=[200, 400] if quick else [1000, 2000], seeds=3 if quick else 6, gd_steps=300 if quick else 1600, key=0,
            plateau_min=PLATEAU_MIN, init_dmft="M0_hard = eps (1, -1)/sqrt(2), M0_easy = 0, Q0 = I",
            init_gd="random (rows N(0, Q0/d) in all directions: hard overlap O(d^-1/2)), float32",
            keys_note="DMFT: fold_in(key(key), 200 + k); GD: fold_in(key(key), d) (success_curve, fold_in per δ)")


def run(mode: str, outdir: pathlib.Path) -> dict:
    return measure(setting(mode == "quick"), outdir)


def measure(S: dict, outdir: pathlib.Path, name: str = NAME) -> dict:
    """The DMFT warm-start plateaus and GD's final hard overlaps for the setting ``S`` (keys as in ``run``);
    also used by ``bench_window_plateau_paths`` with more paths on fewer δ."""
    root = jax.random.key(S["key"])
    perf = []
    t0 = time.perf_counter()
    P = warm_problem(S["eps"])
    theory = dict(cos_final=[], cos_change_last_quarter=[], train_final=[], cos_curve=[], factor_breakdown=[],
                  factor_residual_final=[])
    q = S["dmft_steps"] * 3 // 4
    for k in range(S["keys"]):
        # chol_jitter: S's (docs/dmft.md, "Conditioning at late times"), else the solver's default
        tr = dmft.solve_sweep(P, np.asarray(S["grid"]), S["lr"], S["dmft_steps"], S["paths"], jax.random.fold_in(root, 200 + k),
                              chol_jitter=S.get("chol_jitter"))
        # per δ: [first step where the field factor stops reproducing C_θ, its residual] or None (the solver's
        # own test, which also warns); the residual at the last step
        theory["factor_breakdown"].append([None if b is None else list(b) for b in sys.modules["dmft.solve"]._factor_breakdowns(tr)])
        theory["factor_residual_final"].append(np.asarray(tr.factor_residual)[:, -1].tolist())
        cos = np.asarray(hard_cosine(tr.overlap, tr.gram, (1,)))          # (len(grid), steps+1)
        theory["cos_final"].append(cos[:, -1].tolist())
        theory["cos_change_last_quarter"].append((cos[:, -1] - cos[:, q]).tolist())
        theory["train_final"].append(np.asarray(tr.train_error)[:, -1].tolist())
        theory["cos_curve"].append(cos[:, :: max(1, S["dmft_steps"] // 30)].tolist())
        print(f"   DMFT key {k}: final hard cos {np.round(cos[:, -1], 4).tolist()}", flush=True)
    perf.append(dict(what=f"DMFT warm start: {len(S['grid'])} δ (vmapped) × {S['keys']} keys, {S['dmft_steps']} steps, "
                          f"{S['paths']} paths", value=time.perf_counter() - t0, unit="s", ratio=None, note="incl. compilation"))
    gd = {}
    Pg = problem(ACT, RIDGE, a=A)
    for d in S["ds"]:
        t0 = time.perf_counter()
        sc = success_curve(Pg, d, S["grid"], lr=S["lr"], steps=S["gd_steps"], seeds=S["seeds"], threshold=0.3,
                           key=jax.random.fold_in(root, d))
        gd[str(d)] = dict(cos_final=np.asarray(sc.cos_final).tolist(), escape_step=np.asarray(sc.escape_step).tolist(),
                          record_steps=np.asarray(sc.record_steps).tolist(),
                          cos_median_curve=np.median(np.asarray(sc.cos_curves), axis=1).tolist())
        print(f"   GD d={d}: mean final hard cos {np.round(np.asarray(sc.cos_final).mean(1), 4).tolist()}", flush=True)
        perf.append(dict(what=f"GD from random init d={d}: {len(S['grid'])} δ × {S['seeds']} seeds × {S['gd_steps']} "
                              "steps (float32)", value=time.perf_counter() - t0, unit="s", ratio=None,
                         note="incl. compilation"))
    acc = accuracy_rows(S, theory, gd)
    figure(S, theory, gd, outdir, name)
    return dict(setting=S, accuracy=acc, performance=perf, data=dict(theory=theory, gd=gd), figure=f"{name}.png")


def replot(res, outdir):
    figure(res["setting"], res["data"]["theory"], res["data"]["gd"], outdir)


def reanalyze(res: dict) -> dict:
    """The rows again from the stored per-key DMFT and per-seed GD final cos (``accuracy_rows``); no run."""
    return dict(res, accuracy=accuracy_rows(res["setting"], res["data"]["theory"], res["data"]["gd"]))
