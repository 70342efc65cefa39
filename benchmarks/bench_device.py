"""Device ratios and achieved rates: the GPU items of issues #4 and #6, prepared and checked on the
CPU so that a session with a GPU only runs ``bash benchmarks/gpu_run.sh device`` (about a minute).

(1) **64-point δ sweep** (issue #4, "Speed"): ``dmft.solve_sweep`` over 64 δ values, vmapped on the
    default device (one compilation), against the same 64 solves run point by point on the host
    CPU (``jax.devices("cpu")``; one compilation, reused). Setting: the converging δ_NN setting of
    ``bench_end_to_end`` (easy-hard target y = z1 + z2² − 1, GeLU, m = 2, a = (1/2, 1/2) frozen,
    Huber 1, ridge 0.3, η = 1). This is the part of a δ*(t) sweep that is vmapped (the outlier
    margins per δ follow on the host; not timed here). On a CPU-only machine both sides run on
    the CPU, so the ratio is vmapped-vs-loop on one device (labelled ``cpu/cpu``); the goal
    (≥ 20×) is for a GPU.
(2) **Achieved rates** (issue #6, item 4) against the device's limits: the nominal ones of the GPU
    model it ran on (``NOMINAL``, chosen by ``device_kind``: the H200's are issue #6's ≈ 4.3 TB/s,
    ≈ 60 TFLOP/s fp64; the H100's the vendor's datasheet, since the device tool now lends an H100 by
    default) and, on any device, references measured in the same run: a large fp64 GEMM (FLOP/s)
    and a large read-only pass (a fused sum; bytes/s). A GPU model without a row in ``NOMINAL`` is
    compared with the measured references, and the JSON says so.
    - HVP (``spectral.block_matvec``: X V, then Xᵀ(D_i ·)): 4 n d m flops, at least two reads of
      X, 16 n d bytes (fp64); time median of repeats after a warm-up, X and D as jit arguments.
    - DMFT data-side step at step t: its dominant O(paths·t·T·m³) part, the adjoint sweep for
      Γ(t, ·) (THEORY eq. (6), ``dmft.solve._gamma_row``; the memory field and the C_g row are
      O(paths·T·m²) and not timed): flops counted as executed (the blocked sweep's GEMMs, zero
      padding included, chunking from ``dmft.solve._gamma_chunking``), bytes as the minimal traffic
      (one read of the path history G).
"""

from __future__ import annotations

import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "device"
# Nominal limits per GPU model, matched on jax's ``device_kind`` (first match wins; order matters: the
# "H100 PCIe" row before the generic H100 one). fp64 = the tensor-core fp64 rate, bf16 = dense matmul.
NOMINAL = (
    ("H200", dict(model="H200", bandwidth_Bps=4.3e12, fp64_flops=60e12, bf16_matmul_flops=790e12,
                  source="issue #6 (≈ 4.3 TB/s, ≈ 60 TFLOP/s fp64, ≈ 790 TFLOP/s bf16 matmul)")),
    ("H100 PCIe", dict(model="H100 PCIe", bandwidth_Bps=2.0e12, fp64_flops=51e12, bf16_matmul_flops=756e12,
                       source="NVIDIA H100 PCIe datasheet (2.0 TB/s HBM2e, 51 TFLOP/s fp64 tensor core, 756 dense bf16)")),
    ("H100", dict(model="H100 SXM", bandwidth_Bps=3.35e12, fp64_flops=67e12, bf16_matmul_flops=989e12,
                  source="NVIDIA H100 SXM datasheet (3.35 TB/s HBM3, 67 TFLOP/s fp64 tensor core, 989 dense bf16)")),
)
H200 = NOMINAL[0][1]


def nominal_limits(device_kind: str):
    """The nominal limits of the GPU model named by ``device_kind`` (jax's ``Device.device_kind``, e.g.
    "NVIDIA H100 80GB HBM3"), or None for a model without a row in :data:`NOMINAL`."""
    kind = (device_kind or "").upper()
    for key, lim in NOMINAL:
        if key.upper() in kind:
            return dict(lim)
    return None


