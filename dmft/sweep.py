"""Sweeps at scale: a parameter sweep sharded over local devices, checkpointed point by
point, resumable, and splittable across hosts (issue #4, item 8).

::

    res = dmft.sweep.run(fn, grid, key=jax.random.key(0), checkpoint_dir="runs/phase")
    res.values          # pytree of numpy arrays, stacked along axis 0 in grid order
    res.points          # [{"delta": 0.5, "seed": 0}, ...], same order
    res.reshaped()      # (product grids) leaves reshaped to grid shape + point shape

``fn(point)`` (or ``fn(point, key)`` when ``key`` is given) is a pure JAX function of ONE
grid point, a dict ``name -> scalar array``, returning a pytree of arrays. ``grid`` is
either a dict ``name -> 1-d array`` (the Cartesian product, in ``itertools.product``
order: the last name varies fastest) or :func:`points` ``(name=array, ...)``, an explicit
list of points given as equal-length columns.

Sharding. The points are split over ``jax.local_devices()`` (a 1-d mesh, ``shard_map``),
``chunk`` points per device per step, and each device runs its points one after another
with ``jax.lax.map`` (not ``vmap``), so every point runs the same compiled per-device
program whatever the number of devices: with the same ``chunk`` the results are
bit-identical on 1 and on N devices. The last step is padded with copies of a real point
(dropped). Continuous parameters are traced: one compilation for the whole sweep.

Randomness. With ``key``, point ``i`` gets ``fold_in(key, i)`` (or
``fold_in(key, point[key_by])`` with ``key_by="seed"``, which gives common random numbers
across the other parameters); never anything that depends on the device or the step.

Checkpoints. With ``checkpoint_dir``, each finished point is written after its step to
``point_<index>.npz`` atomically (temp file in the same directory, fsync, ``os.replace``),
next to a ``manifest.json`` (grid, key, output structure, ``fn`` name, ``meta``). A
rerun loads the finished points and computes only the missing ones; a manifest that does
not match (another grid, key, ``fn`` or output structure) raises :class:`SweepError`
(use a new directory or ``overwrite=True``).

Several hosts (``jax.distributed``). Start one process per host and call
``jax.distributed.initialize()`` first; every process calls ``run`` with the same
arguments and a ``checkpoint_dir`` on a shared file system. Process ``p`` of ``P``
(``jax.process_index()``, ``jax.process_count()``) owns the points ``i % P == p`` and
computes the missing ones on its own local devices (no cross-host communication); then
all processes wait at a barrier and the final gather reads the point files, so each
process returns the full result. ``process=(p, P)`` does the same split without
``jax.distributed`` (e.g. independent batch jobs; then gather afterwards with a plain
``run`` that finds every point on disk). See ``docs/sweeps.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import tempfile
import warnings
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

FORMAT = "deltann.dmft.sweep"
VERSION = 1
AXIS = "points"
_POINT_RE = re.compile(r"^point_(\d+)\.npz$")


class SweepError(ValueError):
    """An invalid sweep specification or checkpoint directory (the message names the fix)."""


# ---------------------------------------------------------------------------------
# grids
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Points:
    """An explicit list of sweep points as equal-length columns (see :func:`points`)."""

    columns: dict


def points(columns: Optional[dict] = None, /, **kw) -> Points:
    """Explicit sweep points: ``points(delta=[1., 2.], seed=[0, 5])`` is the two points
    ``{delta: 1, seed: 0}`` and ``{delta: 2, seed: 5}`` (no Cartesian product). The columns
    must all have the same length."""
    cols = dict(columns or {})
    cols.update(kw)
    norm = _columns(cols)
    lengths = {k: len(v) for k, v in norm.items()}
    if len(set(lengths.values())) > 1:
        raise SweepError(
            f"points(...) needs columns of equal length (one entry per point); got lengths {lengths}. "
            "For the Cartesian product of the values pass a plain dict as the grid instead."
        )
    return Points(norm)


def _columns(cols: dict) -> dict:
    if not isinstance(cols, dict) or not cols:
        raise SweepError("The sweep grid is empty: give at least one parameter, e.g. {'delta': jnp.linspace(1, 4, 8)}.")
    out = {}
    for name, v in cols.items():
        if not isinstance(name, str) or not name:
            raise SweepError(f"Grid parameter names must be non-empty strings (got {name!r}).")
        a = np.asarray(v)
        if a.ndim == 0:
            a = a[None]
        if a.ndim != 1:
            raise SweepError(f"Grid parameter {name!r} must be a 1-d array of values (got shape {a.shape}).")
        if a.size == 0:
            raise SweepError(f"Grid parameter {name!r} has no values: the sweep would be empty.")
        if a.dtype.kind == "f":
            a = a.astype(np.float64)
        elif a.dtype.kind in "iu":
            a = a.astype(np.int64)
        elif a.dtype.kind != "b":
            raise SweepError(f"Grid parameter {name!r} must be numeric (got dtype {a.dtype}).")
        out[name] = a
    return out


def _expand(grid):
    """-> (columns of length n in grid order, mode, shape)."""
    if isinstance(grid, Points):
        cols = grid.columns
        return cols, "points", (len(next(iter(cols.values()))),)
    if isinstance(grid, dict):
        cols = _columns(grid)
        shape = tuple(len(v) for v in cols.values())
        idx = np.array(list(itertools.product(*[range(s) for s in shape])), dtype=np.int64).reshape(-1, len(shape))
        return {k: v[idx[:, j]] for j, (k, v) in enumerate(cols.items())}, "product", shape
    raise SweepError(
        f"grid must be a dict name -> 1-d array (Cartesian product) or dmft.sweep.points(...) (got {type(grid).__name__})."
    )


# ---------------------------------------------------------------------------------
# result
# ---------------------------------------------------------------------------------


@dataclasses.dataclass
class SweepResult:
    """Sweep output. ``values``: the pytree returned by ``fn`` with numpy leaves stacked along
    axis 0 over ``index`` (grid order). ``points``: one dict of Python scalars per entry.
    ``computed`` / ``loaded``: point indices computed in this call / read from the
    checkpoint. ``traces``: how many times the sweep program was traced (compiled) in this
    call (0 when nothing was computed, else 1)."""

    values: Any
    points: list
    index: np.ndarray
    columns: dict
    mode: str
    shape: tuple
    computed: list
    loaded: list
    traces: int
    complete: bool

    def reshaped(self):
        """``values`` with axis 0 unflattened to the grid shape (product grids, full results)."""
        if self.mode != "product" or not self.complete:
            raise SweepError("reshaped() needs the full result of a Cartesian-product grid.")
        return jax.tree_util.tree_map(lambda a: a.reshape(self.shape + a.shape[1:]), self.values)


# ---------------------------------------------------------------------------------
# checkpoint files
# ---------------------------------------------------------------------------------


def _fsync_dir(d):
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path, write):
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{base}-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _point_path(d, i):
    return os.path.join(d, f"point_{i}.npz")


def _save_point(d, i, leaves):
    arrays = {f"leaf_{j}": a for j, a in enumerate(leaves)}
    arrays["__index__"] = np.array(i, dtype=np.int64)
    _atomic_write(_point_path(d, i), lambda f: np.savez(f, **arrays))


def _load_point(d, i, specs):
    """Leaves of point ``i``, or ``None`` (with a warning) if the file does not fit."""
    path = _point_path(d, i)
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:   # fh closed even if np.load fails
            if int(z["__index__"]) != i:
                raise ValueError(f"holds point {int(z['__index__'])}")
            leaves = [np.array(z[f"leaf_{j}"]) for j in range(len(specs))]
    except Exception as e:  # unreadable or foreign file: recompute the point
        warnings.warn(f"dmft.sweep: ignoring unreadable checkpoint {path} ({e}); the point is recomputed.")
        return None
    for a, (shape, dtype) in zip(leaves, specs):
        if a.shape != shape or a.dtype != np.dtype(dtype):
            warnings.warn(f"dmft.sweep: ignoring {path} (leaf {a.shape} {a.dtype}, expected {shape} {dtype}).")
            return None
    return leaves


def _fn_name(fn):
    """``fn``'s qualified name without its module (a script run as ``__main__`` and the same
    module imported elsewhere must match)."""
    f = fn.func if hasattr(fn, "func") and hasattr(fn, "args") else fn  # functools.partial
    return getattr(f, "__qualname__", None) or type(f).__qualname__


def _fn_record(fn):
    """What tells two sweep functions apart beyond their name: a partial's arguments, defaults, closure
    values and a hash of the bytecode (module names left out). Two lambdas, or two partials of one function,
    used to resume from each other's points silently (user audit, session 49)."""
    from .problem import _callable_name

    return _callable_name(fn, module=False)


