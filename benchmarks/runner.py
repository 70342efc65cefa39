"""Benchmark runner: ``python -m benchmarks run [--quick|--full] [--only NAME] [--outdir DIR]``.

Three sizes (``MODES``): ``quick`` (~13 min for the whole suite on a 2-core CPU with two worker
processes sharing a work queue: 709 s with 56 benchmarks at the end of session 49 (782 s of compilation in 1380 s of summed wall), 741 s earlier that day; 785 s in session 48 after the audit's input checks, 745 s that morning (821 s of compilation in 1449 s of summed wall; CPU-bound: a
benchmark alone keeps 1.3–1.4 cores busy, so 2 workers saturate 2 cores); 695 s with 54 benchmarks in session 47 (755 s of compilation in 1355 s of summed wall); 672 s with 50 benchmarks in session 43, 754 s the same day before its
Threefry lowering (``dmft/threefry_cpu.py``; 733 of 1303 s of summed wall is compilation); 733 s with 49 benchmarks in session 42 (839 s of compilation in 1429 s of
summed wall; the secant outlier search cut the non-compilation part 633 → 590 s); 729 s with 48 in session 41
(792 s of compilation in 1425 s); 764 s with 45 benchmarks in session 38, 875 s of XLA compilation in
1496 s of summed benchmark wall, the new ``finite_n_edge_law`` 53 s of it and unrelated benchmarks
10–20 % slower than the session before (e.g. ``flows`` 68 → 84 s); 672 s with 44 benchmarks in
session 37 (763 s of compilation in 1317 s); 683 s that day with fixed longest-first shares; after the faster edge
search of ``spectral.stieltjes`` and smaller quick sizes in seven benchmarks; written to
``benchmarks/results/quick/`` so it never overwrites the committed numbers; from the command line with a compilation cache private to the run, see ``_process_compile_cache``,
and by default two worker processes, see ``run_parallel``). History on this machine type: 722 s with
41 on 2026-12-05 (703 s with 40, 683 s with 39 the same day; 655 s with 38 earlier that day, after ``main``
started setting ``--xla_cpu_use_fusion_emitters=false`` (``dmft/xla_flags.py``; 806 s without it the
same day); 1022 s with 31 on 2026-12-04 (a host on which most benchmarks ran 10–60% slower, compilation
included); 735 s with 29 on 2026-12-03; 860 s before the outlier-solve speed-up of session 20; 1100 s
with 25 in one process (``--jobs 1``). Every JSON records its compilation time (``compile``);
compilation is most of what is left (e.g. 43 s of 81 s of ``design`` alone; 45 of 78 s
of ``dmft``; 391 programs in ``flows``). ``standard``
(the default: the CPU-sized runs whose JSON is committed in ``benchmarks/results/``; ~26.7 h
in one process, the sum of the committed runs' walls, 56 benchmarks from 27 s to 107 min (2026-12-07): rerun them
one at a time with ``--only``) and ``full`` (GPU-sized; ``benchmarks/gpu_run.sh`` writes
``benchmarks/results/gpu/``).

Each ``benchmarks/bench_<name>.py`` exposes ``NAME`` and ``run(mode, outdir) -> dict`` with
keys ``setting``, ``accuracy`` (rows: quantity, theory, simulation, sim_stderr, d, seeds,
tolerance, agree), ``performance`` (rows: what, value, unit, ratio, note) and ``figure``.
The runner adds provenance (versions, device, date, mode, wall time), writes
``<outdir>/<NAME>.json`` and regenerates ``benchmarks/RESULTS.md`` from every JSON under
``benchmarks/results`` (numbers are generated from the JSON files, never typed).
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODES = ("quick", "standard", "full")
JOBS_ENV = "DELTANN_BENCH_JOBS"            # set by the parent of ``--jobs N`` workers (recorded in provenance)
CACHE_ENV = "DELTANN_BENCH_XLA_CACHE"      # the compilation cache directory the workers share
XLA_FLAGS_STATUS = "not applied (runner.main not called)"  # what dmft.xla_flags.fast_cpu_compile did (provenance)


def default_outdir(mode: str) -> pathlib.Path:
    return RESULTS / "quick" if mode == "quick" else RESULTS


def discover() -> list[str]:
    """All benchmarks except the smoke test (which exists for the test suite)."""
    return sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py") if p.stem != "bench_smoke")


def provenance(mode: str) -> dict:
    """``dmft.provenance.software()`` (versions, device, deltann's process settings) with the run's mode,
    the number of benchmark processes sharing the machine, and what this runner's XLA-flag call did."""
    from dmft.provenance import software

    return dict(software(), mode=mode, concurrent_benchmark_processes=int(os.environ.get(JOBS_ENV, "1")),
                xla_flags_deltann=XLA_FLAGS_STATUS)


def _load():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):   # not available on this platform
        return None


