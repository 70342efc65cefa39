"""The ``deltann`` command."""

from __future__ import annotations

import json
import math
import pathlib
import time

import typer

from .provenance import software  # every --json file's software and machine (its options: its ``setting``)


def strict_json(obj) -> str:
    """JSON text of ``obj`` that strict parsers accept: every non-finite float (NaN, ±inf, in numpy scalars and
    arrays too) becomes ``null``, numpy values become Python ones, and ``allow_nan=False`` guarantees that no
    ``NaN`` / ``Infinity`` token is written (a number that is not known is null, never a fake value)."""
    import numpy as np

    def clean(o):
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        if hasattr(o, "shape") and hasattr(o, "dtype"):      # numpy / jax arrays and scalars -> Python values
            return clean(np.asarray(o).tolist())
        if isinstance(o, float):
            return o if math.isfinite(o) else None
        return o

    return json.dumps(clean(obj), indent=1, allow_nan=False)


app = typer.Typer(add_completion=False, help="deltann: DMFT, Hessian spectra and thresholds of two-layer networks.")


@app.callback()
def _root():
    """deltann: DMFT, Hessian spectra and thresholds of two-layer networks."""
    from .xla_flags import fast_cpu_compile

    fast_cpu_compile()  # before any computation: faster XLA CPU compilation (dmft/xla_flags.py)


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

    try:
        _check_options(d=(d, "int>=2"), seeds=(seeds, "int>=1"), paths=(paths, "int>=64"), steps=(steps, "int>=1"))
        for flag, path in (("--out", out), ("--json", json_out)):
            if path is not None and not path.resolve().parent.is_dir():
                raise CLIError(f"{flag} {path}: the directory {path.resolve().parent} does not exist; create it first "
                               "(checked before the runs, so no result is lost).")
    except CLIError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
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
        json_out.write_text(strict_json(dict(provenance=software(), setting=dict(
                                                 problem="y = tanh(2 z) + 0.3 eps (k = 1, noise_dim = 1); tanh student, m = 1, "
                                                         "a = 1 frozen; square loss; ridge 0; q0 = 0.5, M0 = 0.3 "
                                                         "(dmft.cli.demo_problem)",
                                                 delta=2.0, lr=0.2, traj=traj.setting, sim=sim.setting),
                                             dmft=dict(train=tr.tolist(), test=te.tolist(), overlap=ov.tolist()),
                                             gd=dict(train=str_.tolist(), test=ste.tolist(), overlap=sov.tolist(),
                                                     train_se=etr.tolist(), test_se=ete.tolist(), overlap_se=eov.tolist()))))
        typer.echo(f"JSON written to {json_out.resolve()}")



# ---------------------------------------------------------------------------------------
# thresholds: delta-nn and simulate
# ---------------------------------------------------------------------------------------

ACTIVATION_NAMES = ("gelu", "relu", "tanh", "quadratic", "erf", "softplus", "silu", "relu-power")  # dmft.activations
TARGETS = ("phase-retrieval", "noisy-phase-retrieval", "abs", "easy-hard")


class CLIError(Exception):
    pass


def make_activation(name: str, power: float = 2.0):
    import importlib

    import jax
    import jax.numpy as jnp
    import numpy as np

    from . import activations

    if name in activations.ACTIVATIONS or name == "relu-power":
        fn = activations.get(name, power)
    elif ":" in name:
        mod, _, attr = name.partition(":")
        if not mod or not attr:
            raise CLIError(f"--activation {name!r}: give module:function, both non-empty (e.g. mymod:act).")
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as exc:
            raise CLIError(f"--activation {name!r}: cannot import {attr!r} from module {mod!r} ({exc}); "
                           "give module:function with the module on PYTHONPATH.") from exc
        except Exception as exc:     # the user's module failed while importing (SyntaxError, RuntimeError, ...)
            raise CLIError(f"--activation {name!r}: importing module {mod!r} failed ({type(exc).__name__}: {exc}); "
                           "fix the module.") from exc
        if not callable(fn):
            raise CLIError(f"--activation {name!r}: {attr} is not callable.")
    else:
        raise CLIError(f"--activation {name!r} does not exist; choose one of {', '.join(ACTIVATION_NAMES)} "
                       "or a user function as module:function.")
    xs = jnp.linspace(-4.0, 4.0, 101)
    try:
        vals = jax.vmap(fn)(xs)
        d2 = jax.vmap(jax.grad(jax.grad(lambda x: fn(x))))(xs)
    except Exception as exc:
        raise CLIError(f"--activation {name!r} is not differentiable by JAX on [-4, 4] ({type(exc).__name__}: {exc}); "
                       "write it with jax.numpy so autodiff can take two derivatives.") from exc
    for what, v in (("values", vals), ("second derivative", d2)):
        if not np.all(np.isfinite(np.asarray(v))):
            raise CLIError(f"--activation {name!r} returns non-finite {what} on [-4, 4]; fix the function.")
    return fn