def _jsonable(x, what="meta"):
    def plain(o):
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        raise TypeError(f"{type(o).__name__} {o!r}")

    try:
        return json.loads(json.dumps(x, default=plain))
    except (TypeError, ValueError) as e:
        raise SweepError(f"{what} must be JSON-able (numbers, strings, lists, dicts; numpy scalars and arrays are "
                         f"converted): {e}") from None


RUNTIME_FIELDS = ("runtime",)      # recorded, compared with a warning only (they change rounding, not the sweep)


def _prepare_dir(d, manifest, overwrite, nproc):
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            try:
                old = json.load(f)
            except json.JSONDecodeError as e:
                raise SweepError(f"{path} is not valid JSON ({e}); use a new checkpoint_dir or overwrite=True.") from e
        diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
        soft = [k for k in diff if k in RUNTIME_FIELDS or (k == "fn_record" and k not in old)]
        hard = [k for k in diff if k not in soft]
        if hard and not overwrite:
            raise SweepError(
                f"checkpoint_dir {d!r} holds a different sweep (manifest fields differ: {', '.join(hard)}). "
                "Use a new checkpoint_dir for this sweep, or pass overwrite=True to discard the old points."
            )
        if soft and not overwrite:
            warnings.warn(f"dmft.sweep: resuming {d!r} with a different {', '.join(soft)} (old: "
                          f"{ {k: old.get(k) for k in soft} }); points computed under the two may differ by rounding "
                          "(bit-identity needs the same chunk, versions and XLA flags).")
    elif not overwrite and any(_POINT_RE.match(name) for name in os.listdir(d)):
        # point files carry no fingerprint of their sweep: without the manifest they cannot be matched (audit:
        # a different function loaded all 6 foreign points)
        raise SweepError(f"checkpoint_dir {d!r} holds point files but no manifest.json, so they cannot be matched to "
                         "this sweep. Use a new checkpoint_dir, or pass overwrite=True to discard them.")
    if overwrite:
        if nproc > 1:
            raise SweepError("overwrite=True is not supported with several processes; clear checkpoint_dir first.")
        for name in os.listdir(d):
            if _POINT_RE.match(name):
                os.unlink(os.path.join(d, name))
    text = json.dumps(manifest, indent=1, sort_keys=True)
    _atomic_write(path, lambda f: f.write(text.encode()))
    _fsync_dir(d)


