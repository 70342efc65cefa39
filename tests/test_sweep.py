"""dmft.sweep: sharded sweeps (bit-identical to unsharded), per-point keys, atomic
checkpoints, resume after an interruption, process split, clean errors."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import dmft.sweep as sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Shared between this process and the 4-device subprocesses (the device count must be
# fixed before jax starts, so those runs happen in a fresh interpreter).
TOY = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    import dmft, dmft.sweep as sweep

    def toy(p, key):
        x = jax.random.normal(key, (32,))
        def body(c, _):
            c = c - 0.3 * (jnp.tanh(p["c"] * c) * c - p["delta"] * jnp.sin(c))
            return c, jnp.sum(c ** 2) / (1 + p["delta"])
        c, hist = jax.lax.scan(body, x, None, length=12)
        return {"hist": hist, "final": c @ c, "draw": x[:3]}

    TOY_GRID = {"delta": np.linspace(0.5, 3.0, 11), "c": np.array([1.0, 2.5])}

    PROB = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: jnp.tanh(2 * z[0]), k=1, hard=()),
        student=dmft.TwoLayer(activation=jnp.tanh, width=1),
        loss=dmft.square_loss,
    )

    def dmft_point(p, key):
        tr = dmft.solve(PROB, p["delta"], 0.2, 5, 128, key, throw=False, check_inputs=False)
        return {"train_error": tr.train_error, "overlap": tr.overlap}

    DMFT_GRID = {"delta": np.linspace(0.5, 3.0, 6), "seed": np.array([0, 1])}
    """
)
exec(TOY, globals())


def _xla_flags(devices):
    """This process's XLA flags (the compile flag of tests/conftest.py: results are bit-identical only between
    programs compiled with the same flags) plus ``devices`` host CPU devices."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()


def _subprocess(body, tmp_path, devices=4):
    """Start ``TOY + body`` in a fresh interpreter with ``devices`` host CPU devices."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = _xla_flags(devices)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    code = TOY + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def _running(body, tmp_path, devices=4):
    """The subprocess of :func:`_subprocess`, killed on the way out if still running."""
    proc = _subprocess(body, tmp_path, devices)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{out}\n{err[-4000:]}"
    return out


def _assert_tree_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), np.max(np.abs(x - y))


# ---------------------------------------------------------------------------------
# sharding: bit-identical to the unsharded run
# ---------------------------------------------------------------------------------


def test_sharded_toy_bit_identical_to_unsharded(tmp_path):
    """4 host devices (22 points, chunk 2: last step padded) == 1 device, bit for bit."""
    with _running(
        """
        assert len(jax.local_devices()) == 4
        r4 = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=2)
        r1 = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=2, devices=1)
        assert r4.traces == 1 and r1.traces == 1
        for k in r4.values:
            assert np.array_equal(r4.values[k], r1.values[k]), k
        np.savez("toy4.npz", **r4.values)
        print("OK")
        """,
        tmp_path,
    ) as proc:
        ref = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=2)  # this process: 1 device
        assert "OK" in _finish(proc)
    with np.load(tmp_path / "toy4.npz") as z:
        got = {k: z[k] for k in z.files}
    _assert_tree_equal(got, ref.values)


