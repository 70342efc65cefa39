"""A tiny end-to-end benchmark for the test suite (so the runner cannot rot): DMFT against
GD for a linear student with ridge (square loss), at test sizes. Not part of ``run`` by
default; ``python -m benchmarks run --only smoke`` runs it."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np

import dmft

NAME = "smoke"


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    P = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.5 * e[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=lambda x: x, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss, ridge=0.05,
        init=dmft.Init(q0=jnp.array([[1.0]]), overlap=jnp.array([[0.2]])),
    )
    S = dict(delta=2.0, lr=0.3, steps=10, paths=4096, d=200, seeds=4)
    a = dmft.solve(P, delta=S["delta"], lr=S["lr"], steps=S["steps"], paths=S["paths"] // 2, key=jax.random.key(1))
    b = dmft.solve(P, delta=S["delta"], lr=S["lr"], steps=S["steps"], paths=S["paths"] // 2, key=jax.random.key(2))
    sim = dmft.simulate(P, d=S["d"], delta=S["delta"], lr=S["lr"], steps=S["steps"], seeds=S["seeds"], key=jax.random.key(3))
    th = 0.5 * (np.asarray(a.train_error) + np.asarray(b.train_error))
    th_se = 0.5 * np.abs(np.asarray(a.train_error) - np.asarray(b.train_error))
    sm, se = np.asarray(sim.train_error), np.asarray(sim.train_error_stderr)
    t = S["steps"]
    tol = float(4 * np.hypot(th_se[t], se[t]) + 0.01)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(th, label="DMFT")
    ax.errorbar(np.arange(t + 1), sm, se, fmt="o", label="GD")
    ax.legend()
    fig.savefig(pathlib.Path(outdir) / "smoke.png", dpi=80)
    return dict(setting=S, figure="smoke.png",
                accuracy=[dict(quantity=f"linear ridge: train error at t={t}", theory=float(th[t]), simulation=float(sm[t]),
                               sim_stderr=float(se[t]), d=S["d"], seeds=S["seeds"], tolerance=tol,
                               agree=bool(abs(th[t] - sm[t]) <= tol))],
                performance=[])