def make_problem(target, activation, width, loss, init_scale, train_second_layer, power=2.0, noise=0.1, ridge=0.0):
    import jax.numpy as jnp

    import dmft

    act = make_activation(activation, power)
    if target == "phase-retrieval":
        teacher = dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0)
    elif target == "noisy-phase-retrieval":
        teacher = dmft.Teacher(link=lambda z, e: z[0] ** 2 + noise * e[0], k=1, noise_dim=1, hard=(0,))
    elif target == "abs":
        teacher = dmft.Teacher(link=lambda z, e: jnp.abs(z[0]), k=1, noise_dim=0)
    elif target == "easy-hard":
        teacher = dmft.Teacher(link=lambda z, e: z[0] + (z[1] ** 2 - 1), k=2, noise_dim=0)
    else:
        raise CLIError(f"--target {target!r} does not exist; choose one of {', '.join(TARGETS)}.")
    if loss == "square":
        lossf = dmft.square_loss
    elif loss.startswith("huber"):
        try:
            w = float(loss.split(":")[1]) if ":" in loss else 1.0
        except ValueError as exc:
            raise CLIError(f"--loss {loss!r}: the Huber width must be a number, e.g. huber:1.") from exc
        lossf = dmft.huber_loss(w)
    else:
        raise CLIError(f"--loss {loss!r} does not exist; choose square or huber[:width].")
    if width < 1:
        raise CLIError("--width must be >= 1.")
    if not init_scale > 0:
        raise CLIError("--init-scale must be > 0.")
    if not ridge >= 0:
        raise CLIError("--ridge must be >= 0.")
    k = teacher.k
    return dmft.Problem(
        teacher=teacher,
        student=dmft.TwoLayer(activation=act, width=width, second_layer=jnp.ones(width) / width,
                              train_second_layer=train_second_layer),
        loss=lossf, ridge=ridge,
        init=dmft.Init(q0=init_scale**2 * jnp.eye(width), overlap=jnp.zeros((k, width))),
    )


def _check_options(**opts):
    """Bad numeric options fail here, before any compilation: ``name=(value, kind)`` with kind "int>=k"
    (an integer at least k) or "pos" (a finite float > 0)."""
    for name, (v, kind) in opts.items():
        flag = "--" + name.replace("_", "-")
        if kind.startswith("int>="):
            k = int(kind[5:])
            if v is None or int(v) != v or v < k:
                raise CLIError(f"{flag} {v}: must be an integer >= {k}.")
        elif v is None or not math.isfinite(v) or v <= 0:
            raise CLIError(f"{flag} {v}: must be a finite number > 0.")


def _grid(spec: str):
    try:
        vals = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError as exc:
        raise CLIError(f"--grid {spec!r}: give comma-separated δ values, e.g. 1,2,3,5,8.") from exc
    if len(vals) < 2 or any(not math.isfinite(v) or v <= 0 for v in vals):
        raise CLIError(f"--grid {spec!r}: need at least two δ values, all finite and > 0.")
    if len(set(vals)) != len(vals):
        raise CLIError(f"--grid {spec!r}: a δ value repeats; give each δ once.")
    return sorted(vals)      # printed, stored and keyed in increasing δ (an unsorted grid once misread the 50 % point)


LAW_KEY = 1_000_003   # fold_in tag of the --law-d run's keys (independent of the --d run's repeats 0, 1, ...)
LAW_CRITERION = ("an outlier below the run's own edge (the criterion of δ*_n); its hard cos² grows from 0 there, so a "
                 "GD criterion 'hard weight > c' is met higher (width-1 default: by 0.6–1.1 at c = 0.25, "
                 "benchmarks/results/success_law_width1.json); --min-cosine2 c gives that criterion's law")


