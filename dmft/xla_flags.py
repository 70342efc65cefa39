"""XLA CPU option applied by ``import dmft`` (``dmft.XLA_FLAGS_STATUS`` says what happened) and by deltann's
entry points (the ``deltann`` command, ``python -m benchmarks``, the test suite), before JAX's backends start.

Run time (session 41, jaxlib 0.10.2, 2-core CPU, compiled runs, phase retrieval, quadratic student,
η = 0.2, 12 steps, 32 768 paths): ``dmft.solve`` m = 4: 7.00 s with the default emitters, 2.04 s with the
flag; a 4-point ``dmft.solve_sweep`` m = 4: 52–58 s against 10–11 s; m = 2: 0.58 / 0.50 s and 1.77 / 1.72 s
(no difference); identical train errors. Until then only the entry points set it, and a user's own script
ran a width-4 DMFT 3–5× slower than the benchmarks did. Hence ``import dmft`` applies it too.

Why. On a 2-core CPU, XLA compilation is about half of the quick benchmark suite's time. ``dmft.solve``'s
scan program alone takes several seconds to compile, and every new problem or shape compiles it again. With
XLA's MLIR fusion emitters turned off (``--xla_cpu_use_fusion_emitters=false``), XLA falls back to its older
LLVM IR emitters. Measured on jaxlib 0.10.2, 2-core CPU, 2026-12-05 (docs/dmft.md, "Compile time on CPU"):

- quick ``stationary``: backend compile 36.1 → 21.7 s, wall 47.6 → 33.4 s;
- quick ``flows``: 46.7 → 31.4 s, wall 78.6 → 61.3 s;
- run time of a compiled ``dmft.solve`` (m = 2, T = 60, 20 000 paths) and ``dmft.simulate`` (d = 2000,
  4 seeds) unchanged within timing noise (5.4–5.8 s and 6.8–7.3 s either way);
- the whole quick suite (38 benchmarks, 2 workers, same machine and day): 655 s with it, 806 s without;
- results equal to 1e-7 relative for ``dmft.solve``, 4e-16 for ``dmft.simulate``. The DMFT amplifies
  rounding differences; that is the level seen between two host CPUs.

An unknown name in ``XLA_FLAGS`` aborts the process. So the flag is added only for a jaxlib series where it
was checked (``VERIFIED_JAXLIB``), only if the user's ``XLA_FLAGS`` does not already name it, only before
JAX's backends start (afterwards the variable would be read by nobody), and never with
``DELTANN_FAST_CPU_COMPILE=0``.
"""

from __future__ import annotations

import importlib.metadata
import os

FLAG_NAME = "--xla_cpu_use_fusion_emitters"
FLAG = FLAG_NAME + "=false"
VERIFIED_JAXLIB = ("0.10.",)        # jaxlib series on which FLAG was checked to exist (an unknown flag is fatal)
OPT_OUT_ENV = "DELTANN_FAST_CPU_COMPILE"
_ADDED_HERE = False                 # this process's os.environ got FLAG from fast_cpu_compile


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if started else False


def fast_cpu_compile(environ=None, jaxlib_version: str | None = None, backends_started: bool | None = None) -> str | None:
    """Append :data:`FLAG` to ``XLA_FLAGS`` where it is safe (see the module docstring). Returns why it
    was or was not added, for provenance: ``"added"``, ``"set by the user"``, ``"opted out"``,
    ``"jaxlib <v> not verified"`` or ``"backends already started"``. The arguments exist for tests."""
    global _ADDED_HERE
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_ENV, "1") == "0":
        return "opted out"
    flags = env.get("XLA_FLAGS", "")
    bare = [t for t in flags.split() if not t.startswith("--")]
    if bare:
        # XLA stops parsing at a token without "--" and silently ignores every flag after it (user audit, session
        # 49: "... intra_op_parallelism_threads=1 --xla_force_host_platform_device_count=4" gave 1 device), so an
        # appended flag would be recorded as "added" but never applied
        import warnings

        warnings.warn(f"XLA_FLAGS holds {bare[0]!r} without a leading '--': XLA ignores every flag after it "
                      f"(XLA_FLAGS={flags!r}). Remove it or write it as a '--' flag.", RuntimeWarning, stacklevel=2)
        return f"not added: XLA_FLAGS token {bare[0]!r} has no leading '--' (XLA ignores the flags after it)"
    if FLAG_NAME in flags:
        # added by an earlier call in this process (``import dmft``, then an entry point): still "added"
        return "added" if environ is None and _ADDED_HERE else "set by the user"
    if jaxlib_version is None:
        try:
            jaxlib_version = importlib.metadata.version("jaxlib")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            jaxlib_version = "unknown"
    if not jaxlib_version.startswith(VERIFIED_JAXLIB):
        return f"jaxlib {jaxlib_version} not verified"
    if _backends_started() if backends_started is None else backends_started:
        return "backends already started"
    env["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    _ADDED_HERE = _ADDED_HERE or environ is None
    return "added"
