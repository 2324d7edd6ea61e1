#!/usr/bin/env bash
# A virtualenv for benchmarks/bench_remote.py's peer rows, MosaicML streaming and litdata
# (docs/benchmarks.md, "Object storage"), apart from the project's .venv: installing either
# with its dependencies would replace the project's torch (litdata 0.2.76's would bring torch
# 2.14.1, torchvision and the CUDA wheels; `pip install --dry-run litdata==0.2.76` lists them).
# This one reuses .venv's packages (torch, chute, moto, boto3, obstore, numpy, filelock,
# requests, lightning-utilities) through a .pth file and adds, without their dependencies,
# streaming and only what it imports: transformers (its dataloader imports two names from it)
# with the versions transformers 4.x checks at import, and the compression modules; and
# litdata, whose other dependencies are all in .venv but tifffile (imported only for TIFF
# files, not here).
#
# torchvision: streaming's package __init__ imports streaming.vision, which imports two
# torchvision names the benchmarked path (streaming.base) never uses (litdata imports none at
# import). The package mirror here only has CUDA torchvision builds, which do not load against
# the CPU torch reused from .venv, so this venv gets a small torchvision package defining those
# two names (they raise if used).
# Where a torchvision matching .venv's torch is available, install it instead.
#
#   benchmarks/peer_streaming_env.sh [/tmp/peervenv]
#   /tmp/peervenv/bin/python benchmarks/bench_remote.py --images 1000
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-/tmp/peervenv}"
site_main="$here/.venv/lib/python3.11/site-packages"
python3 -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import site; site.addsitedir('$site_main')" > "$site/zz_chute_venv.pth"
"$venv/bin/pip" install -q --no-deps mosaicml-streaming==0.13.0 transformers==4.57.6 \
    "huggingface_hub<1.0" tokenizers==0.22.1 safetensors catalogue zstd brotli python-snappy \
    cramjam litdata==0.2.76
if ! "$venv/bin/python" -c "import torchvision" 2>/dev/null; then
    mkdir -p "$site/torchvision/datasets" "$site/torchvision/transforms"
    cat > "$site/torchvision/__init__.py" <<'EOF'
"""Two names streaming.vision imports, for chute's benchmarks/peer_streaming_env.sh; not
torchvision (the package mirror had no build that loads against the CPU torch reused here)."""
EOF
    cat > "$site/torchvision/datasets/__init__.py" <<'EOF'
class VisionDataset:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("not torchvision: see chute's benchmarks/peer_streaming_env.sh")
EOF
    : > "$site/torchvision/transforms/__init__.py"
    cat > "$site/torchvision/transforms/functional.py" <<'EOF'
def to_tensor(*args, **kwargs):
    raise RuntimeError("not torchvision: see chute's benchmarks/peer_streaming_env.sh")
EOF
fi
"$venv/bin/python" -c "import litdata, streaming, torch; print('streaming', streaming.__version__, 'litdata', litdata.__version__, 'torch', torch.__version__)"