def _success_law_report(res, res2, d, law_d, min_cosine2=None) -> dict:
    """Print the law over GD runs per time (spectral.success_laws) and return its JSON block."""
    import numpy as np

    from spectral.success_law import success_laws

    typer.echo(f"at d = {law_d} (independent keys): δ*_n(t) = "
               + ", ".join(f"{v:.4g} ± {e:.2g}" for v, e in zip(res2.delta_star, res2.delta_star_stderr)))
    if res2.status == "no-bracket":
        typer.echo(f"no success law: {res2.message}", err=True)
    rows = [] if res2.status == "no-bracket" else success_laws([res, res2])
    typer.echo(f"which runs succeed at finite d: P = exp(−exp(−(δ − δ*_n(d))/b)), b = dδ*_n/d ln d from d = {d}, {law_d}")
    crit = LAW_CRITERION if min_cosine2 is None else (f"an outlier below the run's own edge whose hard cos² is >= "
                                                      f"{min_cosine2:g} (--min-cosine2)")
    typer.echo(f"(success = {crit})")
    typer.echo(f"{'t':>6} {'b':>8} {'± s.e.':>8} {'δ 10%':>8} {'median':>8} {'δ 90%':>8}  (at d = {d})")
    per_time = []
    for row in rows:
        L = row["law"]
        if L is None:
            typer.echo(f"{row['t']:>6}  no law: {row['reason']}")
            per_time.append(dict(t=row["t"], ok=False, reason=row["reason"]))
            continue
        q10, q90 = (float(L.quantile(p, d)) for p in (0.1, 0.9))
        typer.echo(f"{row['t']:>6} {L.scale:>8.4f} {L.scale_stderr:>8.2g} {q10:>8.4g} {float(L.median(d)):>8.4g} {q90:>8.4g}")
        per_time.append(dict(t=row["t"], ok=True, reason=None, scale=L.scale, scale_stderr=L.scale_stderr, sd=L.sd,
                             **{k: {str(dim): float(f(dim)) for dim in (d, law_d)} for k, f in
                                (("loc", L.loc), ("loc_stderr", L.loc_stderr), ("median", L.median), ("mean", L.mean),
                                 ("quantile_10", lambda x: L.quantile(0.1, x)), ("quantile_90", lambda x: L.quantile(0.9, x)))}))
    return dict(ds=[d, law_d], law_key=f"fold_in(key(seed), {LAW_KEY})", per_time=per_time, criterion=crit,
                convention="a run at (δ, d) succeeds iff δ > δ*_n(d/Γ₁), Γ₁ ~ Exp(1) (its most extreme sample's tail "
                           "mass); loc = δ*_n(d) is the 1/e point; fit: δ*_n(d) = intercept + b ln(d/d_ref) through two d "
                           "(no linearity check)",
                law_run=dict(status=res2.status, message=res2.message,
                             delta_star=np.asarray(res2.delta_star).tolist(),
                             stderr=np.asarray(res2.delta_star_stderr).tolist(), setting=res2.setting,
                             paths_per_n=res2.diagnostics.get("paths_per_n"),
                             finite_n_resolved=res2.diagnostics.get("finite_n_resolved")))