def _jsonable(x):
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.generic,)):
        return x.item()
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return x.tolist()
    return x


def _checked(names, mode: str, outdir):
    """(names, outdir) after checking the mode and the names; the output folder exists."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}.")
    outdir = pathlib.Path(outdir) if outdir else default_outdir(mode)
    outdir.mkdir(parents=True, exist_ok=True)
    names = names or discover()
    unknown = sorted(set(names) - set(discover()) - {"smoke"})
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; available: {discover()}")
    return names, outdir


def _report(outdir: pathlib.Path):
    """RESULTS.md of ``outdir`` (the committed one for ``benchmarks/results``)."""
    return write_results_md(results_dir=outdir if outdir != RESULTS else None,
                            path=None if outdir == RESULTS else outdir / "RESULTS.md")


def run(names=None, mode: str = "standard", outdir: pathlib.Path | None = None, regenerate=True) -> dict:
    names, outdir = _checked(names, mode, outdir)
    done = {}
    for name in names:
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"== benchmark {name} ({mode})", flush=True)
        t0, load0 = time.perf_counter(), _load()
        _COMPILE.reset()
        with _WarningLog() as wlog:
            try:
                res = mod.run(mode, outdir)
                status = "ok"
            except Exception as exc:  # a failing benchmark is recorded, not hidden
                traceback.print_exc()
                res = dict(error=f"{type(exc).__name__}: {exc}", accuracy=[], performance=[])
                status = "error"
        res = _jsonable(res)
        wall = round(time.perf_counter() - t0, 2)
        res.setdefault("performance", []).extend(_memory_rows())
        res.update(name=getattr(mod, "NAME", name), status=status, wall_s=wall, compile=_COMPILE.summary(),
                   provenance=dict(provenance(mode), host_load=dict(start=load0, end=_load(), cpus=os.cpu_count(),
                                   note="os.getloadavg() (1, 5, 15 min) at the start and end of this benchmark; it counts "
                                        "the benchmark's own threads (about 1.0–1.4 alone); a higher value means other "
                                        "work shared the machine and timings are slower"),
                                   warnings=wlog.rows()))
        (outdir / f"{res['name']}.json").write_text(json.dumps(res, indent=1))
        done[res["name"]] = res
        print(f"   {status} in {res['wall_s']} s -> {outdir / (res['name'] + '.json')}", flush=True)
        if len(names) > 1:
            _release_compiled()
    if regenerate:
        _report(outdir)
    return done


class _WarningLog:
    """The warnings a benchmark emitted (RuntimeWarning and UserWarning: the solvers' diagnostics, e.g. unstable tail
    paths, a rising train error, an unfaithful field factor), as they are shown (Python's default filter: once per
    message and place), counted per message; still printed as before. Stored in ``provenance.warnings`` so that a
    number computed under a solver warning says so in its JSON and in RESULTS.md (session 55: a departed Monte Carlo
    DMFT key warned on the console only)."""

    KINDS = (RuntimeWarning, UserWarning)

    def __enter__(self):
        import warnings

        self.seen, self._prev = {}, warnings.showwarning
        warnings.showwarning = self._show
        return self

    def _show(self, message, category, filename, lineno, file=None, line=None):
        if issubclass(category, self.KINDS):
            key = f"{category.__name__}: {str(message)[:400]}"
            self.seen[key] = self.seen.get(key, 0) + 1
        self._prev(message, category, filename, lineno, file, line)

    def __exit__(self, *exc):
        import warnings

        warnings.showwarning = self._prev
        return False

    def rows(self) -> list:
        return [dict(message=k, shown=n) for k, n in self.seen.items()]


class _CompileLog:
    """Compilation time of one benchmark, from ``jax.monitoring`` duration events: XLA backend
    compilation (``/jax/core/compile/backend_compile_duration``, per program name; a persistent-cache
    hit counts with its retrieval time), jaxpr tracing and lowering to MLIR. Single-threaded work
    that is not the benchmark's measured computation: it is why the quick suite is compile-bound."""

    EVENTS = {"/jax/core/compile/backend_compile_duration": "backend",
              "/jax/core/compile/jaxpr_trace_duration": "trace",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}

    def __init__(self):
        self.registered = False  # the listener is registered on the first reset (jax imported then)
        self.total, self.programs = dict.fromkeys(self.EVENTS.values(), 0.0), {}

    def reset(self):
        self.total = dict.fromkeys(self.EVENTS.values(), 0.0)
        self.programs = {}
        self.register()

    def register(self):
        """Start listening (once per process; also outside the runner, e.g. a benchmark run directly)."""
        if not self.registered:
            import jax

            jax.monitoring.register_event_duration_secs_listener(self._listen)
            self.registered = True

    def seconds(self) -> float:
        """Compilation seconds so far (backend + tracing + lowering): a benchmark takes the difference
        around one call to separate that call's compile time from its run time."""
        return sum(self.total.values())

    def _listen(self, event, duration, **kw):
        kind = self.EVENTS.get(event)
        if kind is None:
            return
        self.total[kind] += duration
        if kind == "backend":
            n, t = self.programs.get(kw.get("fun_name", "?"), (0, 0.0))
            self.programs[str(kw.get("fun_name", "?"))] = (n + 1, t + duration)

    def summary(self, top: int = 8) -> dict:
        worst = sorted(self.programs.items(), key=lambda kv: -kv[1][1])[:top]
        return dict(backend_compile_s=round(self.total["backend"], 2), trace_s=round(self.total["trace"], 2),
                    lower_s=round(self.total["lower"], 2), programs=sum(n for n, _ in self.programs.values()),
                    top=[dict(program=k, compiles=n, seconds=round(t, 2)) for k, (n, t) in worst])


