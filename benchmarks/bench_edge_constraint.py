"""The x–D dependence of GD's edge is the trajectory's constraint on the data (issue #4 item 3; dmft/replica.py).

Why. ``edge_tail`` found that GD's constrained edge at t·η = 2.4 lies above (is less extreme than) the edge of
the seed's own blocks D_i with fresh Gaussian x_i, by +0.045 / 0.017 / 0.014 / 0.010 at d = 250 … 2000 (3+ s.e.
each): the x–D dependence, which the iid random-matrix model of the DMFT law leaves out. This benchmark says
what it is. Given GD's trajectory W^0 … W^T, the data's part outside the span S of the teacher coordinates
and W^0 … W^T is Gaussian conditioned on X_⊥ᵀ g^t = 0 for every step's per-sample gradients g^t, and nothing
else (``dmft.trajectory_replica``; GD on a replica retraces the run, ``tests/test_replica.py``). So a replica
X' (S part kept, the rest fresh and projected) has exactly the run's edge law given its trajectory.

Per seed of ``finite_n_edge_law``'s GD runs (same keys; each edge must reproduce the committed one): GD's edge;
the edge of the same blocks with fresh x (teacher coordinates kept) and with the replica, both from the same
Gaussian draw G (key ``fold_in(fold_in(key(fresh_key), d), s)``), so their difference is the constraint's
effect alone; and the leverage of the seed's most extreme block (the sample with the smallest λ_min(D_i)) in
the projector on the step gradients, against the mean leverage m·T/n.

Rows per d: the replica's edge mean and sd against GD's (paired s.e.: the two are exchangeable given the
trajectory, so these test the claim exactly), and the fraction of the x–D shift (GD − fresh) that the
constraint carries ((replica − fresh) / (GD − fresh), informational).
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "edge_constraint"
HERE = pathlib.Path(__file__).resolve().parent


def settings(mode: str) -> dict:
    src = HERE / "results" / ("quick" if mode == "quick" else "") / "finite_n_edge_law.json"
    G = json.loads(src.read_text())["setting"]
    S = dict(source=str(src.relative_to(HERE.parent)), delta=G["delta"], lr=G["lr"], steps=G["steps"], ds=G["ds"],
             seeds=G["seeds"], sim_key=G["sim_key"], k=G["k"], fresh_key=79, max_iters=400, dense_max_dm=3000,
             bootstrap=2000 if mode != "quick" else 200, problem=G["problem"], simulation=G["simulation"],
             replica="X' = X P_S + (I_n − P_g) G (I_d − P_S): S = span(teacher coordinates, W^0 … W^T), P_g = projector on "
                     "[g^0 … g^{T−1}] (dmft.trajectory_replica)",
             fresh="x_i' = (ζ_i, G_i without its teacher coordinates): the same G, no constraint")
    return S


def problem():
    from .bench_matrix_model_edge import problem as p
    return p()


def gd_side(P, S, perf) -> dict:
    import dmft
    from spectral.finite_state import bottom_spectrum
    from spectral.hessian import finite_blocks

    committed = np.asarray(json.loads((HERE.parent / S["source"]).read_text())["data"]["simulation"], float)
    T, hard = S["steps"], list(P.teacher.hard_coordinates())
    out = {}
    for i, d in enumerate(S["ds"]):
        t0 = time.perf_counter()
        sim = dmft.simulate(P, d=d, delta=S["delta"], lr=S["lr"], steps=T, seeds=S["seeds"],
                            key=jax.random.fold_in(jax.random.key(S["sim_key"]), d), freeze_hard=True, return_weights=True,
                            test_samples=256, save_weights_at=tuple(range(T + 1)))
        method = "dense" if d * P.m <= S["dense_max_dm"] else "lanczos"
        spec = lambda X, D, s: bottom_spectrum(X, D, float(P.ridge), tuple(hard), k=S["k"], method=method,
                                               key=jax.random.key(s), max_iters=S["max_iters"])[2]
        rec = dict(edge=[], fresh=[], replica=[], leverage_extreme=[], method=method, n=None, constraint_residual=0.0)
        for s in range(S["seeds"]):
            X, y = dmft.simulation_data(P, sim, s)
            W_at, a_at = sim.W_at[s], sim.a_at[s]
            D = finite_blocks(P, X, y, sim.a[s], sim.W[s])
            rec["edge"].append(float(spec(X, D, s)))
            kx = jax.random.fold_in(jax.random.fold_in(jax.random.key(S["fresh_key"]), d), s)
            Xf = jax.random.normal(kx, X.shape, X.dtype).at[:, hard].set(X[:, hard])
            rec["fresh"].append(float(spec(Xf, D, s)))
            Xr = dmft.trajectory_replica(P, X, y, W_at, a_at, kx)
            rec["replica"].append(float(spec(Xr, D, s)))
            g = dmft.step_gradients(P, X, y, W_at, a_at)
            Ug, _ = jnp.linalg.qr(g)
            i_ext = int(jnp.argmin(jnp.linalg.eigvalsh(D)[:, 0]))
            rec["leverage_extreme"].append(float(jnp.sum(Ug[i_ext] ** 2)))
            # the replica's complement is orthogonal to the step gradients (relative to the unconstrained draw's)
            Qs = dmft.trajectory_span(P, W_at)
            perp = Xr - (Xr @ Qs) @ Qs.T
            rel = float(jnp.abs(g.T @ perp).max() / jnp.abs(g.T @ (Xf - (Xf @ Qs) @ Qs.T)).max())
            rec["constraint_residual"] = max(rec["constraint_residual"], rel)
        rec["n"], rec["mT"] = int(X.shape[0]), int(g.shape[1])
        rec["max_abs_diff_committed"] = float(np.max(np.abs(np.asarray(rec["edge"]) - committed[i])))
        if rec["max_abs_diff_committed"] > 1e-8:
            raise RuntimeError(f"d={d}: GD edges do not reproduce finite_n_edge_law's ({rec['max_abs_diff_committed']:.2e})")
        out[str(d)] = rec
        dt = time.perf_counter() - t0
        perf.append(dict(what=f"GD d={d}: {S['seeds']} seeds, edge + fresh-x + replica edges ({method})", value=dt, unit="s",
                         ratio=None, note=jax.default_backend()))
        e, f, r = (np.asarray(rec[k]) for k in ("edge", "fresh", "replica"))
        print(f"   d={d}: GD {e.mean():.4f} (sd {e.std(ddof=1):.4f}), replica {r.mean():.4f} ({r.std(ddof=1):.4f}), fresh "
              f"{f.mean():.4f} ({f.std(ddof=1):.4f}); residual {rec['constraint_residual']:.1e} ({dt:.0f} s)", flush=True)
        jax.clear_caches()
    return out


def analysis(data, S) -> dict:
    from .bench_finite_n import _row, _se

    tag = f"PR quadratic m=4, η={S['lr']:g}, t·η={S['lr'] * S['steps']:g}, δ={S['delta']:g}"
    rng = np.random.default_rng(0)
    rows, groups = [], []
    for d in S["ds"]:
        g = data["gd"][str(d)]
        e, f, r = (np.asarray(g[k], float) for k in ("edge", "fresh", "replica"))
        lev = np.asarray(g["leverage_extreme"], float)
        s = e.size
        idx = rng.integers(0, s, (S["bootstrap"], s))
        sd_diff_se = float(np.std(r[idx].std(1, ddof=1) - e[idx].std(1, ddof=1), ddof=1))
        rows.append(_row(f"{tag}, d={d}: mean of the constrained edge, trajectory replica (the run's W^0 … W^T kept, the "
                         "rest fresh and orthogonal to the step gradients) vs GD (s.e. of the paired difference)",
                         r.mean(), _se(r - e), e.mean(), 0.0, d, s))
        rows.append(_row(f"{tag}, d={d}: sd over seeds of the constrained edge, trajectory replica vs GD (paired bootstrap "
                         "s.e. of the difference)", r.std(ddof=1), sd_diff_se, e.std(ddof=1), 0.0, d, s))
        shift, carried = float(np.mean(e - f)), float(np.mean(r - f))
        groups.append(dict(d=d, n=g["n"], mT=g["mT"], gd_mean=float(e.mean()), gd_sd=float(e.std(ddof=1)),
                           replica_mean=float(r.mean()), replica_sd=float(r.std(ddof=1)), fresh_mean=float(f.mean()),
                           fresh_sd=float(f.std(ddof=1)), shift_gd_minus_fresh=shift, shift_se=_se(e - f),
                           shift_replica_minus_fresh=carried, carried_se=_se(r - f),
                           corr_gd_replica=float(np.corrcoef(e, r)[0, 1]), corr_gd_fresh=float(np.corrcoef(e, f)[0, 1]),
                           leverage_extreme_mean=float(lev.mean()), leverage_mean=g["mT"] / g["n"],
                           corr_leverage_shift=float(np.corrcoef(lev, r - f)[0, 1]),
                           constraint_residual=g["constraint_residual"], max_abs_diff_committed=g["max_abs_diff_committed"],
                           method=g["method"]))
        rows.append(dict(quantity=f"{tag}, d={d}: x–D shift of the edge, GD − fresh x {shift:+.4f} ± {_se(e - f):.4f}; the "
                                  f"constraint alone (replica − fresh, same draw) {carried:+.4f} ± {_se(r - f):.4f}: fraction "
                                  "carried (informational)",
                         theory=None, simulation=carried / shift if shift else None, d=d, seeds=s, tolerance="informational",
                         agree=None))
        rows.append(dict(quantity=f"{tag}, d={d}: leverage of the most extreme block's sample on the step gradients "
                                  f"(mean over seeds; mean leverage m·T/n = {g['mT'] / g['n']:.4f}; correlation with the "
                                  f"constraint's shift {groups[-1]['corr_leverage_shift']:.2f}) (informational)",
                         theory=None, simulation=float(lev.mean()), d=d, seeds=s, tolerance="informational", agree=None))
    return dict(rows=rows, summary=dict(groups=groups))


def run(mode: str, outdir: pathlib.Path) -> dict:
    jax.config.update("jax_enable_x64", True)
    S, P, perf = settings(mode), problem(), []
    t0 = time.perf_counter()
    data = dict(gd=gd_side(P, S, perf))
    from .runner import assemble
    return assemble(NAME, S, data, analysis, perf, t0, replot, outdir)


def replot(res, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S, G = res["setting"], res["data"]["summary"]["groups"]
    ds = [g["d"] for g in G]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for key, lab, sty in (("gd", "GD", "o-"), ("replica", "trajectory replica", "s--"), ("fresh", "fresh x", "^:")):
        ax[0].plot(ds, [g[f"{key}_mean"] for g in G], sty, mfc="none" if key != "gd" else None, label=lab)
        ax[1].plot(ds, [g[f"{key}_sd"] for g in G], sty, mfc="none" if key != "gd" else None, label=lab)
    ax[0].set_ylabel("mean constrained edge over seeds")
    ax[1].set_ylabel("sd over seeds")
    for a in ax:
        a.set_xscale("log")
        a.set_xlabel("d")
        a.legend(fontsize=8)
    fig.suptitle(f"PR quadratic m=4, δ={S['delta']:g}, t·η={S['lr'] * S['steps']:g}: the same blocks D_i with GD's x, a "
                 "replica of x given the trajectory, fresh x", fontsize=9)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=110)
    plt.close(fig)
