#!/usr/bin/env bash
# The two commands of the README:
#   ./dev.sh demo   build a sample dataset, autotune, stream it through a Pipeline, print throughput
#   ./dev.sh test   ruff + mypy + the test suite (what .ci/run calls)
#                   mypy type-checks chute with pyproject.toml's [tool.mypy]: a type error fails it
# Both set up everything first on a fresh Linux machine: the system libjpeg-turbo, .venv,
# torch 2.13 (before anything that depends on torch), then chute with its test extras.
# On a machine with a working NVIDIA driver (nvidia-smi lists a GPU) that is torch's CUDA build
# and chute[test,gpu-cu12] or chute[test-cu13,gpu-cu13]: the CUDA major version of the torch
# already in .venv, else the newest the driver runs (CUDA 13 from driver 580 on); elsewhere the
# CPU build and chute[test]. CHUTE_DEVICE=cpu|gpu and CHUTE_CUDA=12|13 override the detection;
# `./dev.sh detect` prints what was chosen.
#   ./dev.sh gpu-bundle [DIR]   what a GPU machine without network needs beyond its image
#                   (default .gpu-bundle/, git-ignored): see gpu_bundle below
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

detect_cuda() {
  # The CUDA major version (12 or 13) of a GPU machine's wheels: that of the torch in $VENV
  # (everything must match its build), else the newest the driver runs (nvidia-smi's header
  # says "CUDA Version: 13.0" from driver 580 on), else 12.
  case "${CHUTE_CUDA:-}" in
    12|13) echo "$CHUTE_CUDA"; return 0 ;;
    "") ;;
    *) echo "[chute] error: CHUTE_CUDA must be 12 or 13, not '$CHUTE_CUDA'" >&2; exit 2 ;;
  esac
  local built="" header
  if [ -x "$VENV/bin/python" ]; then
    built=$("$VENV/bin/python" -c "import torch; print(torch.version.cuda or '')" 2>/dev/null || true)
  fi
  case "$built" in
    13.*) echo 13; return 0 ;;
    12.*) echo 12; return 0 ;;
  esac
  header=$(nvidia-smi 2>/dev/null || true)
  if [[ "$header" =~ CUDA\ Version:\ *([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 13 ]; then
    echo 13
  else
    echo 12
  fi
}

# The pip arguments of torch and of chute for a device ("cpu" or "gpu") and CUDA version.
torch_args() {
  if [ "$1" = gpu ]; then
    # The default torch wheel for Linux is a CUDA 12 build; CUDA 13 builds come from PyTorch's
    # cu130 index. CHUTE_TORCH_INDEX picks another index.
    local index=${CHUTE_TORCH_INDEX:-}
    if [ -z "$index" ] && [ "$2" = 13 ]; then index=https://download.pytorch.org/whl/cu130; fi
    echo "torch==2.13.0${index:+ --index-url $index}"
  else
    echo "torch==2.13.0"
  fi
}

chute_extras() {
  if [ "$1" != gpu ]; then echo ".[test]"
  elif [ "$2" = 13 ]; then echo ".[test-cu13,gpu-cu13]"
  else echo ".[test,gpu-cu12]"
  fi
}

gpu_bundle() {
  # What benchmarks/gpu_first_run.sh needs on a lent GPU machine (no network, Python 3.12,
  # torch for CUDA 13, CuPy) beyond its image: nvImageCodec for CUDA 13 and nvJPEG 13.3
  # (before 13.2 nvJPEG refuses ROI decodes of 4:2:0 JPEGs; 13.3 ran on the lent machines'
  # CUDA 13.0 driver) (their manylinux wheels, unpacked; nvImageCodec's Python bindings for 3.12 and for the Python
  # building the bundle, which the dry run uses; its nvJPEG and libjpeg-turbo extensions
  # only), tqdm (pure Python), libjpeg-turbo's TurboJPEG library (Debian's libturbojpeg0,
  # `dpkg -x`), a few real JPEGs, and the cpu backend's ROI decoder built here (native/, from
  # chute's cache) with the libjpeg it links (Debian's libjpeg62-turbo, `dpkg -x`), which
  # benchmarks/gpu_ceiling.py puts in place there (the lent machines have no libjpeg headers).
  # PyNvVideoCodec for the nvdec video backend (issue 40), trimmed to its Python 3.12 package (no FFmpeg
  # source, samples or benchmarks; one copy of each FFmpeg library, under its soname).
  # Under 64 MiB, so that it travels with the repository.
  local dest=${1:-.gpu-bundle} py=${PYTHON:-$VENV/bin/python}
  [ -x "$py" ] || py=python3
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
    echo "[chute] error: gpu-bundle needs apt-get and dpkg (Debian or Ubuntu) to fetch libturbojpeg0" >&2
    exit 1
  }
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # the folder of this call, expanded now
  trap "rm -rf '$tmp'" EXIT
  echo "[chute] downloading the wheels (Python 3.12, manylinux x86_64) into $tmp"
  "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp/wheels" \
    "nvidia-nvimgcodec-cu13==0.9.0.20" "nvidia-nvjpeg==13.3.2.43" "tqdm>=4.60" \
    "pynvvideocodec==2.2.4"
  (cd "$tmp" && apt-get download -q libturbojpeg0 libjpeg62-turbo >/dev/null 2>&1) || {
    echo "[chute] error: apt-get download libturbojpeg0 libjpeg62-turbo failed; run apt-get update and try again" >&2
    exit 1
  }
  # the ROI decoder, built here if it is not yet (needs gcc and libjpeg's headers: ./dev.sh setup)
  local roi
  roi=$("$py" -c "from chute.fallbacks import roi_decoder_status as s; print(s().library or '')" \
        2>/dev/null || true)
  rm -rf "$dest"
  mkdir -p "$dest/site" "$dest/turbojpeg" "$dest/jpegs" "$dest/native" "$dest/libjpeg"
  local wheel
  for wheel in "$tmp"/wheels/*.whl; do "$py" -m zipfile -e "$wheel" "$dest/site"; done
  dpkg -x "$tmp"/libturbojpeg0_*.deb "$dest/turbojpeg"
  dpkg -x "$tmp"/libjpeg62-turbo_*.deb "$dest/libjpeg"
  if [ -n "$roi" ] && [ -f "$roi" ]; then
    cp "$roi" "$dest/native/"
  else
    echo "[chute] warning: chute's ROI decoder could not be built here; the GPU machine's cpu backend will decode whole frames" >&2
  fi
  # what chute does not use: other Pythons' bindings, other codecs' extensions, headers, tools
  local keep
  keep=$("$py" -c "import sys; print(f'cpython-{sys.version_info[0]}{sys.version_info[1]}-')")
  find "$dest/site/nvidia/nvimgcodec" -name 'nvimgcodec_impl.cpython-*.so' \
    ! -name "*cpython-312-*" ! -name "*$keep*" -delete
  find "$dest/site/nvidia/nvimgcodec/extensions" -name '*.so*' \
    ! -name 'libnvjpeg_ext.*' ! -name 'libjpeg_turbo_ext.*' -delete
  rm -rf "$dest/site/nvidia/nvimgcodec/include" "$dest/site/nvidia/nvimgcodec/tools" \
    "$dest/site/nvidia/cu13/include" "$dest/turbojpeg/usr/share" "$dest/libjpeg/usr/share"
  rm -rf "$dest"/site/pynvvideocodec-*.data "$dest/site/samples" "$dest/site/benchmarks" \
    "$dest/site/PyNvVideoCodec/libavformat.so" "$dest"/site/PyNvVideoCodec/libavformat.so.*.* \
    "$dest/site/PyNvVideoCodec/libavutil.so" "$dest"/site/PyNvVideoCodec/libavutil.so.*.*
  local images=(../shared/data/imagenet-sample/images/*.JPEG)  # real JPEGs, where present
  if [ -f "${images[0]}" ]; then cp -t "$dest/jpegs" "${images[@]:0:48}"; fi
  # the video step's dataset and the cpu backend's reference clips (the GPU machine has no PyAV)
  "$py" benchmarks/gpu_video.py --prepare "$dest/video" >/dev/null
  local bytes
  bytes=$(du -sb "$dest" | cut -f1)
  if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
    echo "[chute] error: $dest holds $bytes bytes, more than the 64 MiB that travel" >&2
    exit 1
  fi
  echo "[chute] $dest: $((bytes / 1024 / 1024)) MiB ($(find "$dest/jpegs" -type f | wc -l) JPEGs)."
  echo "        On the GPU machine: CHUTE_GPU_BUNDLE=$dest benchmarks/gpu_first_run.sh"
  echo "        and CHUTE_GPU_BUNDLE=$dest python3 benchmarks/gpu_ceiling.py (issue 36)"
}

install_peers() {
  # tests/convert/test_convert_{mds,litdata}.py write datasets with the real MosaicML Streaming
  # and litdata writers (pyproject.toml, extra test-peers). Their dependencies would move torch
  # and numpy (streaming pins numpy<2.2), so they come without them, plus the few light modules
  # their writers and readers import, with torch and numpy held where they are.
  local pip="$1" held
  held=$(mktemp)
  "$VENV/bin/python" -m pip freeze 2>/dev/null | grep -E '^(torch|numpy)==' > "$held" || true
  $pip install --no-deps "mosaicml-streaming==0.13.0" "litdata==0.2.76"
  $pip install -c "$held" "transformers==5.24.0" "zstd==1.5.7.2" "python-snappy==0.7.3" \
    "Brotli==1.2.1" "catalogue==2.0.10" "tifffile==2026.3.3" "lightning-utilities==0.15.3"
  rm -f "$held"
}

install_emulators() {
  # The storage contract test runs az:// against Azurite (npm package azurite, docs/storage.md,
  # "Schemes"), installed outside .venv where the tests look for it. Without Node.js and npm,
  # or when npm fails, that run is skipped with the reason: a warning here, not an error.
  local prefix="${CHUTE_EMULATORS:-$HOME/.cache/chute-emulators}/azurite"
  [ -x "$prefix/node_modules/.bin/azurite-blob" ] && return 0
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "[chute] warning: no Node.js/npm: the az:// storage tests will be skipped (apt-get install nodejs npm)" >&2
    return 0
  fi
  echo "[chute] installing Azurite (Azure Storage emulator, for the az:// tests) into $prefix"
  mkdir -p "$prefix"
  npm install --no-audit --no-fund --silent --prefix "$prefix" azurite@3 >/dev/null ||
    echo "[chute] warning: npm install azurite@3 failed: the az:// storage tests will be skipped" >&2
}

setup() {
  need_turbojpeg
  need_jpeg_headers
  install_emulators
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[chute] creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  local pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
  # Skip the install when nothing changed since the last successful one.
  local stamp="$VENV/.chute-installed" want device cuda=""
  device=$(detect_device)
  [ "$device" = gpu ] && cuda=$(detect_cuda)
  want="$device$cuda-$(cat pyproject.toml | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  echo "[chute] installing $(torch_args "$device" "$cuda") and chute$(chute_extras "$device" "$cuda" | cut -c2-) into $VENV ($device machine${cuda:+, CUDA $cuda})"
  $pip install --upgrade pip >/dev/null
  # shellcheck disable=SC2046  # torch_args holds several words on purpose
  $pip install $(torch_args "$device" "$cuda")
  $pip install -e "$(chute_extras "$device" "$cuda")"
  install_peers "$pip"
  echo "$want" > "$stamp"
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    setup >&2  # its messages on stderr: `./dev.sh demo --json` prints only the JSON on stdout
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
    cuda=""
    [ "$device" = gpu ] && cuda=$(detect_cuda)
    echo "device=$device${cuda:+ cuda=$cuda} torch=\"$(torch_args "$device" "$cuda")\" extras=$(chute_extras "$device" "$cuda")"
    ;;
  gpu-bundle)
    gpu_bundle "$@"
    ;;
  *)
    echo "usage: ./dev.sh demo [chute demo options] | ./dev.sh test [pytest options] | ./dev.sh setup | ./dev.sh detect | ./dev.sh gpu-bundle [DIR]" >&2
    exit 2
    ;;
esac
