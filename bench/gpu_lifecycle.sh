#!/usr/bin/env bash
# The one prepared script for a borrowed machine with one GPU: the lifecycle benchmark on the
# trainer's CUDA path, its table written to "$OUT/lifecycle-gpu.txt".
#
#   bash bench/gpu_lifecycle.sh                 # on the GPU machine (OUT is set there)
#   DEVICE=cpu STAGES="env smoke" bash bench/gpu_lifecycle.sh   # a rehearsal on a CPU machine
#
# Why one script: the GPU machine is lent for minutes, has no network and no TorchRec, so
# everything it needs is prepared here and runs in one go, each stage under its own time limit,
# each stage's evidence kept even when an earlier one failed:
#   setup  install .whl/*.whl (fbgemm-gpu-cpu, torchrec and their pure dependencies) into
#          /tmp/site, unless torchrec already imports;
#   env    machine facts: GPU, torch/CUDA/NCCL/Triton, fbgemm and torchrec versions, the
#          inductor options each profile will use, and a one-rank "cpu:gloo,cuda:nccl" group
#          doing one all-reduce on each backend;
#   smoke  a short trainer run on the GPU (optimized profile, a crash at step 30 and a restart
#          from the step-20 checkpoint, compile caches kept, the model published out of band),
#          then its ETT report and a load of the published artifact;
#   bench  python -m bench.lifecycle --quick --device "$DEVICE": baseline vs optimized.
#
# What runs where (the hybrid design): only fbgemm-gpu-cpu can travel (the CUDA build is over
# 440 MiB), so the embedding tables are sharded by TorchRec's DMP on the CPU (gloo, fbgemm's CPU
# kernels) while the dense, interaction and over arches run on the GPU, compiled by inductor to
# Triton kernels; pooled embeddings are copied to the GPU before the interaction and their
# gradients flow back. The process group is "cpu:gloo,cuda:nccl". So the GPU-side lifecycle
# costs are real: NCCL start-up, Triton compilation and autotuning, and the compile caches
# (inductor's FX-graph/AOT caches and Triton's kernel cache, kept across restarts by the
# compile_cache switch).
#
# Files under $OUT (flat): summary.txt (each stage's exit status and seconds), env.txt,
# smoke.log, bench.log, lifecycle-gpu.txt (the benchmark's tables and JSON line),
# bench-baseline.log and bench-optimized.log (the trainer's own output of each run).
# Settings: DEVICE (auto|cuda|cpu; default auto), STAGES (default "env smoke bench"),
# TOTAL_LIMIT (540 s: the whole script; the bench gets what the earlier stages left, at least
# 60 s), SMOKE_TIMEOUT (150 s: on an H200 the first attempt's pruned autotune alone took 54 s),
# WORK (/tmp/gpu-lifecycle), PY (python3). Call it with the device's 600-s command limit.
set -u -o pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# Each run must own its compile caches: the benchmark's baseline starts from empty ones.
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR TORCH_COMPILE_JOB_ID

PY="${PY:-python3}"
DEVICE="${DEVICE:-auto}"
STAGES="${STAGES:-env smoke bench}"
TOTAL_LIMIT="${TOTAL_LIMIT:-540}"
SMOKE_TIMEOUT="${SMOKE_TIMEOUT:-150}"
WORK="${WORK:-/tmp/gpu-lifecycle}"
DEST="${OUT:-var/gpu-lifecycle}"
SITE=/tmp/site
mkdir -p "$DEST"
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY="$DEST/summary.txt"
: > "$SUMMARY"

note() { echo "[gpu_lifecycle $(date -u +%T)] $*" | tee -a "$SUMMARY" >&2; }

