#!/usr/bin/env bash
# The first thing a session on a GPU machine runs: the GPU tests, compute-sanitizer (memcheck)
# over the DALI path, and bench_gpu.py; then one summary table. Nothing here needs editing.
#
#   benchmarks/gpu_first_run.sh [DATASET_OR_JPEG_FOLDER]   (default: a generated JPEG folder)
#
# Set-up (torch's CUDA build, chute[test,gpu]) is ./dev.sh's: it detects the driver itself.
set -uo pipefail
cd "$(dirname "$0")/.."

./dev.sh setup || { echo "[gpu_first_run] ./dev.sh setup failed" >&2; exit 1; }
VENV=${CHUTE_VENV:-.venv}
PY="$VENV/bin/python"
LOGS=$(mktemp -d -t chute-gpu-first-run.XXXXXX)
declare -a ROWS

row() { ROWS+=("$(printf '%-34s %-8s %s' "$1" "$2" "$3")"); }

# 1. Is there a GPU at all?
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  row "CUDA device" "MISSING" "torch.cuda.is_available() is False (CPU torch build or no driver)"
else
  row "CUDA device" "ok" "$("$PY" -c "import torch; print(torch.cuda.get_device_name(0), '| devices:', torch.cuda.device_count())")"
fi

# 2. The GPU tests (the kernel on the GPU, the DALI backends, the review's GPU cases).
"$PY" -m pytest -q -m gpu tests/gpu >"$LOGS/tests.log" 2>&1
status=$?
row "pytest -m gpu tests/gpu" "$([ $status = 0 ] && echo ok || echo FAILED)" "$(tail -n 1 "$LOGS/tests.log")"

# 3. compute-sanitizer memcheck over the DALI path (mixed decode -> chute's kernel).
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$SANITIZER" ]; then
  row "compute-sanitizer memcheck" "skipped" "compute-sanitizer not found (CUDA toolkit)"
else
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SANITIZER" --tool memcheck --error-exitcode 99 \
    --target-processes all "$PY" -m pytest -q -m gpu -x \
    "tests/gpu/test_dali_gpu.py::test_output_is_on_the_gpu_and_a_torch_tensor" \
    "tests/gpu/test_dali_gpu_path.py::test_border_pixels_match_the_cpu_backend[dali]" \
    "tests/gpu/test_dali_gpu_path.py::test_early_break_then_close_leaves_no_pending_work" \
    >"$LOGS/memcheck.log" 2>&1
  status=$?
  errors=$(grep -c "^========= Invalid\|^========= Program hit" "$LOGS/memcheck.log" || true)
  row "compute-sanitizer memcheck" "$([ $status = 0 ] && echo ok || echo FAILED)" "exit $status, $errors error reports"
fi

# 4. bench_gpu.py (numbers: one run, noisy if the machine is shared).
DATA=${1:-}
if [ -z "$DATA" ]; then
  DATA="$LOGS/jpegs"
  "$PY" - "$DATA" <<'PY'
import sys
from pathlib import Path

from chute._sample_images import synthetic_jpeg
import numpy as np

out = Path(sys.argv[1]); out.mkdir(parents=True)
rng = np.random.default_rng(0)
for i in range(512):
    h, w = (int(v) for v in rng.integers(300, 600, size=2))
    (out / f"{i:04d}.jpg").write_bytes(synthetic_jpeg(rng, h, w))
PY
fi
"$PY" benchmarks/bench_gpu.py "$DATA" --batches 20 >"$LOGS/bench.log" 2>&1
status=$?
row "bench_gpu.py $(basename "$DATA")" "$([ $status = 0 ] && echo ok || echo FAILED)" "table below"

echo
echo "chute GPU first run ($(date -u +%FT%TZ)), logs in $LOGS"
printf '%-34s %-8s %s\n' "step" "status" "detail"
printf '%s\n' "${ROWS[@]}"
echo
cat "$LOGS/bench.log"
