#!/usr/bin/env bash
# bench.lifecycle on a machine with one GPU; writes its table to $OUT/lifecycle-gpu.txt
# (or ./var/lifecycle-gpu.txt when OUT is unset).
#
# Why a script: the device machine is borrowed for minutes, so every check it needs is
# prepared here and runs in one go: environment facts first (so a failure still says what the
# machine had), then the quick plan, then (with FULL=1) the default plan.
#
# Status: the trainer places the model on CPU with gloo today; its CUDA path (nccl,
# "cpu:gloo,cuda:nccl" for async checkpoints, GPU compile caches/mega-cache) is not wired
# yet, so on a GPU machine this measures the CPU path and says so in the output.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
DEST="${OUT:-var}"
mkdir -p "$DEST"
TABLE="$DEST/lifecycle-gpu.txt"

{
  echo "== machine"
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$PY" - <<'PY' 2>&1 || true
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(),
      "nccl:", torch.distributed.is_nccl_available())
try:
    import torchrec
    print("torchrec", torchrec.__version__)
except Exception as exc:  # the table still records why nothing ran
    print("torchrec missing:", exc)
PY
  echo "note: trainer runs its CPU/gloo path (GPU placement not wired yet)"
} > "$TABLE"

PLAN=(--quick)
[ "${FULL:-0}" = 1 ] && PLAN=()
"$PY" -m bench.lifecycle "${PLAN[@]}" --work-dir "${WORK_DIR:-/tmp/bench-lifecycle-gpu}" \
  --out "$DEST/lifecycle-gpu-tables.txt" >> "$TABLE" 2>&1 || echo "bench exited $?" >> "$TABLE"
cat "$TABLE"
