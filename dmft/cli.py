"""The ``deltann`` command."""

from __future__ import annotations

import json
import pathlib
import time

import typer

app = typer.Typer(add_completion=False, help="deltann: DMFT, Hessian spectra and thresholds of two-layer networks.")


@app.callback()
def _root():
    """deltann: DMFT, Hessian spectra and thresholds of two-layer networks."""


def demo_problem():
    import jax.numpy as jnp

    import dmft

    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, eps: jnp.tanh(2 * z[0]) + 0.3 * eps[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1), train_second_layer=False),
        loss=dmft.square_loss,
        ridge=0.0,
        init=dmft.Init(q0=jnp.array([[0.5]]), overlap=jnp.array([[0.3]])),
    )


@app.command()
def demo(
    d: int = typer.Option(2000, help="dimension of the GD simulation"),
    seeds: int = typer.Option(4, help="GD seeds"),
    paths: int = typer.Option(50_000, help="DMFT Monte Carlo paths"),
    steps: int = typer.Option(40, help="GD steps"),
    out: pathlib.Path = typer.Option(pathlib.Path("deltann_demo.png"), help="figure path"),
    json_out: pathlib.Path = typer.Option(None, "--json", help="also write the curves as JSON"),
):
    """Embedded default: DMFT against GD for a tanh student on y = tanh(2z) + 0.3ε
    (m = 1, δ = 2, η = 0.2, warm start M^0 = 0.3, q0 = 0.5), printed and plotted."""
    import jax
    import numpy as np

    import dmft

    problem = demo_problem()
    t0 = time.perf_counter()
    traj = dmft.solve(problem, delta=2.0, lr=0.2, steps=steps, paths=paths, key=jax.random.key(0))
    jax.block_until_ready(traj.train_error)
    t_dmft = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim = dmft.simulate(problem, d=d, delta=2.0, lr=0.2, steps=steps, seeds=seeds, key=jax.random.key(1))
    jax.block_until_ready(sim.train_error_seeds)
    t_sim = time.perf_counter() - t0
    typer.echo(f"setting: tanh student m=1, y=tanh(2z)+0.3eps, delta=2, lr=0.2, M0=0.3, q0=0.5; "
               f"DMFT paths={paths} ({t_dmft:.1f}s incl. compile); GD d={d}, seeds={seeds} ({t_sim:.1f}s)")
    typer.echo(f"{'step':>4} | {'train DMFT':>10} {'train GD':>16} | {'test DMFT':>10} {'test GD':>16} | {'M DMFT':>7} {'M GD':>15}")
    tr, te, ov = np.asarray(traj.train_error), np.asarray(traj.test_error), np.asarray(traj.overlap[:, 0, 0])
    str_, ste, sov = np.asarray(sim.train_error), np.asarray(sim.test_error), np.asarray(sim.overlap[:, 0, 0])
    etr, ete, eov = np.asarray(sim.train_error_stderr), np.asarray(sim.test_error_stderr), np.asarray(sim.overlap_stderr[:, 0, 0])
    for t in range(0, steps + 1, max(1, steps // 10)):
        typer.echo(f"{t:>4} | {tr[t]:>10.4f} {str_[t]:>8.4f}±{etr[t]:.4f} | {te[t]:>10.4f} {ste[t]:>8.4f}±{ete[t]:.4f} | "
                   f"{ov[t]:>7.4f} {sov[t]:>7.4f}±{eov[t]:.4f}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ts = np.arange(steps + 1)
    ax[0].plot(ts, tr, "C0-", label="train (DMFT)")
    ax[0].errorbar(ts, str_, etr, fmt="C0o", ms=3, label=f"train (GD, d={d})")
    ax[0].plot(ts, te, "C1-", label="test (DMFT)")
    ax[0].errorbar(ts, ste, ete, fmt="C1s", ms=3, label="test (GD)")
    ax[0].set_xlabel("step")
    ax[0].legend(fontsize=8)
    ax[1].plot(ts, ov, "C2-", label="overlap M (DMFT)")
    ax[1].errorbar(ts, sov, eov, fmt="C2o", ms=3, label="overlap M (GD)")
    ax[1].set_xlabel("step")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    typer.echo(f"figure written to {out.resolve()}")
    if json_out is not None:
        json_out.write_text(json.dumps(dict(setting=dict(traj=traj.setting, sim=sim.setting),
                                            dmft=dict(train=tr.tolist(), test=te.tolist(), overlap=ov.tolist()),
                                            gd=dict(train=str_.tolist(), test=ste.tolist(), overlap=sov.tolist(),
                                                    train_se=etr.tolist(), test_se=ete.tolist(), overlap_se=eov.tolist())), indent=1))
        typer.echo(f"JSON written to {json_out.resolve()}")


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
