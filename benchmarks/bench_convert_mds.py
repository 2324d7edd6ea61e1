"""Converting other loaders' datasets (issue 41): `chute convert mds` and `chute convert
litdata` throughput on real ImageNet JPEGs, against `chute convert imagefolder` of the same
files, one run, printed as a table with ratios.

    .venv/bin/python benchmarks/bench_convert_mds.py [--src DIR] [--images 1000] [--json FILE]

Input: --images JPEGs of --src (../shared/data/imagenet-sample/images, 500 files: they are
cycled to reach --images; each copy is a separate sample), written once, untimed, as
  mds         MosaicML Streaming MDSWriter, columns {"image": "jpeg", "label": "int"}, raw
              shards and zstd shards (64 MiB size limit, streaming's default);
  litdata     litdata BinaryWriter, {"image": JpegImageFile, "label": int}, uncompressed and
              zstd (litdata's default "batch" level), 64 MB chunks;
  folder      the JPEG files in one flat folder (the imagefolder baseline).
Timed: each convert into a new chute dataset (JPEG bytes stored as they are, headers parsed,
checksummed, written), one process, no progress bar; rate = images / wall seconds; ratio =
rate / the imagefolder convert's rate.

Needs mosaicml-streaming and litdata importable (pyproject.toml's `test-peers` extra, or
benchmarks/peer_streaming_env.sh's venv); where torchvision is absent the stand-in of
tests/convert/_peers.py lets streaming import. The data stays in ../shared/data: nothing is
copied into the repository (the datasets are written in a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _datasets import jpeg_files, machine_line

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = ROOT.parent / "shared/data/imagenet-sample/images"
sys.path.insert(0, str(ROOT))


def _files(src: Path, n: int) -> list[Path]:
    found = jpeg_files(src)
    return [found[i % len(found)] for i in range(n)]


def _write_mds(files: list[Path], out: Path, compression: str | None) -> None:
    from PIL import Image

    from tests.convert._peers import import_streaming

    streaming = import_streaming()
    with streaming.MDSWriter(out=str(out), columns={"image": "jpeg", "label": "int"},
                             compression=compression, size_limit=1 << 26) as writer:
        for i, path in enumerate(files):
            writer.write({"image": Image.open(path), "label": i})


def _write_litdata(files: list[Path], out: Path, compression: str | None) -> None:
    from litdata.streaming.writer import BinaryWriter
    from PIL import Image

    writer = BinaryWriter(str(out), chunk_bytes="64MB", compression=compression)
    for i, path in enumerate(files):
        # opened from its file: litdata stores the file's bytes, as MDSWriter does
        writer[i] = {"image": Image.open(path), "label": i}
    writer.done()
    writer.merge()


def _folder(files: list[Path], out: Path) -> None:
    out.mkdir()
    for i, path in enumerate(files):
        (out / f"{i:06d}.jpg").symlink_to(path.resolve())


def _timed(convert, src: Path, dst: Path) -> float:
    start = time.perf_counter()
    report = convert(src, dst)
    seconds = time.perf_counter() - start
    assert report.written > 0 and not report.skipped, report
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    if not args.src.is_dir():
        print(f"no images at {args.src} (see ../shared/data/README.md)", file=sys.stderr)
        return 1
    from chute.convert import ConvertOptions, convert_imagefolder, convert_litdata, convert_mds

    options = ConvertOptions(progress=False, workers=1, shard_size="256MiB")
    files = _files(args.src, args.images)
    payload = sum(p.stat().st_size for p in set(files)) * len(files) / len(set(files))
    tmp = Path(tempfile.mkdtemp(prefix="bench-convert-mds-"))
    try:
        sources = {
            "imagefolder (baseline)": (lambda d: _folder(files, d),
                                       lambda s, d: convert_imagefolder(s, d, options)),
            "mds raw": (lambda d: _write_mds(files, d, None),
                        lambda s, d: convert_mds(s, d, options)),
            "mds zstd": (lambda d: _write_mds(files, d, "zstd"),
                         lambda s, d: convert_mds(s, d, options)),
            "litdata raw": (lambda d: _write_litdata(files, d, None),
                            lambda s, d: convert_litdata(s, d, options)),
            "litdata zstd": (lambda d: _write_litdata(files, d, "zstd"),
                             lambda s, d: convert_litdata(s, d, options)),
        }
        rows = []
        for name, (write, convert) in sources.items():
            src = tmp / name.split()[0].replace("/", "_") / name.split()[-1].strip("()")
            src.parent.mkdir(parents=True, exist_ok=True)
            write(src)
            seconds = _timed(convert, src, tmp / f"{len(rows)}.chute")
            rows.append({"source": name, "images": len(files), "seconds": seconds,
                         "images_per_s": len(files) / seconds,
                         "MB_per_s": payload / seconds / 1e6})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]["images_per_s"]
    print(f"chute convert, {len(files)} ImageNet JPEGs ({payload / 1e6:.0f} MB), one process, "
          f"one run; {machine_line()}")
    print("| source | images/s | MB/s | vs imagefolder |")
    print("|---|---|---|---|")
    for row in rows:
        row["ratio"] = row["images_per_s"] / base
        print(f"| {row['source']} | {row['images_per_s']:.0f} | {row['MB_per_s']:.0f} | "
              f"{row['ratio']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