@pytest.mark.slow
def test_sharded_dmft_solve_bit_identical(tmp_path):
    """A tiny dmft.solve sweep over (δ, seed) on 4 devices equals the 1-device run bit for bit."""
    with _running(
        """
        r = sweep.run(dmft_point, DMFT_GRID, key=jax.random.key(0), key_by="seed", chunk=1)
        assert r.traces == 1 and len(r.computed) == 12
        np.savez("dmft4.npz", **r.values)
        print("OK")
        """,
        tmp_path,
    ) as proc:
        ref = sweep.run(dmft_point, DMFT_GRID, key=jax.random.key(0), key_by="seed", chunk=1, devices=1)
        assert "OK" in _finish(proc)
    with np.load(tmp_path / "dmft4.npz") as z:
        got = {k: z[k] for k in z.files}
    _assert_tree_equal(got, ref.values)
    assert ref.values["train_error"].shape == (12, 6) and ref.values["overlap"].shape == (12, 6, 1, 1)
    assert np.all(np.isfinite(ref.values["train_error"]))
    # common random numbers per seed: δ changes the result, the seed's draws are shared
    direct = dmft.solve(PROB, 2.0, 0.2, 5, 128, jax.random.fold_in(jax.random.key(0), 1), throw=False)
    j = ref.points.index({"delta": 2.0, "seed": 1})
    np.testing.assert_allclose(ref.values["train_error"][j], direct.train_error, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------
# grid, keys, compilation
# ---------------------------------------------------------------------------------


def test_grid_order_points_and_keys():
    grid = {"delta": [1.0, 2.0, 3.0], "seed": [4, 7]}
    r = sweep.run(lambda p, k: {"d": p["delta"] * 2, "s": p["seed"], "draw": jax.random.normal(k, (2,))},
                  grid, key=jax.random.key(9), chunk=4)
    assert r.points == [{"delta": d, "seed": s} for d in (1.0, 2.0, 3.0) for s in (4, 7)]
    assert r.values["d"].dtype == np.float64 and r.values["s"].dtype == np.int64
    np.testing.assert_array_equal(r.values["d"], [2, 2, 4, 4, 6, 6])
    assert r.reshaped()["draw"].shape == (3, 2, 2)
    assert r.traces == 1 and r.complete and r.computed == list(range(6))
    # key of point i is fold_in(key, i), whatever the chunking
    for i in range(6):
        np.testing.assert_array_equal(r.values["draw"][i], jax.random.normal(jax.random.fold_in(jax.random.key(9), i), (2,)))
    # key_by="seed": same draws for the same seed across δ (common random numbers)
    rs = sweep.run(lambda p, k: jax.random.normal(k, (2,)), grid, key=jax.random.key(9), key_by="seed")
    np.testing.assert_array_equal(rs.values[0], rs.values[2])
    np.testing.assert_array_equal(rs.values[1], jax.random.normal(jax.random.fold_in(jax.random.key(9), 7), (2,)))
    # explicit points: no product
    rp = sweep.run(lambda p: p["a"] + p["b"], sweep.points(a=[1.0, 2.0, 3.0], b=[10.0, 20.0, 30.0]))
    np.testing.assert_array_equal(rp.values, [11.0, 22.0, 33.0])
    assert rp.mode == "points" and rp.points[1] == {"a": 2.0, "b": 20.0}


def test_one_compilation_and_matches_direct_calls():
    r = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=3)  # 22 points: 8 steps, last padded
    assert r.traces == 1 and len(r.computed) == 22
    f = jax.jit(toy)
    for i in (0, 13, 21):
        p = {k: jnp.asarray(v) for k, v in r.points[i].items()}
        direct = f(p, jax.random.fold_in(jax.random.key(3), i))
        np.testing.assert_allclose(r.values["hist"][i], direct["hist"], rtol=1e-13)


def test_errors(tmp_path):
    ok = lambda p: p["x"] * 2  # noqa: E731
    with pytest.raises(sweep.SweepError, match="empty"):
        sweep.run(ok, {})
    with pytest.raises(sweep.SweepError, match="no values"):
        sweep.run(ok, {"x": []})
    with pytest.raises(sweep.SweepError, match="equal length"):
        sweep.points(x=[1.0, 2.0], y=[1.0])
    with pytest.raises(sweep.SweepError, match="leaf at .*'name'.* str"):
        sweep.run(lambda p: {"v": p["x"], "name": "bad"}, {"x": [1.0]})
    with pytest.raises(sweep.SweepError, match="no arrays"):
        sweep.run(lambda p: {}, {"x": [1.0]})
    with pytest.raises(sweep.SweepError, match="integer grid column"):
        sweep.run(lambda p, k: p["x"], {"x": [1.0]}, key=jax.random.key(0), key_by="x")
    with pytest.raises(sweep.SweepError, match="chunk"):
        sweep.run(ok, {"x": [1.0]}, chunk=0)
    with pytest.raises(sweep.SweepError, match="numeric"):
        sweep.run(ok, {"x": ["a", "b"]})
    # manifest mismatch names the fix; overwrite=True starts afresh
    d = tmp_path / "ck"
    sweep.run(ok, {"x": [1.0, 2.0]}, checkpoint_dir=d)
    with pytest.raises(sweep.SweepError, match="(?s)grid.*new checkpoint_dir.*overwrite=True"):
        sweep.run(ok, {"x": [1.0, 3.0]}, checkpoint_dir=d)
    with pytest.raises(sweep.SweepError, match="meta"):
        sweep.run(ok, {"x": [1.0, 2.0]}, checkpoint_dir=d, meta={"steps": 3})
    r = sweep.run(ok, {"x": [1.0, 3.0]}, checkpoint_dir=d, overwrite=True)
    assert r.computed == [0, 1]
    np.testing.assert_array_equal(r.values, [2.0, 6.0])