_COMPILE = _CompileLog()


def assemble(name: str, setting: dict, data: dict, analysis, perf: list, t0: float, replot, outdir) -> dict:
    """The result of a benchmark whose ``analysis(data, setting)`` returns ``rows`` and ``summary``: the summary
    stored in ``data``, a "whole benchmark" timing since ``t0`` appended to ``perf``, the figure drawn by
    ``replot(res, outdir)``."""
    an = analysis(data, setting)
    data["summary"] = an["summary"]
    perf.append(dict(what="whole benchmark", value=time.perf_counter() - t0, unit="s", ratio=None, note=""))
    res = dict(setting=setting, accuracy=an["rows"], performance=perf, data=data, figure=f"{name}.png")
    replot(res, outdir)
    return res


def _map_count():
    """Memory mappings of this process (Linux ``/proc/self/maps``; None elsewhere). Every compiled
    XLA CPU program holds some; the kernel limit is ``vm.max_map_count`` (65530 by default)."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # pragma: no cover - non-Linux
        return None


def _release_compiled():
    """Drop the in-memory compiled programs between benchmarks of one process. Measured: the whole
    quick suite in one process (``--jobs 1``) crashed in the last benchmark with "LLVM compilation
    error: Cannot allocate memory" and a segfault (2026-12-03, 24 GiB free): the compiled programs of
    the earlier benchmarks are kept alive by jit caches, and each holds memory mappings, up to the
    kernel's ``vm.max_map_count``. The persistent compilation cache (quick mode) still serves
    programs shared between benchmarks."""
    import gc

    import jax

    before = _map_count()
    jax.clear_caches()
    gc.collect()
    print(f"   memory maps: {before} -> {_map_count()} after clearing the compiled-program caches", flush=True)


def _memory_rows() -> list:
    """Peak memory so far in this process: host RSS high-water mark (``getrusage``; exact per
    benchmark when run alone with ``--only NAME``, else the running maximum) and, on an
    accelerator, the device allocator's peak bytes in use."""
    import resource

    import jax

    rows = []
    try:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
        rows.append(dict(what="peak host memory (process RSS high-water mark)", value=round(kb / 1024, 1), unit="MB",
                         ratio=None, note="running maximum over the benchmarks run before in this process"))
        maps = _map_count()
        if maps is not None:
            rows.append(dict(what="memory maps of the process at the end (of vm.max_map_count, 65530 by default)",
                             value=maps, unit="maps", ratio=None,
                             note="compiled XLA programs hold maps; the runner clears its caches between benchmarks"))
    except Exception:  # pragma: no cover - non-Unix
        pass
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        try:
            st = dev.memory_stats() or {}
            if "peak_bytes_in_use" in st:
                rows.append(dict(what=f"peak device memory ({dev.device_kind})", value=round(st["peak_bytes_in_use"] / 2**20, 1),
                                 unit="MB", ratio=None, note="allocator peak, running maximum in this process"))
        except Exception:  # pragma: no cover
            pass
    return rows


