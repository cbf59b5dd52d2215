#!/usr/bin/env bash
# The device check of the CUDA executor (issue 14, item 5), for a GPU machine without internet where PyTorch (a
# CUDA build, possibly older than ours: 2.11+cu130 in /opt/torch/.venv), NVRTC, nanobind and scikit-build-core
# are installed. It installs nothing from the network. Steps, each with its own time limit (about 7 minutes in
# all on one H200):
#   1. build the core against the machine's torch (pip --no-deps --no-index --no-build-isolation, editable)
#   2. the compile check on the device's NVRTC (every fused pattern, sm_90 CUBIN, registers and spills)
#   3. the GPU test subset: tests/test_cuda_executor.py (OpInfo forward samples of the fusible ops with the cuda
#      executor forced, the fused patterns, bf16 training, HF GPT-2/Llama forward and backward against eager)
#   4. the benchmark suite on CUDA: eager, Inductor, thunder (the quick set first, then the kernels)
# Logs and JSON land in $OUT (default ./gpu-check-out); the summary is $OUT/summary.txt. Exit status: 0 if every
# step passed. Record the figures in docs/benchmarks.md with the date, the device and the commit.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x /opt/torch/.venv/bin/python ]; then PY=/opt/torch/.venv/bin/python; else PY=python3; fi
fi
export THUNDER_CACHE_DIR="$OUT/kernel-cache"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
status=0
started=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: runs it with a time limit, its output in $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local line="$name: rc=$rc, $(( $(date +%s) - t0 )) s"
  [ $rc -eq 124 ] && line="$line (timed out after $limit s)"
  echo "$line" | tee -a "$SUMMARY"
  [ $rc -ne 0 ] && status=1
  return $rc
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "python: $PY"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1 | sed 's/^/device: /'
  "$PY" -c "import torch; print('torch:', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1
} | tee -a "$SUMMARY"

# NVRTC: the wheel torch's CUDA build depends on, else the toolkit's.
if ! "$PY" -c "from thunder.executors.cudaex import nvrtc_library; import sys; sys.exit(nvrtc_library() is None)" 2>/dev/null; then
  for lib in "$("$PY" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)"/nvidia/cu13/lib/libnvrtc.so.13 \
             /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda-13*/lib64/libnvrtc.so.13; do
    if [ -e "$lib" ]; then export THUNDER_NVRTC_LIBRARY=$lib; break; fi
  done
fi
echo "nvrtc: ${THUNDER_NVRTC_LIBRARY:-(the nvidia-cuda-nvrtc wheel)}" | tee -a "$SUMMARY"

# 1. Build against the machine's torch (pyproject pins torch 2.13; --no-deps keeps the installed one).
step build 240 "$PY" -m pip install -v --no-deps --no-index --no-build-isolation -e . || {
  echo "build failed: see $OUT/build.log" | tee -a "$SUMMARY"; exit 1; }
"$PY" -c "import thunder, torch; print('thunder imports; default executors:', [e.name for e in thunder.executors.default_executors()])" \
  2>&1 | tee -a "$SUMMARY"

# 2. The compile check with the device's NVRTC.
step compile_check 90 "$PY" -m thunder.executors.cuda --compile-check --arch sm_90 --quick --json "$OUT/compile_check.json"
tail -n 6 "$OUT/compile_check.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 3. The GPU test subset (-x off: every failure is reported; JUnit XML for the record).
step gpu_tests 240 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda_executor.py tests/test_cuda_compile.py \
  --junitxml="$OUT/gpu_tests.xml"
tail -n 3 "$OUT/gpu_tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 4. The benchmark suite on CUDA: eager, Inductor, thunder[cuda]. The quick set, then every kernel workload,
#    as far as the remaining time allows (the whole check stays under 8 minutes).
left=$(( 460 - ($(date +%s) - started) ))
if [ $left -gt 60 ]; then
  step benchmarks $left "$PY" -m thunder.benchmarks --device cuda --no-lightning --contenders 'inductor|thunder\[cuda\]' \
    --only 'kernel/|model/' --quick --json "$OUT/benchmarks.json" --markdown "$OUT/benchmarks.md"
  tail -n 40 "$OUT/benchmarks.md" 2>/dev/null | sed 's/^/  /' >> "$SUMMARY"
else
  echo "benchmarks: skipped (${left}s left of the 8-minute budget)" | tee -a "$SUMMARY"
  status=1
fi

echo "total: $(( $(date +%s) - started )) s, status $status" | tee -a "$SUMMARY"
exit $status
