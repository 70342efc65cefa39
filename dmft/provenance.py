"""Where a result came from: software versions, device and the process-wide settings of deltann
(float64, ``dmft/xla_flags.py``, ``dmft/threefry_cpu.py``). Recorded in the JSON of every ``deltann``
command and every benchmark (``benchmarks/runner.py`` adds the run's mode and worker count)."""

from __future__ import annotations


def git_state(ignore: tuple = ()) -> dict:
    """``deltann_commit`` and ``deltann_dirty`` when the package runs from a git checkout (None otherwise): the
    version string alone cannot tell uncommitted code from the commit it sits on (user audit, session 49).
    ``ignore``: paths (relative to the repository root) whose changes do not count, e.g. the result files a
    re-analysis is itself rewriting."""
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return dict(deltann_commit=None, deltann_dirty=None)
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10,
                                        check=True).stdout.strip()
        return dict(deltann_commit=run("rev-parse", "HEAD"),
                    deltann_dirty=bool(run("status", "--porcelain", "--untracked-files=no", "--", ".",
                                           *(f":(exclude){p}" for p in ignore))))
    except (OSError, subprocess.SubprocessError):
        return dict(deltann_commit=None, deltann_dirty=None)


def software() -> dict:
    """Date, deltann / JAX / jaxlib / Python versions, device, CPU count, float64, ``XLA_FLAGS`` and what
    ``dmft/xla_flags.py`` and ``dmft/threefry_cpu.py`` did (they change compile time, not the numbers: the
    Threefry lowering draws the same bits)."""
    import datetime
    import importlib.metadata
    import os
    import platform

    import jax

    import dmft

    def version(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    dev = jax.devices()
    # the benchmark result files are outputs, not code: a suite's earlier outputs must not mark its later runs dirty
    # (session 52: every quick JSON after the first read "dirty")
    return dict(**git_state(ignore=("benchmarks/results", "benchmarks/RESULTS.md")), date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                deltann=version("deltann"), jax=jax.__version__, jaxlib=version("jaxlib"),
                python=platform.python_version(), platform=dev[0].platform, device=str(dev[0].device_kind),
                device_count=len(dev), machine=platform.machine(), cpu_count=os.cpu_count(),
                x64=bool(jax.config.jax_enable_x64), xla_flags=os.environ.get("XLA_FLAGS", ""),
                xla_flags_deltann=dmft.XLA_FLAGS_STATUS, threefry_cpu_lowering=dmft.THREEFRY_STATUS)
