#!/usr/bin/env bash
# The first run of chute on a GPU machine, in one command that fits a lent machine without
# network (docs/design.md, "Testing without a GPU"): the machine's python3 (CHUTE_PYTHON
# overrides) with `PYTHONPATH=.`, nothing installed. What its image lacks comes from the folder
# `./dev.sh gpu-bundle` prepares (CHUTE_GPU_BUNDLE, default .gpu-bundle/: nvImageCodec and
# nvJPEG for CUDA 13, tqdm, libturbojpeg, real JPEGs), which travels with the repository.
#
#   benchmarks/gpu_first_run.sh [JPEG_FOLDER]   (default: the bundle's JPEGs)
#
# Steps, each under a time limit (8 minutes in all at most): an environment report; every
# `gpu`-marked test (those of DALI skip where DALI is not installed); compute-sanitizer
# memcheck over the kernel tests and the nvimgcodec path; fidelity of the GPU backends against
# the cpu backend on the real JPEGs; bench_gpu.py (chute's backends, DALI's pipeline and
# torchvision's GPU decoder, as ratios), once with one crop and once with DINO's views. It prints one markdown table, nothing else; the logs
# stay in the folder its first row names.
#
# CHUTE_GPU_DRY_RUN=1 runs the same steps where there is no GPU, as far as they can run there:
# the same tests (the GPU ones skip), the sanitizer's selection without the sanitizer, fidelity
# and bench in CPU mode (the CPU twins). The test suite runs it so that this script never rots.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${CHUTE_PYTHON:-python3}
BUNDLE=$(realpath -m "${CHUTE_GPU_BUNDLE:-.gpu-bundle}")
DRY=${CHUTE_GPU_DRY_RUN:-0}
LOGS=$(mktemp -d -t chute-gpu-first-run.XXXXXX)
ROWS=()

row() { ROWS+=("| $1 | $2 | ${3//|/\\|} |"); }
# the last line of a log, for a detail cell
last_line() { tail -n 1 "$1" 2>/dev/null | tr -d '\r' | cut -c1-160; }

# `PYTHONPATH=.`, spelled absolute: processes the tests start elsewhere import chute too
export PYTHONPATH="$PWD"
if [ -d "$BUNDLE/site" ]; then PYTHONPATH="$PWD:$BUNDLE/site"; fi
TURBO="$BUNDLE/turbojpeg/usr/lib/x86_64-linux-gnu/libturbojpeg.so.0"
if [ -z "${CHUTE_TURBOJPEG:-}" ] && [ -e "$TURBO" ]; then export CHUTE_TURBOJPEG="$TURBO"; fi
if [ "$DRY" = 1 ]; then MODE="--cpu-mode"; else MODE=""; fi

row "run" "$([ "$DRY" = 1 ] && echo "dry run" || echo ok)" \
  "$(date -u +%FT%TZ) on $(hostname), logs in $LOGS, bundle $([ -d "$BUNDLE" ] && du -sh "$BUNDLE" | cut -f1 || echo missing)"

# 1. The environment: one row per piece (python prints "name<TAB>status<TAB>detail" lines).
timeout 30 "$PY" - >"$LOGS/env.tsv" 2>"$LOGS/env.log" <<'PY'
import importlib, os, shutil, sys

def show(name, status, detail):
    print(f"{name}\t{status}\t{detail}")

show("python", "ok", f"{sys.version.split()[0]} {sys.executable}")
try:
    import torch
    ok = torch.cuda.is_available()
    device = (f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}" if ok
              else "torch.cuda.is_available() is False")
    show("torch", "ok" if ok else "no GPU", f"{torch.__version__} (CUDA {torch.version.cuda}), {device}")
except Exception as exc:
    show("torch", "MISSING", exc)
for name, module in [("cupy", "cupy"), ("nvImageCodec", "nvidia.nvimgcodec"),
                     ("DALI", "nvidia.dali"), ("torchvision", "torchvision"),
                     ("pynvml", "pynvml")]:
    try:
        mod = importlib.import_module(module)
        where = os.path.dirname(list(getattr(mod, "__path__", [mod.__file__]))[0])
        show(name, "ok", f"{getattr(mod, '__version__', '')} in {where}".strip())
    except ImportError:
        show(name, "not installed", "-")
    except Exception as exc:
        show(name, "FAILED", str(exc).splitlines()[0][:120])