def _median_time(f, reps):
    """Median and list of ``reps`` wall times of ``f()`` after one warm-up call."""
    from .bench_lanczos import _runs

    f()
    ts = _runs(lambda _: f(), reps)[0]
    return float(np.median(ts)), ts


def _references(big: bool, reps: int):
    """Measured fp64 GEMM rate and elementwise bandwidth of the default device."""
    n = 8192 if big else 2048
    A = jax.random.normal(jax.random.key(0), (n, n), jnp.float64)
    mm = jax.jit(lambda A_: A_ @ A_)
    t_mm, _ = _median_time(lambda: mm(A).block_until_ready(), reps)
    size = (2**29 if big else 2**25)          # fp64 elements: 4 GiB (GPU) / 256 MiB (CPU)
    x = jnp.ones((size,), jnp.float64)
    # read-only pass (a fused reduction): the HVP and the DMFT step are read-dominated, and a
    # fresh output buffer would add first-touch page faults on the CPU (measured: 2 GB/s for x·c + b)
    rd = jax.jit(lambda x_: jnp.sum(x_ * 1.000001))
    t_rd, _ = _median_time(lambda: rd(x).block_until_ready(), reps)
    return dict(gemm_n=n, gemm_flops_per_s=2 * n**3 / t_mm, gemm_s=t_mm,
                stream_bytes=8 * size, stream_bytes_per_s=8 * size / t_rd, stream_s=t_rd)


def _sweep_problem():
    from dmft.cli import make_problem

    return make_problem("easy-hard", "gelu", 2, "huber:1", 1.0, False, ridge=0.3)