# ---------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------


def _output_specs(fn, cols, key):
    pt = {k: jax.ShapeDtypeStruct((), v.dtype) for k, v in cols.items()}

    def checked(pt, k):
        out = fn(pt) if k is None else fn(pt, k)
        leaves, _ = jax.tree_util.tree_flatten_with_path(out)
        if not leaves:
            raise SweepError("fn returned no arrays; it must return a pytree of arrays (e.g. a dict of arrays).")
        for path, leaf in leaves:
            ok = isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))
            if not ok:
                raise SweepError(
                    f"fn must return a pytree of arrays; the leaf at {jax.tree_util.keystr(path) or 'the top'} "
                    f"is a {type(leaf).__name__}. Return jnp arrays only (close over constants instead)."
                )
            if jnp.issubdtype(jnp.result_type(leaf), jax.dtypes.prng_key):
                raise SweepError("fn returns a PRNG key array; return jax.random.key_data(key) instead.")
        return out

    kspec = None if key is None else jax.ShapeDtypeStruct(jnp.shape(key), key.dtype)
    out = jax.eval_shape(checked, pt, kspec)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(out)
    paths = [jax.tree_util.keystr(p) for p, _ in leaves]
    specs = [(tuple(l.shape), np.dtype(l.dtype).str) for _, l in leaves]
    return treedef, paths, specs


def _resolve_devices(devices):
    local = jax.local_devices()
    if devices is None:
        return list(local)
    if isinstance(devices, (int, np.integer)):
        if not 1 <= devices <= len(local):
            raise SweepError(f"devices = {devices}: this process has {len(local)} local devices.")
        return list(local[: int(devices)])
    devices = list(devices)
    if not devices:
        raise SweepError("devices is empty.")
    pid = jax.process_index()
    if any(d.process_index != pid for d in devices):
        raise SweepError("devices must be local to this process (each process shards over its own devices).")
    return devices