def _fmt(v, nd=4):
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1e4 or (abs(v) < 1e-3 and v != 0):
            return f"{v:.3g}"
        return f"{v:.{nd}g}"
    return str(v)


def _compile_cell(res) -> str:
    """``compile (s) | programs`` cells of the Runs table: XLA backend compilation + tracing + lowering
    (the runner's ``compile`` record; runs older than it have none)."""
    c = res.get("compile")
    if not c:
        return "— | —"
    return f"{c['backend_compile_s'] + c['trace_s'] + c['lower_s']:.1f} | {c['programs']}"


def _warnings_cell(pv: dict) -> str:
    """Distinct solver warnings of a run (``provenance.warnings``), with their first words; — for runs recorded before
    warnings were (session 55)."""
    w = pv.get("warnings")
    if w is None:
        return "—"
    if not w:
        return "0"
    return f"{len(w)}: " + "; ".join(sorted({r['message'].split(': ', 1)[-1][:60].replace('|', '/') + '…' for r in w}))


def reference_kind(row) -> str:
    """What the theory value of an accuracy row is checked against, from the row's ``reference`` if it has one,
    else from its ``d`` column (session 52 referee item: rows of theory against theory were listed under
    "theory against simulation" with nothing to tell them apart)."""
    if row.get("reference"):
        return str(row["reference"])
    d = row.get("d")
    if d is None:
        return "see quantity"
    if isinstance(d, str) and "inf" in d:
        if "DMFT" in d:
            return "theory (other route)"
        if "fit" in d or "extrapolated" in d or "→" in d:
            return "finite d, extrapolated"
        return "closed form"
    return "finite d"


