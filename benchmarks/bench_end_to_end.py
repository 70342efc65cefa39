"""End-to-end time of ``deltann delta-nn`` (issue #4, "Speed": δ_NN for a new activation, goal under
a minute on a 2-core CPU; item 7: the command with no options finishes in about a minute).

Each run is a fresh process, as a user would start it: interpreter, JAX import, compilation and the
DMFT δ sweeps, timed by the wall clock around the subprocess (no compilation cache is shared with
this process or between runs). The command's own JSON (``--json``) supplies the result, its status
and the command's internal wall time (``diagnostics.wall_s``: the δ sweeps only, from the first
compilation on).

Runs:
(1) ``default``: ``deltann delta-nn`` with no options (phase retrieval, quadratic, m = 1: its first
    phase does not converge on the horizon, so the command reports δ*(t) and no δ_NN, exit 0 —
    the time is what the user waits for that answer);
(2) ``new activation``: an activation the library does not know, given as ``module:function``
    (:func:`new_activation`, x·sigmoid(1.702x)), in a setting whose first phase converges so the
    command returns δ_NN: ``--target easy-hard`` (y = z_1 + z_2² − 1), m = 2, a = (1/2, 1/2)
    frozen, Huber loss, ridge 0.3, separation criterion, η = 1, 80 steps, 2048 paths, 2 keys
    (the two_route setting with the CLI's second layer; at η = 0.5 the first phase had not met
    the 2% stationarity tolerance by step 80: δ*(t) still moved 2.9%, no δ_NN).
(3) ``contract``: issue #4's contract command verbatim, ``deltann delta-nn --target phase-retrieval
    --activation gelu --width 4 --json out.json`` (must exit 0 and write the keys ``CONTRACT_KEYS``;
    its first phase does not converge on the default horizon, so the JSON has δ*(t) and
    ``delta_nn = null``); the return code and the keys present are recorded and tested
    (tests/test_benchmarks.py::test_committed_end_to_end_runs_the_contract_command).
Quick mode runs (2) with fewer paths and steps (a speed check, not the goal's setting).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import jax

NAME = "end_to_end"
ROOT = pathlib.Path(__file__).resolve().parents[1]
GOAL_S = 60.0
CONTRACT_ARGS = ("--target", "phase-retrieval", "--activation", "gelu", "--width", "4")
CONTRACT_KEYS = ("delta_nn", "delta_nn_stderr", "edge_convention", "setting", "diagnostics")


def new_activation(x):
    """x·sigmoid(1.702 x): the sigmoid approximation of GeLU, not among dmft.activations."""
    return x * jax.nn.sigmoid(1.702 * x)


def _command():
    script = pathlib.Path(sys.executable).parent / "deltann"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from dmft.cli import main; main()"]


def _run_cli(args, json_path: pathlib.Path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    cmd = _command() + ["delta-nn", *args, "--json", str(json_path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    out = json.loads(json_path.read_text()) if json_path.exists() else None
    return dict(args=args, returncode=proc.returncode, wall_s=wall, stdout_tail=proc.stdout[-1500:],
                stderr_tail=proc.stderr[-800:]), out


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quick = mode == "quick"
    new_args = ["--target", "easy-hard", "--activation", "benchmarks.bench_end_to_end:new_activation", "--width", "2",
                "--loss", "huber:1", "--ridge", "0.3", "--criterion", "separation", "--lr", "1.0",
                "--steps", "40" if quick else "80", "--grid", "1,1.5,2,2.5,3", "--paths", "512" if quick else "2048",
                "--convention", "strict", "--seed", "0"]
    runs = [("default (no options)", [])] if not quick else []
    runs.append(("new activation (module:function)", new_args))
    if not quick:   # issue #4's contract command, verbatim: exit 0 and a JSON with the contract's keys
        runs.append(("contract: phase retrieval, GeLU, width 4", list(CONTRACT_ARGS)))
    S = dict(goal_s=GOAL_S, runs={n: a for n, a in runs}, command=" ".join(_command()), fresh_process=True,
             new_activation="x * sigmoid(1.702 x)", device=jax.default_backend(), cpu_count=os.cpu_count())
    perf, data = [], {}
    tmp = pathlib.Path(outdir) / "_end_to_end_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for i, (name, args) in enumerate(runs):
        jp = tmp / f"run{i}.json"
        jp.unlink(missing_ok=True)
        info, res = _run_cli(args, jp)
        jp.unlink(missing_ok=True)
        rec = dict(info)
        if res is not None:
            rec.update(complete=res["complete"], delta_nn=res["delta_nn"], delta_nn_stderr=res["delta_nn_stderr"],
                       delta_star=res["delta_star"], status=res["diagnostics"].get("status"),
                       message=res["diagnostics"].get("message"), command_wall_s=res["diagnostics"].get("wall_s"),
                       setting={k: v for k, v in res["setting"].items() if isinstance(v, (int, float, str, bool, list))})
        rec["contract_keys_present"] = sorted(k for k in CONTRACT_KEYS if res is not None and k in res)
        data[name] = rec
        result = (f"δ_NN {res['delta_nn']:.3f} ± {res['delta_nn_stderr']:.3f}" if res and res["complete"]
                  else f"no δ_NN ({res['diagnostics'].get('status') if res else 'no JSON'}), exit {info['returncode']}")
        perf.append(dict(what=f"deltann delta-nn, {name}: fresh process, end to end", value=info["wall_s"], unit="s",
                         ratio=info["wall_s"] / GOAL_S,
                         note=(f"ratio = wall / {GOAL_S:.0f} s goal; {result}; δ sweeps "
                               f"{rec.get('command_wall_s', float('nan')):.1f} s of it")))
    try:
        tmp.rmdir()
    except OSError:
        pass
    fig, ax = plt.subplots(figsize=(6, 2.2 + 0.4 * len(runs)))
    names = list(data)
    ax.barh(names, [data[n]["wall_s"] for n in names], color="C0", label="process wall")
    ax.barh(names, [data[n].get("command_wall_s") or 0.0 for n in names], color="C1", label="δ sweeps (in command)")
    ax.axvline(GOAL_S, color="r", ls=":", label=f"goal {GOAL_S:.0f} s")
    ax.set_xlabel("seconds (2-core CPU)" if jax.default_backend() == "cpu" else "seconds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / "end_to_end.png", dpi=110)
    plt.close(fig)
    return dict(setting=S, accuracy=[], performance=perf, data=data, figure="end_to_end.png")