try:
    from chute.fallbacks._turbojpeg import turbojpeg_library
    show("libturbojpeg", "ok", turbojpeg_library())
except Exception as exc:
    show("libturbojpeg", "MISSING", str(exc).splitlines()[0][:120])
tool = shutil.which("compute-sanitizer") or next(
    (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
show("compute-sanitizer", "ok" if tool else "not found", tool or "-")
PY
status=$?
while IFS=$'\t' read -r name state detail; do row "$name" "$state" "$detail"; done <"$LOGS/env.tsv"
[ $status = 0 ] || row "environment report" "FAILED" "exit $status: $(last_line "$LOGS/env.log")"
SANITIZER=$(awk -F'\t' '$1 == "compute-sanitizer" && $2 == "ok" {print $3}' "$LOGS/env.tsv")

# pytest's summary line -> status: ok only when nothing failed and nothing errored
tests_status() {
  local summary=$1 rc=$2
  if [ "$rc" = 124 ]; then echo "TIMED OUT"
  elif [[ "$summary" == *failed* || "$summary" == *error* ]] || { [ "$rc" != 0 ] && [ "$rc" != 5 ]; }; then echo FAILED
  elif [ "$DRY" = 1 ]; then echo "dry run"
  else echo ok
  fi
}

# 2. Every gpu-marked test, in the modules that mark any (so that the other modules, some of
#    which need libraries the machine lacks, are not even imported); DALI's skip without DALI.
mapfile -t GPU_TESTS < <(grep -rlE "mark\.gpu" tests --include='test_*.py' | sort)
timeout 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu "${GPU_TESTS[@]}" \
  >"$LOGS/tests.log" 2>&1
rc=$?
row "pytest -m gpu (${#GPU_TESTS[@]} modules)" "$(tests_status "$(last_line "$LOGS/tests.log")" $rc)" \
  "$(last_line "$LOGS/tests.log")"

# 3. compute-sanitizer memcheck: the kernel tests (not the stream-ordering ones, whose large
#    matrix products are their delay), the views kernel and the nvimgcodec path.
MEMCHECK=(tests/gpu/test_kernels_gpu.py tests/gpu/test_producers_gpu.py tests/gpu/test_views_gpu.py
          -k "not stream_ordering and not another_stream and (not producers or nvimgcodec)")
if [ -n "$SANITIZER" ] && [ "$DRY" != 1 ]; then
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 "$SANITIZER" --tool memcheck \
    --error-exitcode 99 --target-processes all \
    "$PY" -m pytest -q -p no:cacheprovider -m gpu "${MEMCHECK[@]}" >"$LOGS/memcheck.log" 2>&1
  rc=$?
  errors=$(grep -c "^========= Invalid\|^========= Program hit" "$LOGS/memcheck.log" || true)
  # pytest's summary, not the log's last line: that is the sanitizer's "ERROR SUMMARY: 0 errors"
  summary=$(grep -E "[0-9]+ (passed|failed|skipped|deselected|errors?)" "$LOGS/memcheck.log" \
            | grep -v "^=========" | tail -n 1)
  status=$(tests_status "$summary" $rc)
  if [ "$errors" != 0 ] && [ "$status" = ok ]; then status=FAILED; fi
  row "compute-sanitizer memcheck" "$status" "exit $rc, $errors error reports; $summary"
else
  timeout 100 "$PY" -m pytest -q -p no:cacheprovider -m gpu "${MEMCHECK[@]}" \
    >"$LOGS/memcheck.log" 2>&1
  rc=$?
  why=$([ "$DRY" = 1 ] && echo "not run in a dry run" || echo "not found")
  row "memcheck's tests, no sanitizer" "$(tests_status "$(last_line "$LOGS/memcheck.log")" $rc)" \
    "compute-sanitizer $why; $(last_line "$LOGS/memcheck.log")"
fi

# 4 and 5 share the JPEGs: the argument, else the bundle's, else generated ones.
DATA=${1:-}
if [ -z "$DATA" ] && [ -d "$BUNDLE/jpegs" ]; then DATA="$BUNDLE/jpegs"; fi
if [ -z "$DATA" ]; then
  DATA="$LOGS/jpegs"
  timeout 60 "$PY" - "$DATA" >"$LOGS/jpegs.log" 2>&1 <<'PY'
import sys
from pathlib import Path

import numpy as np

from chute._sample_images import synthetic_jpeg

out = Path(sys.argv[1])
out.mkdir(parents=True)
rng = np.random.default_rng(0)
for i in range(64):
    h, w = (int(v) for v in rng.integers(300, 600, size=2))
    (out / f"{i:04d}.jpg").write_bytes(synthetic_jpeg(rng, h, w))
PY
  row "JPEGs" "generated" "64 synthetic JPEGs (no bundle): fidelity is not on real JPEGs"
fi

# a script's status when it wrote no rows: timed out, failed, or nothing to measure (no GPU)
no_rows() { case "$1" in 124) echo "TIMED OUT" ;; 0) echo skipped ;; *) echo FAILED ;; esac; }