def z_calibration(rows_by_name: dict) -> dict:
    """How honest are the stated errors? Over the assessed two-sided rows that carry a standard error (theory and
    reference numbers, combined s.e. > 0; not one-sided rules), z = (theory − reference) / combined s.e. (paired rows:
    the paired difference over its s.e.; a DMFT s.e. counts as the theory's): the
    fractions with |z| ≤ 1, 2, 3 against a normal law's 0.683 / 0.954 / 0.9973, and per benchmark the rows with
    |z| > 3 (agreeing ones pass through an allowance or a Student-t multiple; disagreeing ones are findings).
    A reading aid, not a test: finite-size rows that are meant to disagree count too (session 53)."""
    import numpy as np

    zs, per = [], {}
    for name, rows in rows_by_name.items():
        for r in rows:
            th, ref = r.get("theory"), r.get("simulation")
            if r.get("agree") is None or "one-sided" in f"{r.get('tolerance_rule', '')} {r.get('tolerance', '')}":
                continue
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (th, ref)):
                continue
            if isinstance(r.get("paired_stderr"), (int, float)):       # paired rows: the paired difference's s.e.
                diff, se = r["paired_difference"], r["paired_stderr"]
            else:
                ses = [r.get("theory_stderr", r.get("dmft_stderr")) or 0.0, r.get("sim_stderr") or 0.0]
                if not all(isinstance(v, (int, float)) for v in ses):
                    continue
                diff, se = th - ref, float(np.hypot(*ses))
            if not (se > 0) or not np.isfinite(diff):
                continue
            z = diff / se
            zs.append(z)
            if abs(z) > 3:
                c = per.setdefault(name, dict(rows=0, agree=0, disagree=0))
                c["rows"] += 1
                c["agree" if r["agree"] else "disagree"] += 1
    a = np.abs(np.asarray(zs, float))
    return dict(rows=int(a.size), within=[float(np.mean(a <= k)) if a.size else float("nan") for k in (1, 2, 3)],
                normal=[0.6827, 0.9545, 0.9973], median_abs_z=float(np.median(a)) if a.size else float("nan"),
                beyond_3=dict(sorted(per.items(), key=lambda kv: -kv[1]["rows"])))


def write_results_md(path: pathlib.Path | None = None, results_dir: pathlib.Path | None = None):
    path = path or (HERE / "RESULTS.md")
    rdir = pathlib.Path(results_dir) if results_dir else RESULTS
    files = sorted(rdir.glob("*.json")) + sorted(rdir.glob("gpu/*.json"))
    acc_lines = ["| benchmark | quantity | theory | reference ± s.e. | against | d | seeds | tolerance | agree |",
                 "|---|---|---|---|---|---|---|---|---|"]
    kinds, rows_by_name = {}, {}
    perf_lines = ["| benchmark | what | value | unit | ratio | note |", "|---|---|---|---|---|---|"]
    runs = ["| benchmark | file | mode | device | jax | date | status | wall (s) | compile (s) | programs | warnings |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in files:
        try:
            res = json.loads(f.read_text())
        except Exception:
            continue
        if "provenance" not in res:
            continue
        name = res.get("name", f.stem)
        rel = f.relative_to(rdir).as_posix()
        pv = res["provenance"]
        runs.append(f"| {name} | {rel} | {pv.get('mode')} | {pv.get('platform')}:{pv.get('device')} | {pv.get('jax')} | "
                    f"{pv.get('date')} | {res.get('status')} | {res.get('wall_s')} | {_compile_cell(res)} | {_warnings_cell(pv)} |")
        tag = f"{name} ({pv.get('platform')})"
        rows_by_name.setdefault(tag, []).extend(res.get("accuracy", []))
        for row in res.get("accuracy", []):
            se = row.get("sim_stderr")
            sim = _fmt(row.get("simulation")) + (f" ± {_fmt(se, 2)}" if se is not None else "")
            tol = _fmt(row.get("tolerance"), 3)
            if row.get("max_rel_err") is not None:   # relative tolerance with the worst case over keys
                tol = f"rel {tol} (max {row['max_rel_err']:.1e})"
            if row.get("paired_difference") is not None:
                tol = f"{tol}; paired diff {row['paired_difference']:.3f} ± {row['paired_stderr']:.3f}"
            kind = reference_kind(row)
            kinds[kind] = kinds.get(kind, 0) + 1
            acc_lines.append(f"| {tag} | {row.get('quantity')} | {_fmt(row.get('theory'))} | {sim} | {kind} | {_fmt(row.get('d'))} | "
                             f"{_fmt(row.get('seeds'))} | {tol} | {_fmt(row.get('agree'))} |")
        for row in res.get("performance", []):
            perf_lines.append(f"| {tag} | {row.get('what')} | {_fmt(row.get('value'))} | {row.get('unit', '')} | "
                              f"{_fmt(row.get('ratio'), 3)} | {row.get('note', '')} |")
    text = ["# Benchmark results", "",
            "Generated by `python -m benchmarks run` from the JSON files in `benchmarks/results/` "
            "(GPU runs in `benchmarks/results/gpu/`); do not edit by hand.", "",
            "## Runs", "",
            "compile (s): XLA backend compilation + tracing + lowering inside the benchmark (jax.monitoring "
            "events; part of its wall time; a persistent-cache hit counts its read time); programs: XLA programs "
            "built; warnings: distinct RuntimeWarning / UserWarning messages the run emitted (solver diagnostics: "
            "unstable tail paths, a rising train error, an unfaithful field factor; full text in the JSON's "
            "provenance.warnings); — for runs recorded before this was measured.", "", *runs, "",
            "## Accuracy: theory against its reference", "",
            "against: finite d (GD simulation or dense linear algebra at finite d), finite d extrapolated to d → ∞, "
            "closed form, or theory (other route): another route of the theory (e.g. stationary against dynamic "
            "DMFT), a consistency check, not a check of the theory itself; self-consistency (Monte Carlo keys): a "
            "theory's independent Monte Carlo keys tested as one i.i.d. sample; see quantity: the row says. Rows: "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) + ".", "", *acc_lines, "",
            *_calibration_lines(z_calibration(rows_by_name)),
            "## Performance", "", *perf_lines, ""]
    path.write_text("\n".join(text))
    return path


