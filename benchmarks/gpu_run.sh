#!/usr/bin/env bash
# One prepared device run (see DEVELOPERS.md): the --full benchmarks on the GPU machine,
# results written under $OUT (copied back to benchmarks/results/gpu/ and committed).
# Usage on the device machine: bash benchmarks/gpu_run.sh NAME [NAME ...]
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -c "import jax; print(jax.__version__, jax.devices())"
args=()
for n in "$@"; do args+=(--only "$n"); done
python3 -m benchmarks run --full --outdir "${OUT:-benchmarks/results/gpu}" "${args[@]}"
