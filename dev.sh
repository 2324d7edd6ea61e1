#!/usr/bin/env bash
# The two commands of the README:
#   ./dev.sh demo   build a sample dataset, autotune, stream it through a Pipeline, print throughput
#   ./dev.sh test   ruff + mypy + the test suite (what .ci/run calls)
#                   mypy type-checks chute with pyproject.toml's [tool.mypy]: a type error fails it
# Both set up everything first on a fresh Linux machine: the system libjpeg-turbo, .venv,
# torch 2.13 (before anything that depends on torch), then chute with its test extras.
# On a machine with a working NVIDIA driver (nvidia-smi lists a GPU) that is torch's CUDA build
# and chute[test,gpu]; elsewhere the CPU build and chute[test]. CHUTE_DEVICE=cpu|gpu overrides
# the detection; `./dev.sh detect` prints what was chosen.
set -euo pipefail
cd "$(dirname "$0")"

VENV=${CHUTE_VENV:-.venv}
PY=${PYTHON:-python3}

need_turbojpeg() {
  # ldconfig knows the library when the Debian package (or any system install) is present.
  # (Captured first: with pipefail, `ldconfig -p | grep -q` fails when grep exits early.)
  local known
  known=$(/sbin/ldconfig -p 2>/dev/null || true)
  if [[ "$known" == *libturbojpeg.so.0* ]]; then return 0; fi
  if [ -n "${CHUTE_TURBOJPEG:-}" ] && [ -f "$CHUTE_TURBOJPEG" ]; then return 0; fi
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "[chute] installing libturbojpeg0 (libjpeg-turbo's TurboJPEG library) with apt-get"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libturbojpeg0 >/dev/null
    return 0
  fi
  echo "[chute] error: libturbojpeg.so.0 (libjpeg-turbo >= 2.0) was not found and apt-get is not" >&2
  echo "        available. Install libjpeg-turbo with your package manager, or set" >&2
  echo "        CHUTE_TURBOJPEG=/path/to/libturbojpeg.so.0, then run this command again." >&2
  exit 1
}

need_jpeg_headers() {
  # chute builds its ROI JPEG decoder (a small C file) on first use: a C compiler and the
  # libjpeg headers of libjpeg-turbo must be present. Without them chute decodes whole frames.
  if printf '#include <stdio.h>\n#include <jpeglib.h>\n' | cc -E - >/dev/null 2>&1; then
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "[chute] installing gcc and libjpeg-dev (to build chute's ROI JPEG decoder) with apt-get"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libjpeg-dev >/dev/null
    return 0
  fi
  echo "[chute] warning: no C compiler with libjpeg headers; chute will decode whole JPEG frames" >&2
  echo "        (slower). Install gcc and libjpeg-turbo's development headers to enable ROI decoding." >&2
}

detect_device() {
  # nvidia-smi comes with the driver; it lists "GPU 0: ..." only when the driver is loaded.
  case "${CHUTE_DEVICE:-}" in
    cpu|gpu) echo "$CHUTE_DEVICE"; return 0 ;;
    "") ;;
    *) echo "[chute] error: CHUTE_DEVICE must be cpu or gpu, not '$CHUTE_DEVICE'" >&2; exit 2 ;;
  esac
  local listed
  listed=$(nvidia-smi -L 2>/dev/null || true)
  if [[ "$listed" == GPU\ * ]]; then echo gpu; else echo cpu; fi
}

# The pip arguments of torch and of chute for a device ("cpu" or "gpu").
torch_args() {
  if [ "$1" = gpu ]; then
    # The default torch wheel for Linux is the CUDA build; CHUTE_TORCH_INDEX picks another index.
    echo "torch==2.13.0${CHUTE_TORCH_INDEX:+ --index-url $CHUTE_TORCH_INDEX}"
  else
    echo "torch==2.13.0"
  fi
}

chute_extras() {
  if [ "$1" = gpu ]; then echo ".[test,gpu]"; else echo ".[test]"; fi
}

setup() {
  need_turbojpeg
  need_jpeg_headers
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[chute] creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  local pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
  # Skip the install when nothing changed since the last successful one.
  local stamp="$VENV/.chute-installed" want device
  device=$(detect_device)
  want="$device-$(cat pyproject.toml | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  echo "[chute] installing $(torch_args "$device") and chute$(chute_extras "$device" | cut -c2-) into $VENV ($device machine)"
  $pip install --upgrade pip >/dev/null
  # shellcheck disable=SC2046  # torch_args holds several words on purpose
  $pip install $(torch_args "$device")
  $pip install -e "$(chute_extras "$device")"
  echo "$want" > "$stamp"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    setup
    exec "$VENV/bin/chute" demo "$@"
    ;;
  test)
    setup
    "$VENV/bin/ruff" check chute tests benchmarks examples
    "$VENV/bin/python" -m mypy
    "$VENV/bin/python" -m pytest -q "$@"
    ;;
  setup)
    setup
    ;;
  detect)
    device=$(detect_device)
    echo "device=$device torch=\"$(torch_args "$device")\" extras=$(chute_extras "$device")"
    ;;
  *)
    echo "usage: ./dev.sh demo [chute demo options] | ./dev.sh test [pytest options] | ./dev.sh setup | ./dev.sh detect" >&2
    exit 2
    ;;
esac