# Python turns a JSON file of rows into table rows (name<TAB>status<TAB>detail).
json_rows() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys

kind, rows = sys.argv[1], json.load(open(sys.argv[2]))
for r in rows:
    if kind == "fidelity":
        name = f"fidelity {r['backend']} {r['augment']}"
        detail = (f"median MAE {r['median_mae']:.3f}, p99 {r['p99_mae']:.3f}, max "
                  f"{r['max_abs_diff']}, {r['images']} images"
                  + ("" if r["same_substitutes"] else ", substitutes differ")
                  if "median_mae" in r else "-")
        status = r["status"]
    else:
        name = f"bench {r['size']}: {r['contender']}"
        if r["img_s"] is None:
            status, detail = ("not installed" if r["status"].startswith("not installed")
                              else r["status"].split(":")[0]), r["status"]
        else:
            ratios = [f"{r['img_s']:.0f} img/s", f"{r['vs_chute_cpu']:.2f}x chute cpu"]
            if r["vs_torchvision"]:
                ratios.append(f"{r['vs_torchvision']:.2f}x torchvision")
            if r["gpu_utilisation"]:
                ratios.append(f"GPU {r['gpu_utilisation']}")
            status, detail = "ok", ", ".join(ratios)
    print(f"{name}\t{status}\t{detail}")
PY
}

# A Python step that writes its rows as JSON: its rows in the table, else one row saying why
# there are none.   json_step SECONDS NAME KIND TITLE SCRIPT ARGS...   (logs: NAME.log, .json)
json_step() {
  local limit=$1 name=$2 kind=$3 title=$4 rc
  shift 4
  timeout "$limit" "$PY" "$@" --json "$LOGS/$name.json" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ -f "$LOGS/$name.json" ]; then
    while IFS=$'\t' read -r step state detail; do row "$step" "$state" "$detail"; done \
      < <(json_rows "$kind" "$LOGS/$name.json")
  else
    row "$title" "$(no_rows $rc)" "exit $rc: $(last_line "$LOGS/$name.log")"
  fi
}

# 4. Fidelity of the GPU backends against the cpu backend on the real JPEGs.
# shellcheck disable=SC2086  # $MODE: one flag or none
json_step 50 fidelity fidelity "fidelity" benchmarks/gpu_fidelity.py "$DATA" $MODE

# 5. bench_gpu.py on the JPEGs, each repeated 8 times (a few batches per epoch).
mkdir -p "$LOGS/bench-jpegs"
for copy in 1 2 3 4 5 6 7 8; do
  for file in "$DATA"/*; do ln -s "$(realpath "$file")" "$LOGS/bench-jpegs/$copy-$(basename "$file")"; done
done
if [ "$DRY" = 1 ]; then BENCH=(--cpu-mode --batch-size 16 --batches 2 --warmup 1 --sizes 64)
else BENCH=(--batch-size 64 --batches 100 --warmup 5 --sizes 224 64)  # seconds, not ms: GPU %
fi
json_step 90 bench bench "bench_gpu.py" benchmarks/bench_gpu.py "$LOGS/bench-jpegs" "${BENCH[@]}"

# 6. The same with DINO multi-crop views (2 x 224 + 6 x 96 per image): chute's views= against
#    torchvision's GPU decode + 8 transforms per image.
if [ "$DRY" = 1 ]; then VIEWS=(--cpu-mode --batch-size 16 --batches 2 --warmup 1)
else VIEWS=(--batch-size 64 --batches 30 --warmup 3)
fi
json_step 60 views bench "bench_gpu.py --views" benchmarks/bench_gpu.py "$LOGS/bench-jpegs" \
  --views "${VIEWS[@]}"

echo "| step | status | detail |"
echo "|---|---|---|"
printf '%s\n' "${ROWS[@]}"