# Every process below a stage, depth first (the trainer starts its children in new sessions,
# so killing a process group would miss them).
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null || cat /proc/"$1"/task/*/children 2>/dev/null); do
    descendants "$child"
    echo "$child"
  done
}

stop_tree() {  # politely (SIGINT, as the supervisor expects), then firmly
  local pids
  pids="$(descendants "$1") $1"
  kill -INT $pids 2>/dev/null; sleep 5
  kill -TERM $pids 2>/dev/null; sleep 2
  kill -KILL $pids 2>/dev/null
}

# run_stage NAME LIMIT_S LOG COMMAND...: runs COMMAND with its output in LOG; on reaching the
# limit stops it and everything it started. Never fails the script: the status goes to
# summary.txt and the next stage runs regardless.
run_stage() {
  local name=$1 limit=$2 log=$3 started=$SECONDS pid rc
  shift 3
  "$@" > "$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS - started >= limit )); then
      echo "[gpu_lifecycle] $name: time limit of ${limit}s reached; stopping it" >> "$log"
      stop_tree "$pid"
      break
    fi
    sleep 1
  done
  wait "$pid"; rc=$?
  note "$name: exit $rc after $((SECONDS - started)) s (limit ${limit} s; log $(basename "$log"))"
  return 0
}

wants() { [[ " $STAGES " == *" $1 "* ]]; }

# --- setup -----------------------------------------------------------------------------------
started=$SECONDS
if "$PY" -c "import torchrec" 2>/dev/null; then
  note "setup: torchrec already importable; .whl not installed"
else
  rm -rf "$SITE"
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" .whl/*.whl >> "$SUMMARY" 2>&1; then
    # No pip: a wheel is a zip whose top level is the install layout (none here has .data).
    note "setup: pip install failed; unpacking the wheels instead"
    "$PY" - "$SITE" .whl/*.whl >> "$SUMMARY" 2>&1 <<'EOF' || note "setup: unpacking failed"
import sys, zipfile
for wheel in sys.argv[2:]:
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
EOF
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  note "setup: .whl -> $SITE in $((SECONDS - started)) s: $(ls .whl 2>/dev/null | tr '\n' ' ')"
fi

# --- env -------------------------------------------------------------------------------------
env_facts() {
  date -u +%FT%TZ
  uname -a
  nproc
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$PY" - <<'EOF'
import os, sys, time
print("python", sys.version.split()[0], sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
    print("nccl available", torch.distributed.is_nccl_available(),
          "version", ".".join(map(str, torch.cuda.nccl.version())))
try:
    import triton
    print("triton", triton.__version__)
except ImportError as exc:
    print("triton missing:", exc)
import fbgemm_gpu, torchrec, tensordict
print("fbgemm_gpu", getattr(fbgemm_gpu, "__version__", "?"), fbgemm_gpu.__file__)
print("fbgemm CPU op loaded:", hasattr(torch.ops.fbgemm, "asynchronous_complete_cumsum"))
print("torchrec", torchrec.__version__, torchrec.__file__)
print("tensordict", tensordict.__version__)
from trainer.config import resolve_device
from trainer.pt2 import inductor_options
device = resolve_device(os.environ["DEVICE"])
print("trainer device:", device)
for pruned in (False, True):
    print(f"inductor options ({'pruned' if pruned else 'baseline'}):",
          inductor_options(pruned, device))
if device == "cuda":
    import torch.distributed as dist
    began = time.monotonic()
    torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl", init_method="tcp://127.0.0.1:29599",
                            rank=0, world_size=1)
    on_gpu, on_cpu = torch.ones(4, device="cuda"), torch.ones(4)
    dist.all_reduce(on_gpu)
    dist.all_reduce(on_cpu)
    dist.barrier()
    torch.cuda.synchronize()
    print(f"cpu:gloo,cuda:nccl group: all-reduce on both backends ok in "
          f"{time.monotonic() - began:.2f} s")
    dist.destroy_process_group()
EOF
}
export DEVICE
wants env && run_stage env 90 "$DEST/env.txt" env_facts

# --- smoke -----------------------------------------------------------------------------------
smoke() {
  local dir="$WORK/smoke"
  "$PY" -m trainer --job gpu-smoke --device "$DEVICE" --steps 60 --batch-size 256 \
    --embedding-rows 5000 --embedding-dim 32 --checkpoint-every 20 --fail-at-step 30 \
    --restart-delay 0.5 --max-restarts 1 --eval-batches 2 --log-every 10 \
    --profile optimized --publish --spool-dir "$dir/spool" \
    --checkpoint-dir "$dir/checkpoints" --compile-cache-dir "$dir/compile-cache"
  local rc=$?
  echo "== trainer exit $rc; the ETT report of its spool and the published artifact:"
  "$PY" - "$dir" <<'EOF'
import glob, json, subprocess, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
artifact = folder / "checkpoints" / "published" / "step-00000060.pt2"
deadline = time.monotonic() + 60  # the out-of-band publisher may still be exporting
while not artifact.exists() and time.monotonic() < deadline:
    time.sleep(0.5)
time.sleep(0.5)
spool = sorted(glob.glob(str(folder / "spool" / "*.jsonl")))
report = json.loads(subprocess.run([sys.executable, "-m", "ettweb.attribution", *spool],
                                   check=True, capture_output=True, text=True).stdout)
for job in report["jobs"]:
    print({key: job[key] for key in ("job", "attempts", "ett_pct", "wall_s", "failures",
                                     "repeated_steps", "time_to_start_s", "time_to_recover_s",
                                     "lost_by_component_s")})
print("rejected events:", report["rejected"][:3])
import torch
program = torch.export.load(str(artifact))
logits = program.module()(torch.randn(8, 13), torch.randn(8, 26, 32))
print("published artifact loads and scores:", tuple(logits.shape), artifact.name)
EOF
}
wants smoke && run_stage smoke "$SMOKE_TIMEOUT" "$DEST/smoke.log" smoke

# --- bench -----------------------------------------------------------------------------------
if wants bench; then
  bench_limit=$(( TOTAL_LIMIT - SECONDS > 60 ? TOTAL_LIMIT - SECONDS : 60 ))
  run_stage bench "$bench_limit" "$DEST/bench.log" \
    "$PY" -m bench.lifecycle --quick --device "$DEVICE" --work-dir "$WORK/bench" \
    --out "$DEST/lifecycle-gpu.txt"
  for run in baseline optimized; do  # the trainer's own output, also when the bench failed
    [ -f "$WORK/bench/$run-1.log" ] && cp "$WORK/bench/$run-1.log" "$DEST/bench-$run.log"
  done
  [ -f "$DEST/lifecycle-gpu.txt" ] || note "bench: no table (see bench.log)"
fi

note "done in $SECONDS s; files in $DEST: $(ls "$DEST" | tr '\n' ' ')"
[ -f "$DEST/lifecycle-gpu.txt" ] && cat "$DEST/lifecycle-gpu.txt"
exit 0