def run(
    fn: Callable,
    grid,
    *,
    key=None,
    key_by: Optional[str] = None,
    checkpoint_dir: Optional[str] = None,
    overwrite: bool = False,
    devices=None,
    chunk: int = 1,
    progress: Optional[Callable] = None,
    process: Optional[tuple] = None,
    gather: bool = True,
    meta: Optional[dict] = None,
) -> SweepResult:
    """Run ``fn`` on every point of ``grid``, sharded over local devices, checkpointed.

    Args:
      fn: ``fn(point) -> pytree of arrays`` (``fn(point, key)`` when ``key`` is given), pure
        JAX, for one point ``{name: scalar array}``; traced once.
      grid: dict ``name -> 1-d array`` (Cartesian product, last name fastest) or
        :func:`points` (explicit list).
      key: base PRNG key; point ``i`` gets ``jax.random.fold_in(key, i)``, or
        ``fold_in(key, point[key_by])`` if ``key_by`` names an integer grid column.
      checkpoint_dir: directory for ``manifest.json`` and ``point_<i>.npz``; ``None``: keep
        results in memory only.
      overwrite: discard an existing checkpoint in ``checkpoint_dir`` (single process).
      devices: local devices to shard over (list, or a count of the first local devices);
        default all of ``jax.local_devices()``.
      chunk: points per device per step (a step is one call of the compiled program and
        one checkpoint write). Keep it fixed to get bit-identical results across device
        counts.
      progress: ``progress(done, total)`` after each step (this process's points).
      process: ``(p, P)`` to compute only the points ``i % P == p``; default
        ``(jax.process_index(), jax.process_count())``.
      gather: return all points (read from ``checkpoint_dir`` after a barrier when several
        processes run); ``False``: return only this process's points.
      meta: JSON-able settings stored in (and checked against) the manifest, e.g.
        ``dict(steps=40, paths=20000)`` for what ``fn`` closes over.
    """
    cols, mode, shape = _expand(grid)
    n = len(next(iter(cols.values())))
    if not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise SweepError(f"chunk must be a positive int (points per device per step); got {chunk!r}.")
    if key is not None:
        key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
        if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.wrap_key_data(key)
        if key.shape != ():
            raise SweepError(f"key must be a single PRNG key (got shape {key.shape}).")
    if key_by is not None:
        if key is None:
            raise SweepError("key_by is only used with key=...; pass a base key.")
        if key_by not in cols or cols[key_by].dtype.kind not in "iu":
            raise SweepError(f"key_by={key_by!r} must name an integer grid column (have {list(cols)}).")
        keyvals = cols[key_by]
        if keyvals.min() < 0 or keyvals.max() >= 2**32:
            # fold_in takes a uint32: −1 and 2³² − 1 (or 0 and 2³²) would share their randomness
            raise SweepError(f"key_by={key_by!r}: its values must lie in [0, 2**32) (fold_in data is uint32); got "
                             f"[{keyvals.min()}, {keyvals.max()}].")
    else:
        keyvals = np.arange(n, dtype=np.int64)
    treedef, out_paths, specs = _output_specs(fn, cols, key)

    distributed = process is None and jax.process_count() > 1
    p, nproc = (jax.process_index(), jax.process_count()) if process is None else (int(process[0]), int(process[1]))
    if not (nproc >= 1 and 0 <= p < nproc):
        raise SweepError(f"process must be (index, count) with 0 <= index < count; got {process!r}.")
    if nproc > 1 and gather and checkpoint_dir is None:
        raise SweepError("A sweep split over several processes needs a shared checkpoint_dir to gather the points.")
    devs = _resolve_devices(devices)
    nd = len(devs)

    own = [i for i in range(n) if i % nproc == p]
    results: dict = {}
    loaded = []
    if checkpoint_dir is not None:
        checkpoint_dir = os.fspath(checkpoint_dir)
        manifest = _jsonable(dict(
            format=FORMAT, version=VERSION, fn=_fn_name(fn), fn_record=_fn_record(fn), mode=mode, shape=list(shape),
            grid={k: dict(dtype=v.dtype.str, values=v.tolist()) for k, v in cols.items()},
            key=None if key is None else dict(
                impl=str(jax.random.key_impl(key)), data=np.asarray(jax.random.key_data(key)).tolist(), key_by=key_by),
            outputs=[dict(path=pth, shape=list(s), dtype=dt) for pth, (s, dt) in zip(out_paths, specs)],
            meta=_jsonable(meta),
            runtime=dict(chunk=int(chunk), jax=jax.__version__, x64=bool(jax.config.jax_enable_x64),
                         xla_flags=os.environ.get("XLA_FLAGS", "")),
        ), "the manifest")
        _prepare_dir(checkpoint_dir, manifest, overwrite, nproc)
        for i in own:
            if os.path.exists(_point_path(checkpoint_dir, i)):
                leaves = _load_point(checkpoint_dir, i, specs)
                if leaves is not None:
                    results[i] = leaves
                    loaded.append(i)
    todo = [i for i in own if i not in results]

    # --- the sharded program: shard_map over a 1-d mesh, lax.map over each device's points
    traces = [0]
    mesh = Mesh(np.array(devs), (AXIS,))
    sharding = NamedSharding(mesh, P(AXIS))

    def local(pts, kv, k):
        traces[0] += 1

        def one(args):
            pt, kvi = args
            if k is None:
                return fn(pt)
            return fn(pt, jax.random.fold_in(k, kvi.astype(jnp.uint32)))

        return jax.lax.map(one, (pts, kv))

    if key is None:
        prog = jax.jit(jax.shard_map(lambda pts, kv: local(pts, kv, None), mesh=mesh,
                                     in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    else:
        prog = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P()),
                                     out_specs=P(AXIS), check_vma=False))
        key_rep = jax.device_put(key, NamedSharding(mesh, P()))

    step = nd * chunk
    batches = [todo[s: s + step] for s in range(0, len(todo), step)]

    def submit(batch):
        idx = np.array(batch + [batch[0]] * (step - len(batch)), dtype=np.int64)  # pad with a real point
        pts = {k: jax.device_put(v[idx], sharding) for k, v in cols.items()}
        kv = jax.device_put(keyvals[idx], sharding)
        out = prog(pts, kv) if key is None else prog(pts, kv, key_rep)
        return batch, out

    computed = []
    done = len(loaded)
    pending = submit(batches[0]) if batches else None
    for b in range(len(batches)):
        nxt = submit(batches[b + 1]) if b + 1 < len(batches) else None  # keep the devices busy
        batch, out = pending
        leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(out)]
        for j, i in enumerate(batch):
            results[i] = [a[j] for a in leaves]
            if checkpoint_dir is not None:
                _save_point(checkpoint_dir, i, results[i])
        if checkpoint_dir is not None:
            _fsync_dir(checkpoint_dir)
        computed.extend(batch)
        done += len(batch)
        pending = nxt
        if progress is not None:
            progress(done, len(own))

    # --- gather
    if gather:
        if distributed:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"dmft.sweep.run:{checkpoint_dir}")
        missing = []
        for i in range(n):
            if i not in results:
                leaves = _load_point(checkpoint_dir, i, specs) if (
                    checkpoint_dir is not None and os.path.exists(_point_path(checkpoint_dir, i))) else None
                if leaves is None:
                    missing.append(i)
                else:
                    results[i] = leaves
        if missing:
            raise SweepError(
                f"{len(missing)} of {n} points are missing from {checkpoint_dir!r} (e.g. {missing[:5]}): "
                "another process has not finished them; rerun its share (or run without process=...) to complete."
            )
        index = list(range(n))
    else:
        index = own
    index_a = np.array(index, dtype=np.int64)
    if index:
        stacked = [np.stack([results[i][j] for i in index]) for j in range(len(specs))]
    else:
        stacked = [np.zeros((0,) + s, dtype=np.dtype(dt)) for s, dt in specs]
    values = jax.tree_util.tree_unflatten(treedef, stacked)
    sel = {k: v[index_a] for k, v in cols.items()}
    pts_list = [{k: sel[k][j].item() for k in sel} for j in range(len(index))]
    return SweepResult(
        values=values, points=pts_list, index=index_a, columns=sel, mode=mode, shape=shape,
        computed=computed, loaded=sorted(loaded), traces=traces[0], complete=len(index) == n,
    )
