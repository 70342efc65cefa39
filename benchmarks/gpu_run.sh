#!/usr/bin/env bash
# One prepared device run (see DEVELOPERS.md): the --full benchmarks on the GPU machine,
# results written under $OUT (copied back to benchmarks/results/gpu/ and committed).
# Usage on the device machine: bash benchmarks/gpu_run.sh NAME [NAME ...]
# Plan for one device session (~15 min of device time in all, start-up included; the device tool lends
# an H100 (80 GB) by default, an H200 when named: bench_device picks the nominal limits of the model it
# finds (NOMINAL). The image has jax 0.11 + CUDA, equinox, optax, diffrax, optimistix, typer, scipy,
# matplotlib; matfree is optional):
#   1. `device`  (~1-2 min after start-up): 64-point δ sweep vmapped on the GPU against the same
#      sweep point by point on the host CPU (issue #4, goal >= 20x); achieved bandwidth and fp64 rate
#      of the HVP and of the DMFT data-side step against the GPU's nominal limits (issue #6, item 4).
#      Checked on the CPU first: benchmarks/results/device.json and quick/device.json.
#   2. `lanczos` (~1 min): Lanczos vs eigsh at d=4000, m=8, n=16000 (issue #3); gpu/lanczos.json dates
#      from before the Sturm-multisection Ritz values (dense eigh per check then: 2.1 s vs eigsh 0.23 s).
#   3. `stieltjes_grid` (CPU: 995 s, results/stieltjes_grid.json; GPU not yet measured): the
#      issue #3 Stieltjes size, 512 λ × m = 4 × 10^5 samples, one vmapped call, compile apart from run.
#   Then, with the time left, one run of `dmft_cost` or `success` (d = 4000 success curves, issue #4).
#   e.g. run(command="bash benchmarks/gpu_run.sh device lanczos stieltjes_grid", timeout_s=480)
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -c "import jax; print(jax.__version__, jax.devices())"
args=()
for n in "$@"; do args+=(--only "$n"); done
python3 -m benchmarks run --full --outdir "${OUT:-benchmarks/results/gpu}" "${args[@]}"