def _calibration_lines(cal: dict) -> list:
    """The RESULTS.md section of :func:`z_calibration`."""
    w, nrm = cal["within"], cal["normal"]
    lines = ["## Calibration of the stated errors", "",
             " ".join(z_calibration.__doc__.split("(session 53)")[0].split()) + ".", "",
             "| rows | \\|z\\| ≤ 1 | \\|z\\| ≤ 2 | \\|z\\| ≤ 3 | median \\|z\\| |", "|---|---|---|---|---|",
             f"| {cal['rows']} | {w[0]:.3f} (normal {nrm[0]}) | {w[1]:.3f} ({nrm[1]}) | {w[2]:.3f} ({nrm[2]}) | "
             f"{cal['median_abs_z']:.2f} (0.67) |", "",
             "| benchmark | rows with \\|z\\| > 3 | of which agree | disagree |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['rows']} | {v['agree']} | {v['disagree']} |" for k, v in cal["beyond_3"].items()]
    return lines + [""]


def _process_compile_cache():
    """Quick mode from the command line: a persistent XLA compilation cache in a fresh temporary
    directory, private to this process and removed at exit. Several library routes rebuild their
    jitted closures on every call (e.g. one ``threshold_gradient`` call recompiles a few hundred
    identical programs), so the second and later identical compilations are read back instead of
    recompiled (measured: a repeated ``threshold_gradient`` call 8.6–10 s → 5.0–5.4 s on the 2-core
    CPU, the same δ_NN to the last digit). Nothing survives the process: every run starts cold, so
    the measured wall time is that of a fresh checkout."""
    import atexit
    import shutil
    import tempfile

    import jax

    d = os.environ.get(CACHE_ENV)                 # a ``--jobs`` worker: the parent's directory
    if not d:
        d = tempfile.mkdtemp(prefix="deltann_quick_xla_")
        atexit.register(shutil.rmtree, d, ignore_errors=True)
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return d


def longest_first(names, outdir: pathlib.Path) -> list:
    """``names`` ordered by the wall time recorded in ``outdir`` (60 s where there is none), longest
    first: the order of the work queue of :func:`run_parallel`."""
    def cost(n):
        try:
            return float(json.loads((outdir / f"{n}.json").read_text())["wall_s"])
        except Exception:
            return 60.0
    return sorted(names, key=cost, reverse=True)


