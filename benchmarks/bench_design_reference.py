"""The engine's prediction for GeLU in the separation-design setting (issue #7): the dynamic route.

Why: ``bench_design`` designs an activation that lowers the separation-criterion δ_NN (softplus
1.295 → designed 1.121, stationary route), and #7 asks for "lower than GeLU's". GeLU's stationary
DMFT does not converge near its threshold there (LM residual 0.04–0.5 at δ = 2.2, design.json), so
the stationary route gives GeLU no number. The dynamic route does: δ*(t) from the DMFT run to the GD
horizon of ``bench_design_spectral`` (η = 0.5, 400 steps: t·η = 200), level "edge" (separation),
strict convention (D bounded: pseudo-Huber), with δ_NN from the trend of δ*(t)
(``spectral.thresholds.delta_star``). The designed activation is run the same way, so its two routes
can be compared too.

Rows: (1) the designed activation's δ*(t·η = 200) against its stationary δ_NN (design.json: two
routes, one criterion); (2) designed δ_NN (stationary) against GeLU δ*(t·η = 200): lower by > 3
combined s.e. GeLU's δ*(t·η = 200) against its finite-d threshold from GD-trained networks
(design_spectral.json, d = 1000) is checked by tests/test_design_spectral_results.py from the two
committed files (they are produced by separate runs).

Setting as bench_design_spectral: staircase y = z1 + z2² − 1, m = 2, a = (1, ½) frozen, Q0 = I,
pseudo-Huber 1, ridge 0.3, normalized combination family; GeLU = c (0, 0, 0, 1).
"""

from __future__ import annotations

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft.families as fam
from spectral.thresholds import delta_star

NAME = "design_reference"
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
GELU = [0.0, 0.0, 0.0, 1.0]


def _committed(name):
    try:
        return json.loads((RESULTS / f"{name}.json").read_text())
    except OSError:
        return None


def settings(mode: str) -> dict:
    S = dict(family="combination-normalized", loss="pseudo-Huber 1", ridge=0.3, lr=0.5, steps=400,
             times=[50, 100, 200, 400], paths=1024, repeats=4, refine=3, key=7, level="edge", convention="strict",
             grids=dict(gelu=[1.4, 1.8, 2.2, 2.6, 3.0], designed=[0.8, 1.0, 1.2, 1.4, 1.6]))
    if mode == "quick":
        S.update(steps=40, times=[10, 20, 40], paths=256, refine=2, repeats=2)
    return S


def accuracy_rows(S, data, design):
    """Rows from the runs in ``data`` and the committed design.json (the designed activation's
    stationary δ_NN on its 6 eval keys)."""
    acc = []
    t_last = -1
    g, dz = data["gelu"], data["designed"]
    gth, gse = g["delta_star"][t_last], g["delta_star_stderr"][t_last]
    horizon = f"t·η = {S['times'][t_last] * S['lr']:g}"
    if design is not None:
        ev = np.array([r["delta_nn"] for r in design["diagnostics"]["evaluation"]["designed"]], float)
        st, st_se = float(ev.mean()), float(ev.std(ddof=1) / np.sqrt(ev.size))
        dth, dse = dz["delta_star"][t_last], dz["delta_star_stderr"][t_last]
        se = float(np.hypot(st_se, dse))
        acc.append(dict(quantity=f"designed: δ_NN stationary route (design.json, {ev.size} keys) vs DMFT δ*({horizon}) "
                                 f"dynamic route", theory=st, theory_stderr=st_se, simulation=dth, sim_stderr=dse,
                        d="inf (both DMFT)", seeds=S["repeats"], tolerance=3 * se, agree=bool(abs(st - dth) <= 3 * se)))
        se = float(np.hypot(st_se, gse))
        acc.append(dict(quantity=f"designed δ_NN (stationary, design.json) below GeLU's DMFT δ*({horizon}) (dynamic route)",
                        theory=st, theory_stderr=st_se, simulation=gth, sim_stderr=gse, d="inf (both DMFT)",
                        seeds=S["repeats"], tolerance="lower by > 3 combined s.e.", agree=bool(gth - st > 3 * se)))
    return acc


def replot(res: dict, outdir: pathlib.Path):
    figure(res["setting"], res["data"], outdir)


def figure(S, data, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for j, (name, r) in enumerate(data.items()):
        t = np.asarray(S["times"]) * S["lr"]
        ax.errorbar(t, r["delta_star"], r["delta_star_stderr"], fmt="o-", color=f"C{j}", label=f"{name}: δ*(t) ({r['status']})")
    ax.set_xscale("log")
    ax.set_xlabel("t·η")
    ax.set_ylabel("δ*(t), separation criterion")
    ax.set_title("dynamic route, strict convention", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)


def run(mode: str, outdir: pathlib.Path) -> dict:
    S = settings(mode)
    design = _committed("design")
    if design is None:
        raise FileNotFoundError("benchmarks/results/design.json is needed (the designed activation's coefficients).")
    coef = dict(gelu=GELU, designed=design["diagnostics"]["design"]["params"])
    make = fam.staircase_family(S["family"])
    data, perf = {}, []
    for name in ("gelu", "designed"):
        P = make(dict(c=jnp.asarray(coef[name], float), width=jnp.asarray(1.0), ridge=jnp.asarray(S["ridge"])))
        t0 = time.perf_counter()
        b = delta_star(P, grid=S["grids"][name], lr=S["lr"], steps=S["steps"], times=tuple(S["times"]), paths=S["paths"],
                       key=jax.random.key(S["key"]),   # the same keys for both activations (paired)
                       convention=S["convention"], refine=S["refine"], repeats=S["repeats"], level=S["level"])
        wall = time.perf_counter() - t0
        data[name] = dict(c=[float(x) for x in coef[name]], grid=S["grids"][name],
                          delta_star=np.asarray(b.delta_star).tolist(), delta_star_stderr=np.asarray(b.delta_star_stderr).tolist(),
                          per_repeat=np.asarray(b.per_repeat).tolist(), status=b.status, message=b.message,
                          delta_nn=b.delta_nn, delta_nn_stderr=b.delta_nn_stderr)
        perf.append(dict(what=f"{name}: δ*(t) dynamic route, T={S['steps']}, {S['paths']} paths, {S['repeats']} keys",
                         value=wall, unit="s", ratio=None, note="incl. compilation"))
        print(f"   {name}: δ*(t) {np.round(b.delta_star, 3).tolist()} ± {np.round(b.delta_star_stderr, 3).tolist()} "
              f"({b.status}; {wall:.0f} s)", flush=True)
    acc = accuracy_rows(S, data, design)
    figure(S, data, outdir)
    return dict(setting=S, accuracy=acc, performance=perf, data=data, figure=f"{NAME}.png")