@app.command("delta-nn")
def delta_nn(
    target: str = typer.Option("phase-retrieval", help=f"teacher: {', '.join(TARGETS)}"),
    activation: str = typer.Option("quadratic", help=f"{', '.join(ACTIVATION_NAMES)} or module:function"),
    width: int = typer.Option(1, help="student width m"),
    loss: str = typer.Option("square", help="square or huber[:width]"),
    init_scale: float = typer.Option(1.0, help="rows of sqrt(d) W0 ~ N(0, init_scale^2 I)"),
    train_second_layer: bool = typer.Option(False, "--train-second-layer/--frozen-second-layer"),
    power: float = typer.Option(2.0, help="p for relu-power"),
    lr: float = typer.Option(0.02, help="GD step"),
    steps: int = typer.Option(20, help="DMFT horizon (GD steps)"),
    times: str = typer.Option("", help="comma-separated steps for δ*(t) (default: steps/4, steps/2, 3steps/4, steps)"),
    grid: str = typer.Option("1.5,2.5,4,6,9,14", help="coarse δ grid"),
    refine: int = typer.Option(4, help="points of each refinement sweep, spread over the brackets of all times "
                               "(each widened by half its width; spectral.thresholds.refine_grid). 4 keeps the default "
                               "run short; spectral.thresholds.delta_star defaults to 6"),
    paths: int = typer.Option(2048, help="DMFT Monte Carlo paths"),
    d: int = typer.Option(1000, help="dimension for the finite-n convention (n = δ d)"),
    convention: str = typer.Option("finite-n", help="finite-n or strict"),
    repeats: int = typer.Option(2, help="independent keys for the Monte Carlo uncertainty"),
    stationarity_tol: float = typer.Option(0.02, help="relative change over the last half of the horizon below which the first phase counts as converged"),
    ridge: float = typer.Option(0.0, help="ridge λ on W (the Hessian's W-block is H_data + λ I)"),
    criterion: str = typer.Option("negative", help="negative: an outlier of H + λI below 0 and the bulk (THEORY §2); "
                                  "separation: any outlier below the bulk edge"),
    seed: int = typer.Option(0),
    min_cosine2: float = typer.Option(None, "--min-cosine2", help="count only an outlier whose squared cosine with the "
                                      "hard subspace is >= c (what a GD criterion 'hard weight > c' measures; "
                                      "spectral.thresholds.cosine_cut_margin)"),
    law_d: int = typer.Option(None, "--law-d", help="a second dimension: compute δ*_n(t) there too (independent keys) "
                              "and report which GD runs succeed at finite d, P(success | δ, d) = exp(−exp(−(δ − δ*_n(d))/b)), "
                              "b = dδ*_n/d ln d (spectral.finite_n_success_law; doubles the run; needs paths ≥ 20·δ·d at both d)"),
    json_out: pathlib.Path = typer.Option(None, "--json", help="write the result as JSON"),
    plot: pathlib.Path = typer.Option(None, "--plot", help="write a figure (margin curves and δ*(t))"),
    strict: bool = typer.Option(False, "--strict", help="exit 1 when δ_NN is not reported (first phase not "
                                "converged); by default that run exits 0: it did report, δ*(t) and why there is no δ_NN"),
    allow_kinks: bool = typer.Option(False, "--allow-kinks", help="run even when ∂ℓ/∂r jumps (ReLU, |e|): the DMFT "
                                     "response then misses a Dirac part and δ*(t) is biased (docs/dmft.md)"),
):
    """δ*(t) and δ_NN from the DMFT + Hessian-outlier equations (THEORY §2).

    Exit status: 0 when the run reported (δ_NN, or the δ*(t) curve with the reason δ_NN is not
    given: ``complete = false``, ``delta_nn = null`` in the JSON; ``--strict`` makes that 1);
    1 when nothing could be reported (no sign change of the margin on the grid); 2 for bad input; 3 when the
    DMFT failed (e.g. diverged at a large step: the message names the step)."""
    try:
        import jax
        import numpy as np

        from spectral.thresholds import delta_star

        if criterion not in ("negative", "separation"):
            raise CLIError(f"--criterion {criterion!r}: choose negative or separation.")
        problem = make_problem(target, activation, width, loss, init_scale, train_second_layer, power, ridge=ridge)
        g = _grid(grid)
        if convention not in ("finite-n", "strict"):
            raise CLIError("--convention must be finite-n or strict.")
        if min_cosine2 is not None and not 0 < min_cosine2 < 1:
            raise CLIError(f"--min-cosine2 {min_cosine2}: a squared cosine in (0, 1), e.g. 0.25.")
        if law_d is not None and (convention != "finite-n" or law_d < 2 or law_d == d):
            raise CLIError(f"--law-d {law_d}: the success law needs the finite-n convention and a second dimension "
                           f"> 1 other than --d {d} (e.g. --law-d {2 * d}).")
        _check_options(steps=(steps, "int>=1"), refine=(refine, "int>=2"), repeats=(repeats, "int>=1"),
                       paths=(paths, "int>=64"), d=(d, "int>=1"), lr=(lr, "pos"), stationarity_tol=(stationarity_tol, "pos"))
        if activation == "relu-power":
            _check_options(power=(power, "pos"))
        ts = [int(x) for x in times.split(",") if x.strip()] if times else sorted({max(1, steps // 4), steps // 2, 3 * steps // 4, steps})
        if any(t < 0 or t > steps for t in ts):
            raise CLIError(f"--times must lie in 0..steps = 0..{steps}.")
        import dmft
        from dmft.problem import JUMP_TOL, response_jumps

        dmft.check_finite_maps(problem)
        jump = response_jumps(problem)
        if jump > JUMP_TOL and not allow_kinks:
            raise CLIError(f"--activation {activation} / --loss {loss}: ∂ℓ/∂r jumps (relative size {jump:.2g}; e.g. ReLU, "
                           "whose σ'' is a Dirac mass at 0). Autodiff drops that Dirac part, so the DMFT response and "
                           "δ*(t) would be biased (docs/dmft.md, 'Activations and losses with kinks'). Use a smooth "
                           "activation (softplus, gelu, relu-power with --power 2), or pass --allow-kinks to run anyway; "
                           "GD itself (deltann simulate) is not affected.")
    except (CLIError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    total = (1 + repeats) * (1 if law_d is None else 2)
    t0 = time.perf_counter()
    with typer.progressbar(length=total, label="DMFT δ sweeps") as bar:
        def progress(msg):
            bar.update(1)

        def run_at(dim, key):
            return delta_star(problem, grid=g, lr=lr, steps=steps, times=ts, paths=paths, key=key,
                              convention=convention, d=dim if convention == "finite-n" else None, repeats=repeats,
                              refine=refine, stationarity_tol=stationarity_tol, progress=progress,
                              level="auto" if criterion == "negative" else "edge", min_cosine2=min_cosine2)

        try:
            res = run_at(d, jax.random.key(seed))
            # the second d gets independent keys (the law's fit takes the two δ*_n errors as independent)
            res2 = None if law_d is None or res.status == "no-bracket" else run_at(law_d, jax.random.fold_in(jax.random.key(seed), LAW_KEY))
        except ValueError as exc:          # ProblemError / SpectralError: bad input found by the library
            typer.echo(f"\nerror: {exc}", err=True)
            raise typer.Exit(2)
        except dmft.DMFTError as exc:      # the DMFT itself failed (e.g. diverged): nothing to report
            typer.echo(f"\nerror: the DMFT failed: {exc}", err=True)
            raise typer.Exit(3)
    wall = time.perf_counter() - t0
    if res.status == "no-bracket":
        typer.echo(f"error: {res.message}", err=True)
        if json_out is not None and json_out.exists():
            json_out.unlink()  # never leave an older, complete-looking result behind
        raise typer.Exit(1)
    typer.echo(f"{'t':>6} {'δ*(t)':>10} {'± s.e.':>10} {'bracket':>18}")
    for j, t in enumerate(res.times):
        typer.echo(f"{t:>6} {res.delta_star[j]:>10.4f} {res.delta_star_stderr[j]:>10.4f} "
                   f"[{res.bracket[j][0]:.3g}, {res.bracket[j][1]:.3g}]")
    typer.echo(res.message)
    law_payload = None if res2 is None else _success_law_report(res, res2, d, law_d, min_cosine2)
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        for j, t in enumerate(res.times):
            m = np.asarray(res.coarse.margin)[:, j]
            ax[0].plot(res.coarse.deltas, np.where(np.isfinite(m), m, np.nan), "o-", label=f"t={t}")
        ax[0].axhline(0, color="k", lw=0.5)
        ax[0].set_xlabel("δ")
        ax[0].set_ylabel("outlier margin λ_min A(min(edge, level))")
        ax[0].legend(fontsize=7)
        ax[1].errorbar(res.times, res.delta_star, res.delta_star_stderr, fmt="s-")
        ax[1].set_xlabel("GD step t")
        ax[1].set_ylabel("δ*(t)")
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        typer.echo(f"figure written to {plot}")
    complete = res.status == "converged"
    if json_out is not None:
        # always a self-describing file; an unconverged first phase gives delta_nn = null and
        # complete = false (never a number that looks valid), plus the δ*(t) curve it did compute
        payload = dict(
            complete=complete, delta_nn=res.delta_nn if complete else None,
            delta_nn_stderr=res.delta_nn_stderr if complete else None, edge_convention=convention,
            delta_star=dict(times=list(res.times), value=np.asarray(res.delta_star).tolist(),
                            stderr=np.asarray(res.delta_star_stderr).tolist(), bracket=np.asarray(res.bracket).tolist()),
            setting={**res.setting, **dict(target=target, activation=activation, width=width, loss=loss,
                                           init_scale=init_scale, train_second_layer=train_second_layer, power=power,
                                           lr=lr, steps=steps, d=d, seed=seed, ridge=ridge, criterion_option=criterion,
                                           min_cosine2=min_cosine2, allow_kinks=allow_kinks)},
            diagnostics={**res.diagnostics, **dict(status=res.status, message=res.message, wall_s=wall, response_jump=jump)},
            provenance=software(),
        )
        if law_d is not None:
            payload["success_law"] = law_payload
        tmp = json_out.with_suffix(json_out.suffix + ".tmp")
        tmp.write_text(strict_json(payload))     # nan (no upper window root, one repeat's s.e.) -> null
        tmp.replace(json_out)
        typer.echo(f"JSON written to {json_out}" + ("" if complete else " (complete = false, delta_nn = null)"))
    if not complete:
        typer.echo(f"δ_NN not reported ({res.status}): {res.message}", err=True)
        if strict:
            raise typer.Exit(1)


@app.command("simulate")
def simulate_cmd(   # the options that define the problem have delta-nn's defaults: the same command line is the same setting
    target: str = typer.Option("phase-retrieval", help=f"teacher: {', '.join(TARGETS)}"),
    activation: str = typer.Option("quadratic", help=f"{', '.join(ACTIVATION_NAMES)} or module:function"),
    width: int = typer.Option(1, help="student width m (default as delta-nn; was 4 before session 51)"),
    loss: str = typer.Option("square", help="square or huber[:width]"),
    init_scale: float = typer.Option(1.0, help="rows of sqrt(d) W0 ~ N(0, init_scale^2 I)"),
    train_second_layer: bool = typer.Option(False, "--train-second-layer/--frozen-second-layer",
                                            help="default frozen, as delta-nn (was trained before session 51)"),
    power: float = typer.Option(2.0, help="p for relu-power"),
    lr: float = typer.Option(0.1),
    steps: int = typer.Option(2000),
    grid: str = typer.Option("1.5,2,2.5,3,4,5"),
    d: str = typer.Option("100,200", help="comma-separated dimensions"),
    seeds: int = typer.Option(4),
    seed: int = typer.Option(0),
    ridge: float = typer.Option(0.0, help="ridge λ on W"),
    json_out: pathlib.Path = typer.Option(None, "--json"),
    plot: pathlib.Path = typer.Option(None, "--plot"),
):
    """GD success curves (hard-subspace overlap > 0.5 at the end) against δ, per d."""
    import numpy as np

    try:
        import jax

        from dmft.success import no_bracket_reason, success_curve

        problem = make_problem(target, activation, width, loss, init_scale, train_second_layer, power, ridge=ridge)
        g = _grid(grid)
        try:
            dims = [int(x) for x in d.split(",") if x.strip()]
        except ValueError as exc:
            raise CLIError(f"--d {d!r}: give comma-separated integer dimensions, e.g. 100,200.") from exc
        _check_options(steps=(steps, "int>=1"), seeds=(seeds, "int>=1"), lr=(lr, "pos"))
        for dim in dims or [None]:
            _check_options(d=(dim, "int>=2"))
    except (CLIError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    results = {}
    with typer.progressbar(dims, label="GD success curves") as bar:
        for dim in bar:
            try:
                results[dim] = success_curve(problem, dim, g, lr=lr, steps=steps, seeds=seeds, key=jax.random.fold_in(jax.random.key(seed), dim))
            except ValueError as exc:
                typer.echo(f"\nerror: {exc}", err=True)
                raise typer.Exit(2)
    for dim, sc in results.items():
        where = (f"50% point {sc.delta_50:.3f} ± {sc.delta_50_stderr:.3f} (interpolated)" if np.isfinite(sc.delta_50) else
                 f"no 50% point: {no_bracket_reason(sc.deltas, sc.success)}")
        pr = sc.probit
        if pr["status"] == "ok":
            where += (f"; probit fit {pr['delta_50']:.3f}, {int(100 * pr['level'])}% interval "
                      f"[{pr['ci'][0]:.3f}, {pr['ci'][1]:.3f}]")
        elif pr["status"] == "separated":
            where += f"; probit: separated, 50% point in [{pr['ci'][0]:.3g}, {pr['ci'][1]:.3g}]"
        typer.echo(f"d={dim}: success {sc.success.tolist()} at δ={g}; {where}")
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        for dim, sc in results.items():
            ax.plot(sc.deltas, sc.success, "o-", label=f"d={dim}")
        ax.set_xlabel("δ")
        ax.set_ylabel("success fraction")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
    if json_out is not None:
        fin = lambda v: float(v) if np.isfinite(v) else None      # strict JSON: null where the grid does not bracket 1/2
        payload = {str(dim): dict(success=sc.success.tolist(), delta_50=fin(sc.delta_50), delta_50_stderr=fin(sc.delta_50_stderr),
                                  delta_50_method="linear interpolation between the bracketing grid points",
                                  probit={**sc.probit, "delta_50": fin(sc.probit["delta_50"]), "stderr": fin(sc.probit["stderr"]),
                                          "scale": fin(sc.probit["scale"]), "ci": [fin(v) for v in sc.probit["ci"]]},
                                  setting=sc.setting) for dim, sc in results.items()}
        # the command's own options (the per-d settings hold the simulation's): enough to rerun it
        payload["setting"] = dict(command="deltann simulate", target=target, activation=activation, width=width, loss=loss,
                                  init_scale=init_scale, train_second_layer=train_second_layer, power=power, ridge=ridge,
                                  lr=lr, steps=steps, grid=g, d=dims, seeds=seeds, seed=seed,
                                  keys=("fold_in(jax.random.key(seed), d) per d, fold_in(., i) per grid point (i in increasing δ), fold_in(., s) per seed "
                                        "(before session 49: key(seed + d), which made --seed 0 --d 40 and --seed 10 "
                                        "--d 30 share their data)"),
                                  success="hard-subspace cosine > 0.5 at the last step", dtype="float32 (dmft.success_curve)")
        payload["provenance"] = software()        # next to the per-d entries (keys: d as a string)
        json_out.write_text(strict_json(payload))


@app.command("design")
def design_cmd(
    family: str = typer.Option("combination-normalized",
                               help="activation family: combination-normalized (c·(r, softplus, tanh, GeLU) at unit Gaussian "
                                    "norm, from softplus), combination (unnormalized), softplus-t, silu-t, gelu-t (temperature β)"),
    ridge: float = typer.Option(0.3, help="ridge λ on W"),
    loss_width: float = typer.Option(1.0, help="pseudo-Huber width w"),
    criterion: str = typer.Option("separation", help="separation (outlier leaves the bulk) or negative (outlier of H + λI "
                                                     "below 0: THEORY's δ_NN)"),
    steps: int = typer.Option(8, help="optimizer steps"),
    learning_rate: float = typer.Option(0.05, help="adam learning rate"),
    delta0: float = typer.Option(1.3, help="starting δ for the Newton root search"),
    paths: int = typer.Option(512, help="Monte Carlo paths per key (fixed keys: common random numbers)"),
    keys: int = typer.Option(2, help="independent keys averaged in the objective (the per-key gradient is noisy)"),
    warmup_steps: int = typer.Option(80, help="dynamic DMFT steps that start the first fixed point"),
    warmup_lr: float = typer.Option(0.5, help="their GD step"),
    seed: int = typer.Option(0),
    json_out: pathlib.Path = typer.Option(None, "--json", help="write the path and result as JSON"),
    plot: pathlib.Path = typer.Option(None, "--plot", help="write a figure (δ_NN along the path, activations)"),
):
    """Minimize δ_NN (stationary route, per key) over an activation family by gradient descent with
    its implicit gradient, on the staircase target y = z1 + z2² − 1 (m = 2, a = (1, 1/2) frozen,
    pseudo-Huber loss): the setting whose first phase converges. Re-evaluate the result with
    independent keys before trusting an improvement (benchmarks/bench_design.py does)."""
    import jax
    import jax.numpy as jnp

    from . import families as fam
    from .stationary import Warmup

    try:
        if family not in fam.ACTIVATION_FAMILIES:
            raise CLIError(f"--family {family!r} does not exist; choose one of {', '.join(fam.ACTIVATION_FAMILIES)}.")
        if criterion not in ("separation", "negative"):
            raise CLIError(f"--criterion {criterion!r}: choose separation or negative.")
        if not ridge > 0:
            raise CLIError("--ridge must be > 0 (the stationary point of the first phase needs it here).")
        if not loss_width > 0:
            raise CLIError("--loss-width must be > 0.")
        if steps < 0 or keys < 1 or paths < 64 or paths % 4:
            raise CLIError("--steps must be >= 0, --keys >= 1 and --paths a multiple of 4, >= 64.")
        if not (learning_rate > 0 and delta0 > 0):
            raise CLIError("--learning-rate and --delta0 must be > 0.")
    except CLIError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    import optax
    import spectral

    fn = fam.staircase_family(family)
    p0 = dict(fam.ACTIVATION_FAMILIES[family][1], width=loss_width, ridge=ridge)
    trainable = tuple(k for k in fam.ACTIVATION_FAMILIES[family][1])
    t0 = time.perf_counter()
    try:
        res = spectral.design(fn, p0, trainable=trainable, delta0=delta0,
                              keys=[jax.random.fold_in(jax.random.key(seed), i) for i in range(keys)], paths=paths,
                              warmup=Warmup(warmup_lr, warmup_steps, paths), level="edge" if criterion == "separation" else "auto",
                              steps=steps, optimizer=optax.adam(learning_rate), progress=typer.echo)
    except spectral.ThresholdGradientError as exc:
        typer.echo(f"error: no differentiable threshold at the starting point: {exc}", err=True)
        raise typer.Exit(1)
    first, last = res.history[0], res.history[-1]
    se = lambda h: "" if h["delta_nn_stderr"] is None else f" ± {h['delta_nn_stderr']:.2g}"
    # in-sample: the loop minimizes these keys' Monte Carlo estimate, so the drop overstates the improvement
    # (audit: −0.121 printed, −0.027 ± 0.022 on 3 fresh keys); the s.e. is the spread over the design keys
    typer.echo(f"{family}: δ_NN on the {keys} design keys (in-sample; re-evaluate with fresh keys, e.g. "
               f"spectral.delta_nn_stationary) {first['delta_nn']:.5f}{se(first)} -> {last['delta_nn']:.5f}{se(last)} "
               f"in {len(res.history) - 1} steps ({res.status}: {res.message}); params {last['params']}; "
               f"{time.perf_counter() - t0:.0f} s")
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        ax[0].plot([h["step"] for h in res.history], [h["delta_nn"] for h in res.history], "o-")
        ax[0].set_xlabel("design step")
        ax[0].set_ylabel("δ_NN (per key)")
        r = jnp.linspace(-4, 4, 200)
        act = fam.ACTIVATION_FAMILIES[family][0]
        for h, lab in ((first, "start"), (last, "designed")):
            ax[1].plot(r, act({k: jnp.asarray(v) for k, v in h["params"].items()})(r), label=lab)
        ax[1].set_xlabel("r")
        ax[1].set_ylabel("σ(r)")
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
    if json_out is not None:
        json_out.write_text(strict_json(dict(provenance=software(), family=family, history=res.history, status=res.status,
                                             message=res.message, best_step=res.best_step,
                                             in_sample="delta_nn values are on the design keys (in-sample)",
                                             setting=dict(res.setting, target="y = z1 + z2^2 - 1", loss=f"pseudo-Huber {loss_width}",
                                                          ridge=ridge, criterion=criterion, seed=seed, delta0=delta0,
                                                          optimizer=f"optax.adam({learning_rate})", learning_rate=learning_rate,
                                                          paths=paths, keys=keys,
                                                          warmup=dict(steps=warmup_steps, lr=warmup_lr)))))


def main():  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