def _pop(queue: pathlib.Path):
    """The next benchmark name of a work queue file (one name per line), removed from it under an
    exclusive lock; None when the queue is empty."""
    import fcntl

    with open(queue, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        names = f.read().split()
        f.seek(0)
        f.truncate()
        f.write("\n".join(names[1:]))
    return names[0] if names else None


def run_queue(queue: pathlib.Path, mode: str, outdir: pathlib.Path | None) -> dict:
    """A worker of :func:`run_parallel`: run benchmarks taken one at a time from ``queue`` until it
    is empty (so a worker that finishes early takes the next one, whatever the recorded walls said)."""
    done = {}
    while (name := _pop(queue)) is not None:
        done.update(run([name], mode=mode, outdir=outdir, regenerate=False))
        _release_compiled()
    return done


def run_parallel(names, mode: str, outdir: pathlib.Path | None, jobs: int) -> int:
    """``jobs`` worker processes (``python -m benchmarks run --<mode> --queue FILE``) that take the
    benchmarks one at a time from a shared work queue, longest recorded wall first
    (:func:`longest_first`, :func:`run_queue`); one shared compilation cache in a temporary directory
    removed at the end; RESULTS.md regenerated once all are done. Returns the number of failed
    workers. Why: a benchmark keeps ~1.4 of 2 cores busy on average (XLA compilation, ~60 % of the
    quick suite's time, is single-threaded), so two workers use the idle core. A queue instead of fixed
    shares: the recorded walls go stale and move with whichever benchmark shares the cores (fixed
    longest-first shares left 24 s of 683 s idle on 2026-12-06). Timings inside a benchmark are
    contended: ``provenance.concurrent_benchmark_processes`` records it."""
    import shutil
    import subprocess
    import tempfile

    names, outdir = _checked(names, mode, outdir)
    order = longest_first(names, outdir)
    workers = max(1, min(jobs, len(order)))
    cache = tempfile.mkdtemp(prefix="deltann_bench_xla_")
    queue = pathlib.Path(tempfile.mkdtemp(prefix="deltann_bench_queue_")) / "queue"
    queue.write_text("\n".join(order))
    env = dict(os.environ, **{JOBS_ENV: str(workers), CACHE_ENV: cache})
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        print(f"== {workers} workers, queue (longest recorded wall first): {' '.join(order)}", flush=True)
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks", "run", f"--{mode}", "--no-report", "--jobs", "1",
                                   "--outdir", str(outdir), "--queue", str(queue)], env=env)
                 for _ in range(workers)]
        t0 = time.perf_counter()
        failed = sum(p.wait() != 0 for p in procs)
        print(f"== {len(names)} benchmarks, {workers} workers: {time.perf_counter() - t0:.1f} s wall", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(queue.parent, ignore_errors=True)
    _report(outdir)
    return failed


def replot(name: str, outdir: pathlib.Path = RESULTS) -> pathlib.Path:
    """Redraw ``name``'s figure from ``outdir/<name>.json`` without running it (only for
    benchmarks whose module defines ``replot(res, outdir)``)."""
    mod = importlib.import_module(f"benchmarks.bench_{name}")
    if not hasattr(mod, "replot"):
        raise SystemExit(f"benchmark {name!r} has no replot(res, outdir); rerun it instead.")
    res = json.loads((pathlib.Path(outdir) / f"{getattr(mod, 'NAME', name)}.json").read_text())
    mod.replot(res, outdir)
    return pathlib.Path(outdir) / res["figure"]


def reanalyze(name: str, outdir: pathlib.Path = RESULTS, regenerate: bool = True) -> pathlib.Path:
    """Recompute ``name``'s accuracy rows (and the derived records its module names) from the data
    stored in ``outdir/<name>.json``, without rerunning anything (only for benchmarks whose module
    defines ``reanalyze(res) -> res``): for a change of analysis, not of computation. The file keeps its
    run's provenance, wall time and performance rows; ``provenance["reanalyzed"]`` records when, by which
    commit and what. The figure is redrawn where the module defines ``replot``; RESULTS.md is regenerated."""
    import datetime

    from dmft.provenance import git_state

    mod = importlib.import_module(f"benchmarks.bench_{name}")
    if not hasattr(mod, "reanalyze"):
        raise SystemExit(f"benchmark {name!r} has no reanalyze(res); rerun it instead (python -m benchmarks run --only {name}).")
    outdir = pathlib.Path(outdir).resolve()
    path = outdir / f"{getattr(mod, 'NAME', name)}.json"
    res = json.loads(path.read_text())
    if res.get("status") != "ok":
        raise SystemExit(f"{path} records status {res.get('status')!r}: rerun the benchmark, there is nothing to reanalyze.")
    new = _jsonable(mod.reanalyze(res))
    stamp = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 **git_state(ignore=("benchmarks/results", "benchmarks/RESULTS.md")),   # its own outputs do not count
                 what=" ".join((mod.reanalyze.__doc__ or "").split()))
    new["provenance"] = dict(res["provenance"], reanalyzed=[*res["provenance"].get("reanalyzed", []), stamp])
    path.write_text(json.dumps(new, indent=1))
    if hasattr(mod, "replot"):
        mod.replot(new, outdir)
    if regenerate:
        _report(outdir)
    return path