# ---------------------------------------------------------------------------------
# checkpoints: interruption and resume
# ---------------------------------------------------------------------------------


def _stop_after(n_steps):
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == n_steps:
            raise KeyboardInterrupt

    return progress


def test_interrupted_sweep_resumes_without_recomputing(tmp_path):
    d = tmp_path / "ck"
    full = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=4)
    with pytest.raises(KeyboardInterrupt):
        sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=4, checkpoint_dir=d, progress=_stop_after(2))
    files = sorted(f for f in os.listdir(d) if f.startswith("point_"))
    assert len(files) == 8 and not any(f.startswith(".tmp") for f in os.listdir(d))
    mtimes = {f: os.stat(d / f).st_mtime_ns for f in files}
    r = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=4, checkpoint_dir=d)
    assert r.loaded == list(range(8)) and r.computed == list(range(8, 22))
    assert {f: os.stat(d / f).st_mtime_ns for f in files} == mtimes  # finished points untouched
    _assert_tree_equal(r.values, full.values)
    # a third run computes nothing and compiles nothing
    r3 = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=4, checkpoint_dir=d)
    assert r3.computed == [] and r3.traces == 0
    _assert_tree_equal(r3.values, full.values)


def test_killed_sweep_resumes(tmp_path):
    """SIGKILL mid-sweep (4 devices): the finished points survive, a damaged or stray file
    is ignored, and the resumed (1-device) run equals an uninterrupted run."""
    d = tmp_path / "ck"
    with _running(
        f"""
        import os, signal
        steps = []
        def progress(done, total):
            steps.append(done)
            if len(steps) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
        sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=1, checkpoint_dir={str(d)!r}, progress=progress)
        """,
        tmp_path,
    ) as proc:
        full = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=1)
        proc.communicate(timeout=240)
    assert proc.returncode == -signal.SIGKILL
    done = sorted(int(f[6:-4]) for f in os.listdir(d) if f.startswith("point_"))
    assert done == list(range(8))
    (d / "point_7.npz").write_bytes(b"truncated")  # damaged file: recomputed with a warning
    (d / ".tmp-point_8.npz-x").write_bytes(b"junk")  # stray temp file: ignored
    with pytest.warns(UserWarning, match="point_7"):
        r = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=1, checkpoint_dir=d)
    assert r.loaded == list(range(7)) and r.computed == list(range(7, 22))
    _assert_tree_equal(r.values, full.values)


def test_process_split_and_gather(tmp_path):
    """process=(p, P): each share computes i % P == p; a later run gathers from the files."""
    d = tmp_path / "ck"
    grid = {"delta": np.linspace(0.5, 3.0, 5), "c": np.array([1.0, 2.5])}
    full = sweep.run(toy, grid, key=jax.random.key(3))
    r0 = sweep.run(toy, grid, key=jax.random.key(3), checkpoint_dir=d, process=(0, 2), gather=False)
    assert r0.computed == [0, 2, 4, 6, 8] and list(r0.index) == [0, 2, 4, 6, 8] and not r0.complete
    with pytest.raises(sweep.SweepError, match="missing"):
        sweep.run(toy, grid, key=jax.random.key(3), checkpoint_dir=d, process=(0, 2))
    r1 = sweep.run(toy, grid, key=jax.random.key(3), checkpoint_dir=d, process=(1, 2))  # gathers all
    assert r1.computed == [1, 3, 5, 7, 9] and r1.complete
    _assert_tree_equal(r1.values, full.values)
    r = sweep.run(toy, grid, key=jax.random.key(3), checkpoint_dir=d)
    assert r.computed == [] and len(r.loaded) == 10
    _assert_tree_equal(r.values, full.values)