def _gamma_flops(paths, T, m, t, block=8):
    """Executed flops of ``dmft.solve._gamma_row`` at step t (its chunking and padding)."""
    from dmft.solve import _gamma_chunking

    Tq, cs, nch = _gamma_chunking(paths, T + 1, m, block)
    nb = (t + block - 1) // block
    far = 2 * (cs * m) * (Tq * m) * (block * m)
    inner = block * (2 * cs * m * (block * m) * m + 2 * cs * m * m * m)
    return nch * nb * (far + inner)


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import dmft
    import spectral
    from dmft.solve import _gamma_row

    from .bench_lanczos import _network

    quick, full = mode == "quick", mode == "full"
    backend = "gpu" if jax.default_backend() != "cpu" else "cpu"   # jax names CUDA "gpu"; any accelerator here
    cpu = jax.devices("cpu")[0]
    kind = getattr(jax.devices()[0], "device_kind", "")
    nominal = nominal_limits(kind) if backend == "gpu" else None
    S = dict(backend=backend, device=str(jax.devices()[0]), device_kind=kind, host_cpu_count=os.cpu_count(),
             sweep=dict(points=64, deltas="linspace(1, 4, 64)", lr=1.0, steps=20 if quick else 80,
                        paths=512 if quick else 2048, key=0,
                        problem="easy-hard y = z1 + z2^2 - 1, GeLU, m=2, a=(1/2,1/2) frozen, Huber 1, ridge 0.3"),
             hvp=dict(d=1000 if quick else 4000, m=8, n=4000 if quick else 16000, reps=5),
             dmft_step=dict(paths=20_000 if quick else 100_000, T=60 if quick else 200, m=2, t="T/2", reps=3),
             nominal=nominal,
             limits=(f"nominal {nominal['model']} ({nominal['source']})" if nominal else
                     "measured references of this device" + (f" (no nominal limits for {kind!r})"
                                                             if backend == "gpu" else "")))
    perf, acc, data = [], [], {}

    # ---- (1) 64-point δ sweep: vmapped on the default device vs point by point on the host CPU ----
    def sweep():
        sw = S["sweep"]
        P = _sweep_problem()
        deltas = np.linspace(1.0, 4.0, sw["points"])
        kw = dict(lr=sw["lr"], steps=sw["steps"], paths=sw["paths"], key=jax.random.key(sw["key"]), throw=False)
        t0 = time.perf_counter()
        tr = dmft.solve_sweep(P, jnp.asarray(deltas), **kw)
        jax.block_until_ready(tr.train_error)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        tr = dmft.solve_sweep(P, jnp.asarray(deltas), **kw)
        jax.block_until_ready(tr.train_error)
        t_vm = time.perf_counter() - t0
        with jax.default_device(cpu):
            t0 = time.perf_counter()
            first = dmft.solve(P, delta=float(deltas[0]), **kw)
            jax.block_until_ready(first.train_error)
            t_loop_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            loop_final = [float(np.asarray(first.train_error)[-1])]
            for dv in deltas[1:]:
                loop_final.append(float(np.asarray(dmft.solve(P, delta=float(dv), **kw).train_error)[-1]))
            t_loop = (time.perf_counter() - t0) * len(deltas) / (len(deltas) - 1)
        vm_final = np.asarray(tr.train_error)[:, -1]
        # same numbers both ways (common random numbers; a device changes the rounding, not the law)
        diff = float(np.max(np.abs(vm_final - np.array(loop_final))))
        side = f"{backend}/cpu"
        perf.append(dict(what=f"64-point δ sweep (T={sw['steps']}, {sw['paths']} paths, m=2): host-CPU loop / vmapped on "
                              f"{backend} ({side})", value=t_vm, unit=f"s (vmapped, {backend})", ratio=t_loop / t_vm,
                         note=(f"ratio = CPU point-by-point / vmapped; loop {t_loop:.2f} s (63 timed solves scaled to 64, "
                               f"first solve incl. compile {t_loop_first:.1f} s); vmapped first call incl. compile "
                               f"{t_first:.1f} s; goal ≥ 20× on a GPU" + ("" if backend != "cpu" else
                                                                       "; CPU-only machine: same device both sides"))))
        acc.append(dict(quantity="64-point sweep: max |train error at T, vmapped − point by point| (same keys)",
                        theory=0.0, simulation=diff, sim_stderr=None, d="inf (DMFT)", seeds=1,
                        tolerance=1e-4, agree=bool(diff <= 1e-4),
                        note="rounding differs between batched and single solves (and devices) and is amplified by the "
                             "block-Cholesky recursion (dmft.solve.CHOL_JITTER): measured on the CPU 4e-9 at T=20 and "
                             "1.0e-5 at T=80; the tolerance is 100x below the Monte Carlo error (~1e-2 at 2048 paths)"))
        data["sweep"] = dict(deltas=deltas.tolist(), train_final_vmapped=vm_final.tolist(), train_final_loop=loop_final,
                             t_vmapped=t_vm, t_loop=t_loop)
        return t_loop / t_vm

    try:
        sweep_ratio = sweep()
    except Exception as exc:  # a one-shot device run keeps its rates; on the CPU a failure is a failure
        if backend == "cpu":
            raise
        sweep_ratio = None
        perf.append(dict(what="64-point δ sweep", value=None, unit="", ratio=None, note=f"failed: {exc!r}"[:400]))

    # ---- references measured on this device -------------------------------------------------
    ref = _references(big=full or backend != "cpu", reps=3)
    data["references"] = ref
    perf.append(dict(what=f"reference: fp64 GEMM {ref['gemm_n']}² on {backend}", value=ref["gemm_flops_per_s"] / 1e9,
                     unit="GFLOP/s", ratio=ref["gemm_flops_per_s"] / nominal["fp64_flops"] if nominal else None,
                     note=(f"ratio = / nominal {nominal['model']} fp64 {nominal['fp64_flops'] / 1e12:g} TFLOP/s"
                           if nominal else "measured peak of this device")))
    perf.append(dict(what=f"reference: read pass (fused sum) over {ref['stream_bytes'] / 2**30:.2f} GiB on "
                          f"{backend}", value=ref["stream_bytes_per_s"] / 1e9, unit="GB/s",
                     ratio=ref["stream_bytes_per_s"] / nominal["bandwidth_Bps"] if nominal else None,
                     note=(f"ratio = / nominal {nominal['model']} {nominal['bandwidth_Bps'] / 1e12:g} TB/s"
                           if nominal else "measured bandwidth of this device")))
    lim_f = nominal["fp64_flops"] if nominal else ref["gemm_flops_per_s"]
    lim_b = nominal["bandwidth_Bps"] if nominal else ref["stream_bytes_per_s"]
    lim = f"nominal {nominal['model']}" if nominal else "measured references"

    def rates(what, secs, flops, nbytes, note):
        fr, br = flops / secs, nbytes / secs
        perf.append(dict(what=f"{what}: achieved bandwidth", value=br / 1e9, unit="GB/s", ratio=br / lim_b,
                         note=f"ratio = / {lim} bandwidth; {nbytes / 1e6:.1f} MB in {secs * 1e3:.2f} ms; {note}"))
        perf.append(dict(what=f"{what}: achieved fp64 rate", value=fr / 1e9, unit="GFLOP/s", ratio=fr / lim_f,
                         note=f"ratio = / {lim} fp64 rate; {flops / 1e9:.3f} GFLOP; {note}"))
        return dict(seconds=secs, flops=flops, bytes=nbytes, flops_per_s=fr, bytes_per_s=br)

    # ---- (2a) HVP ------------------------------------------------------------------------------
    h = S["hvp"]
    prob, X, y, a, W = _network(h["d"], h["m"], h["n"], key=3)
    D = jax.jit(lambda X_, y_, W_: spectral.finite_blocks(prob, X_, y_, a, W_))(X, y, W)
    bm = jax.jit(lambda X_, D_, V_: spectral.block_matvec(X_, D_, prob.ridge)(V_))
    V = jax.random.normal(jax.random.key(9), W.shape)
    t_hvp, ts = _median_time(lambda: bm(X, D, V).block_until_ready(), h["reps"])
    data["hvp"] = rates(f"HVP d={h['d']}, m={h['m']}, n={h['n']}", t_hvp, 4 * h["n"] * h["d"] * h["m"],
                        16 * h["n"] * h["d"], f"median of {h['reps']}: {[round(x * 1e3, 2) for x in ts]} ms")

    # ---- (2b) DMFT data-side step -------------------------------------------------------------
    s = S["dmft_step"]
    Pn, T, m = s["paths"], s["T"], s["m"]
    t = T // 2
    rng = np.random.default_rng(0)
    Tp = T + 1
    G = jnp.asarray(rng.normal(size=(Pn, Tp, m, m)) * 0.3)
    R = jnp.asarray(np.tril(np.ones((Tp, Tp)))[..., None, None] * rng.normal(size=(Tp, Tp, m, m)) * 0.3)
    eta = jnp.full((Tp,), 0.1)

    # the data side's dominant work, O(paths·t·T·m³) per step: the Γ(t, ·) adjoint sweep of dmft.solve
    # (its memory field and C_g row are O(paths·T·m²) einsums, not timed)
    step = jax.jit(lambda G_, R_, eta_: _gamma_row(t, G_, R_, eta_, 2.0))
    t_step, ts = _median_time(lambda: jax.block_until_ready(step(G, R, eta)), s["reps"])
    data["dmft_step"] = rates(f"DMFT data-side step (Γ adjoint sweep) t={t} of T={T}, {Pn} paths, m={m}", t_step,
                              _gamma_flops(Pn, T, m, t), 8 * Pn * Tp * m * m,
                              f"median of {s['reps']}: {[round(x, 4) for x in ts]} s; flops as executed (padding incl.)")

    fig, ax = plt.subplots(figsize=(7, 3))
    names = ["HVP", "DMFT step"]
    fb = [data["hvp"]["bytes_per_s"], data["dmft_step"]["bytes_per_s"]]
    ff = [data["hvp"]["flops_per_s"], data["dmft_step"]["flops_per_s"]]
    xs = np.arange(2)
    ax.bar(xs - 0.2, np.array(fb) / lim_b, 0.4, label="bandwidth / limit")
    ax.bar(xs + 0.2, np.array(ff) / lim_f, 0.4, label="fp64 rate / limit")
    ax.set_xticks(xs, names)
    ax.set_ylabel(f"fraction of {lim} limit", fontsize=8)
    ax.set_title(f"{backend}: 64-point sweep loop/vmapped = " + (f"{sweep_ratio:.1f}×" if sweep_ratio else "failed"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    plt.close(fig)
    return dict(setting=S, accuracy=acc, performance=perf, data=data, figure=f"{NAME}.png")