def main(argv=None):
    import argparse

    from dmft.xla_flags import fast_cpu_compile

    global XLA_FLAGS_STATUS
    XLA_FLAGS_STATUS = fast_cpu_compile()  # before any computation (dmft/xla_flags.py); workers inherit XLA_FLAGS

    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run benchmarks and regenerate RESULTS.md")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="reduced sizes, ~12 min on 2 cores (2 workers); writes results/quick/")
    g.add_argument("--full", action="store_true", help="GPU-sized")
    g.add_argument("--standard", action="store_true", help="(default) CPU-sized runs committed in results/ (~27.8 h summed over the committed runs; use --only)")
    r.add_argument("--only", action="append", help="benchmark name (repeatable)")
    r.add_argument("--outdir", type=pathlib.Path, default=None)
    r.add_argument("--jobs", type=int, default=None,
                   help="concurrent benchmark processes (default: 2 for --quick on >= 2 cores, else 1; "
                        "timings are then contended, recorded in each JSON's provenance)")
    r.add_argument("--no-report", action="store_true", help="do not regenerate RESULTS.md")
    r.add_argument("--queue", type=pathlib.Path, default=None,
                   help="(a --jobs worker) run the benchmarks taken one at a time from this work-queue file")
    sub.add_parser("report", help="regenerate RESULTS.md from the JSON files")
    ra = sub.add_parser("reanalyze", help="recompute a benchmark's accuracy rows from its stored data (no rerun; "
                                          "benchmarks that define reanalyze)")
    ra.add_argument("name")
    ra.add_argument("--outdir", type=pathlib.Path, default=RESULTS)
    sub.add_parser("list", help="list benchmarks")
    rp = sub.add_parser("replot", help="redraw a benchmark's figure from its JSON (benchmarks that define replot)")
    rp.add_argument("name")
    rp.add_argument("--outdir", type=pathlib.Path, default=RESULTS)
    a = ap.parse_args(argv)
    if a.cmd == "list":
        print("\n".join(discover()))
    elif a.cmd == "replot":
        print(replot(a.name, a.outdir))
    elif a.cmd == "reanalyze":
        print(reanalyze(a.name, a.outdir))
    elif a.cmd == "report":
        print(write_results_md())
    else:
        mode = "quick" if a.quick else "full" if a.full else "standard"
        worker = CACHE_ENV in os.environ    # a worker of run_parallel never spawns workers itself
        jobs = a.jobs if a.jobs is not None else (min(2, os.cpu_count() or 1) if a.quick and not worker else 1)
        if jobs < 1:
            raise SystemExit(f"--jobs must be >= 1 (got {a.jobs}).")
        if jobs > 1 and len(a.only or discover()) > 1:
            sys.exit(run_parallel(a.only, mode, a.outdir, jobs))
        if a.quick:
            _process_compile_cache()
        if a.queue is not None:
            run_queue(a.queue, mode, a.outdir)
            return
        run(a.only, mode=mode, outdir=a.outdir, regenerate=not a.no_report)


if __name__ == "__main__":
    main(sys.argv[1:])