@pytest.mark.slow
def test_two_process_jax_distributed(tmp_path):
    """Two processes × 2 host devices under jax.distributed (localhost coordinator): each
    computes its share i % 2 == p into the shared directory, both return the full sweep."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    d = tmp_path / "ck"
    init = textwrap.dedent(f"""
        import sys, jax
        pid = int(sys.argv[1])
        jax.distributed.initialize(coordinator_address="localhost:{port}", num_processes=2, process_id=pid)
        """)  # before TOY: it builds arrays, which would start the backend
    body = textwrap.dedent(f"""
        assert jax.process_count() == 2 and len(jax.local_devices()) == 2
        r = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=2, checkpoint_dir={str(d)!r})
        assert r.complete and r.computed == list(range(pid, 22, 2)), r.computed
        np.savez(f"mh{{pid}}.npz", **r.values)
        print("OK")
        """)
    env = dict(os.environ, XLA_FLAGS=_xla_flags(2), JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", init + TOY + body, str(i)], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        ref = sweep.run(toy, TOY_GRID, key=jax.random.key(3), chunk=2)
        for proc in procs:
            assert "OK" in _finish(proc, timeout=180)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for i in range(2):
        with np.load(tmp_path / f"mh{i}.npz") as z:
            _assert_tree_equal({k: z[k] for k in z.files}, ref.values)


def test_checkpoint_identity_of_fn_keys_and_orphans(tmp_path):
    """Session 49 user audit: two lambdas, or two partials of one function, resumed from each other's points
    (loaded 6, computed 0: the old values); point files without a manifest were loaded for any sweep;
    key_by = −1 and 2³² − 1 shared their randomness (uint32 wrap). All refused now; a different chunk warns."""
    import functools
    import shutil

    G = {"delta": np.linspace(0.5, 3.0, 4)}
    d = str(tmp_path / "lam")
    sweep.run(lambda p: {"v": p["delta"] * 1.0}, G, checkpoint_dir=d)
    with pytest.raises(sweep.SweepError, match="fn_record"):
        sweep.run(lambda p: {"v": p["delta"] * 2.0}, G, checkpoint_dir=d)

    def g(p, scale):
        return {"v": scale * p["delta"]}

    d = str(tmp_path / "partial")
    sweep.run(functools.partial(g, scale=1.0), G, checkpoint_dir=d)
    with pytest.raises(sweep.SweepError, match="fn_record"):
        sweep.run(functools.partial(g, scale=2.0), G, checkpoint_dir=d)
    with pytest.warns(UserWarning, match="different runtime"):
        r = sweep.run(functools.partial(g, scale=1.0), G, checkpoint_dir=d, chunk=2)
    assert len(r.loaded) == 4
    os.unlink(os.path.join(d, "manifest.json"))
    with pytest.raises(sweep.SweepError, match="no manifest.json"):
        sweep.run(functools.partial(g, scale=1.0), G, checkpoint_dir=d)
    shutil.rmtree(d)
    grid = sweep.points(delta=[1.0, 1.0], seed=[-1, 2**32 - 1])
    with pytest.raises(sweep.SweepError, match=r"\[0, 2\*\*32\)"):
        sweep.run(lambda p, k: {"v": jax.random.normal(k)}, grid, key=jax.random.key(0), key_by="seed")
    r = sweep.run(lambda p: {"v": p["delta"]}, G, checkpoint_dir=str(tmp_path / "np"), meta={"paths": np.int64(100)})
    assert r.values["v"].shape == (4,)


def test_callable_records_tell_parameters_apart():
    """``setting["problem"]`` recorded huber_loss(0.5) and huber_loss(2.0) (train errors 0.40 vs 0.96), and
    relu_power(2) and relu_power(3), identically: closure values, defaults and partial arguments are recorded
    now, with a bytecode hash that is the same in every process."""
    import functools

    from dmft.activations import relu_power
    from dmft.problem import _callable_name

    assert _callable_name(dmft.huber_loss(0.5)) != _callable_name(dmft.huber_loss(2.0))
    assert "width=0.5" in _callable_name(dmft.huber_loss(0.5))
    assert "p=3.0" in _callable_name(relu_power(3.0))

    def scaled(r, c=1.0):
        return jnp.tanh(c * r)

    assert _callable_name(functools.partial(scaled, c=3.0)).endswith("c=3.0)")
    fs = [lambda r, c=c: jnp.tanh(c * r) for c in (1.0, 3.0)]
    assert _callable_name(fs[0]) != _callable_name(fs[1])
    out = subprocess.run([sys.executable, "-c", "import dmft; from dmft.problem import _callable_name; "
                          "print(_callable_name(dmft.huber_loss(0.5)))"], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == _callable_name(dmft.huber_loss(0.5)), out.stderr[-1000:]
