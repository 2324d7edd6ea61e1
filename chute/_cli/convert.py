"""`chute convert imagefolder|csv|webdataset|hf|mds|litdata|ffcv|video|audio|zarr ...`: build a
chute dataset from image files, other loaders' datasets, videos, audio or a zarr group."""

from __future__ import annotations

import argparse
import sys

from chute._cli import convert_audio
from chute._cli._args import jpeg_quality, positive
from chute._cli._engine import add_engine_args, engine_of
from chute._cli._output import add_json_flag, print_json
from chute.convert import TRANSCODE_QUALITY, WEBDATASET_MAX_MEMBER
from chute.errors import ChuteError
from chute.readers import parse_size


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dst", metavar="DST", help="new dataset folder (e.g. train.chute)")
    parser.add_argument("--shard-size", type=_size, default="1GiB", metavar="SIZE",
                        help="payload bytes per shard, e.g. 1GiB, 512MiB, 64MB (default 1GiB)")
    parser.add_argument("--workers", type=positive(int), default=None,
                        metavar="N", help="reader/check processes (default: CPU count)")
    parser.add_argument("--max-side", type=positive(int), metavar="N",
                        help="downscale images whose longer side exceeds N and re-encode them "
                             "as JPEG (default: JPEG bytes are stored unchanged)")
    parser.add_argument("--quality", type=jpeg_quality, default=TRANSCODE_QUALITY, metavar="Q",
                        help="JPEG quality for transcoded/downscaled images, stored without "
                             f"chroma subsampling (default {TRANSCODE_QUALITY})")
    parser.add_argument("--strict", action="store_true",
                        help="fail on the first unreadable or truncated image instead of "
                             "skipping it")
    parser.add_argument("--report", metavar="FILE",
                        help="where to list skipped images (default DST/skipped.tsv)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace DST if it already holds a chute dataset")
    parser.add_argument("--max-skipped", type=_ratio, default=0.01, metavar="RATIO",
                        help="warn loudly when more than this fraction of the images is "
                             "skipped (default 0.01); a convert that stores nothing fails")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(parser)
    add_engine_args(parser)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}")
    return value


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "convert", help="convert images, other loaders' datasets (MDS, litdata), videos, audio "
        "or a zarr group to a chute dataset",
        description="Convert images (a folder, a CSV, WebDataset shards, a Hugging Face "
        "dataset), MosaicML Streaming (MDS) and litdata datasets, videos, audio recordings or a "
        "zarr group to a chute v1 dataset. JPEG files are stored byte for byte (height/width "
        "read from their headers), other image formats are transcoded to JPEG; video and audio "
        "files are stored as they are. Unreadable or truncated files are skipped and listed "
        "in a report.")
    kinds = parser.add_subparsers(dest="source_kind", metavar="SOURCE", required=True)
    folder = kinds.add_parser(
        "imagefolder", help="SRC/<class>/<image> folders -> integer labels + class names",
        description="Each sub-folder of SRC is a class (labels = sorted folder index, names in "
        "the manifest's class_names). meta['key'] is the image path relative to SRC.")
    folder.add_argument("src", metavar="SRC", help="folder with one sub-folder per class")
    _common(folder)
    table = kinds.add_parser(
        "csv", help="CSV with columns path, optional label, text, ...",
        description="Rows of FILE: `path` (relative paths are resolved against --root, "
        "default the folder holding the CSV, not the current directory), "
        "optional `label` (integers, or names mapped to sorted class indices), and any other "
        "columns (e.g. `text`) stored as metadata. meta['key'] is the `path` value.")
    table.add_argument("src", metavar="FILE", help="CSV file with a header row")
    table.add_argument("--root", metavar="DIR", help="folder the relative paths are resolved "
                       "against (default: the CSV's folder)")
    _common(table)
    web = kinds.add_parser(
        "webdataset", help="WebDataset .tar shards (KEY.jpg, KEY.cls, KEY.json, KEY.txt)",
        description="Read WebDataset tar shards with the standard library: each sample's image "
        "member (jpg/png/webp), optional integer label (.cls) and metadata (.json entries, .txt "
        "as 'text'; meta['key'] is the sample key). JPEG bytes are stored unchanged, other "
        "formats transcoded (--max-side downscales); a sample that cannot be stored "
        "(unreadable or truncated image, no image, a member over --max-member) is skipped and "
        "listed as TAR:KEY in the report (--workers does not apply).")
    web.add_argument("src", metavar="TAR", nargs="+", help="shard files, in order")
    web.add_argument("--max-member", type=_size, default=WEBDATASET_MAX_MEMBER, metavar="SIZE",
                     help="largest tar member read (a member is read whole into memory); the "
                          f"sample of a larger one is skipped (default {WEBDATASET_MAX_MEMBER})")
    _common(web)
    hf = kinds.add_parser(
        "hf", help="a Hugging Face `datasets` dataset (needs `pip install datasets`)",
        description="Load NAME with datasets.load_dataset(NAME, split=SPLIT) (or load_from_disk "
        "for a saved folder) and store its image column, its label column and every other "
        "column as metadata (--workers, --max-side, --strict and --report do not apply).")
    hf.add_argument("src", metavar="NAME", help="hub name or a folder saved by save_to_disk")
    hf.add_argument("--split", default=None,
                    help="(default: train; a saved dataset without splits takes none)")
    hf.add_argument("--image-column", default="image", help="(default: image)")
    hf.add_argument("--label-column", default="label", help="(default: label)")
    _common(hf)
    _add_peers(kinds)
    _add_video(kinds)
    convert_audio.add_parser(kinds, _size)
    _add_zarr(kinds)
    parser.set_defaults(func=run)


def _mapping(table: dict[str, str]) -> str:
    return "; ".join(f"{source} -> {chute}" for source, chute in table.items())


def _add_peers(kinds) -> None:
    """`chute convert mds` and `chute convert litdata`: other loaders' datasets, read by their
    documented layout (chute/convert/_mds.py, _litdata.py)."""
    from chute.convert import LITDATA_MAPPING, MDS_MAPPING

    _add_peer(
        kinds, "mds", "a MosaicML Streaming (MDS) dataset: index.json + shards",
        "a column not to convert (repeatable)",
        "Read a MosaicML Streaming dataset (MDSWriter output: index.json and raw "
        "or compressed shards, e.g. shard.00000.mds.zstd) by its documented layout "
        "(mosaicml-streaming is not needed) and store every column as a field of the same "
        "name, samples in order. Column encodings: " + _mapping(MDS_MAPPING) + ". A column "
        "that maps to no chute kind stops the convert, named in one line: --drop it. An "
        "unreadable image skips its sample (listed in the report; --strict: stop).")
    _add_peer(
        kinds, "litdata", "a litdata optimized dataset: index.json + chunk-*.bin",
        "a column (leaf) not to convert (repeatable)",
        "Read a litdata dataset (litdata.optimize / BinaryWriter output: "
        "index.json and chunk files, uncompressed or zstd) by its on-disk layout and store "
        "every leaf of a sample as a field named by its path ('image', 'meta.a'), samples in "
        "order. Leaf formats: " + _mapping(LITDATA_MAPPING) + ". litdata's binary-encoded "
        "json leaves need `pip install litdata`; nothing else does. A leaf that maps to no "
        "chute kind stops the convert, named in one line: --drop it.")
    _add_ffcv(kinds)


def _add_peer(kinds, name: str, summary: str, drop_help: str, description: str) -> None:
    """One peer format's subcommand: SRC (a folder with index.json, or a URL), --drop."""
    parser = kinds.add_parser(name, help=summary, description=description)
    parser.add_argument("src", metavar="SRC",
                        help="folder holding index.json, or an s3://, gs:// or az:// prefix")
    parser.add_argument("--drop", action="append", default=[], metavar="COLUMN",
                        help=drop_help)
    _common(parser)


def _add_ffcv(kinds) -> None:
    """`chute convert ffcv`: an FFCV .beton file, read by its layout (_ffcv.py)."""
    from chute.convert import FFCV_MAPPING

    ffcv = kinds.add_parser(
        "ffcv", help="an FFCV dataset: one .beton file",
        description="Read an FFCV .beton file (DatasetWriter output) by its file layout (ffcv "
        "is not needed) and store every field as a field of the same name, samples in order. "
        "Fields: " + _mapping(FFCV_MAPPING) + ". Every offset and size in the file is checked "
        "first: a truncated or corrupt file stops the convert in one line, before anything "
        "is written. An unreadable JPEG skips its sample (listed in the report; --strict: "
        "stop).")
    ffcv.add_argument("src", metavar="FILE", help="the .beton file")
    ffcv.add_argument("--drop", action="append", default=[], metavar="FIELD",
                      help="a field not to convert (repeatable)")
    _common(ffcv)


def _add_zarr(kinds) -> None:
    zarr = kinds.add_parser(
        "zarr", help="zarr group of per-sample arrays and tables -> ndarray fields + tables",
        description="Arrays of SRC (subgroups included: 'latents/base_frames' becomes field "
        "'latents.base_frames') whose first dimension is the sample count become ndarray "
        "fields (1-D ones scalar columns); the others are tables stored once, delivered "
        "through an index field: Pipeline(..., fields={TABLE: Lookup(INDEX)}). Group "
        "attributes and the values of 0-d arrays (constants) are kept in the manifest.")
    zarr.add_argument("src", metavar="SRC", help="zarr group folder (v2 or v3), e.g. x.zarr")
    zarr.add_argument("dst", metavar="DST", help="new dataset folder (e.g. latents.chute)")
    zarr.add_argument("--shard-size", type=_size, default="1GiB", metavar="SIZE",
                      help="payload bytes per shard (default 1GiB)")
    zarr.add_argument("--compression", choices=("none", "zstd"), default="none",
                      help="compress each sample of the ndarray fields (default none)")
    zarr.add_argument("--overwrite", action="store_true",
                      help="replace DST if it already holds a chute dataset")
    zarr.add_argument("--sample-array", default=None, metavar="ARRAY",
                      help="the array whose rows are the samples (e.g. latents/base_frames); "
                      "needed when the arrays' first dimensions differ")
    zarr.add_argument("--missing-chunks", choices=("error", "fill"), default="error",
                      help="an absent chunk file: stop and name it (default), or read zarr's "
                      "fill value (arrays written sparse on purpose)")
    add_json_flag(zarr)
    add_engine_args(zarr)
    zarr.set_defaults(func=_run_zarr)


def _run_zarr(args) -> int:
    from chute.convert import convert_zarr
    from chute.readers import open_dataset

    n = convert_zarr(args.src, args.dst, shard_size=args.shard_size, overwrite=args.overwrite,
                     compression=None if args.compression == "none" else args.compression,
                     sample_array=args.sample_array, missing_chunks=args.missing_chunks,
                     engine=engine_of(args))
    kept = getattr(open_dataset(args.dst), "manifest", {}).get("zarr", {})
    arrays, constants = kept.get("arrays", {}), kept.get("constants", {})
    if args.json:
        print_json({"path": str(args.dst), "written": n, "fields": dict(arrays),
                    "constants": dict(constants)})
        return 0
    for field, array in arrays.items():
        if field != array:
            print(f"array {array} -> field {field}")
    for name, constant in constants.items():
        print(f"0-d array {name} -> manifest constant ({constant['dtype']} {constant['value']})")
    print(f"wrote {n} samples to {args.dst}")
    return 0


def _add_video(kinds) -> None:
    video = kinds.add_parser(
        "video", help="CSV of video paths (+ text, ...) -> container bytes + probed columns",
        description="Rows of FILE: `path` (relative to --root, default the CSV's folder), "
        "`text` and any other columns (stored as metadata). Containers (mp4, mkv, webm, avi, "
        "mov, ...) are stored byte for byte, never re-encoded, with probed num_frames, fps, "
        "height/width (rotation applied), duration and every frame's timestamp for seeking. "
        "Unreadable, truncated, audio-only or frameless files are skipped and listed.")
    video.add_argument("src", metavar="FILE", help="CSV file with a header row")
    video.add_argument("dst", metavar="DST", help="new dataset folder")
    video.add_argument("--root", metavar="DIR", help="folder the paths are relative to")
    video.add_argument("--shard-size", type=_size, default="1GiB", metavar="SIZE",
                       help="payload bytes per shard (default 1GiB)")
    video.add_argument("--workers", type=positive(int), default=None, metavar="N",
                       help="probing threads (default: CPU count)")
    video.add_argument("--strict", action="store_true",
                       help="fail on the first unreadable video instead of skipping it")
    video.add_argument("--overwrite", action="store_true",
                       help="replace DST if it already holds a chute dataset")
    video.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(video)
    add_engine_args(video)
    video.set_defaults(func=_run_video)


def _run_video(args) -> int:
    from chute.convert import convert_video_csv

    report = convert_video_csv(args.src, args.dst, root=args.root, shard_size=args.shard_size,
                               workers=args.workers, strict=args.strict,
                               overwrite=args.overwrite,
                               progress=not args.no_progress and not args.json,
                               engine=engine_of(args))
    if args.json:
        print_json({"path": str(args.dst), "written": report.written,
                    "skipped": len(report.skipped),
                    "report": report.report_path if report.skipped else None})
        return 0
    print(f"wrote {report.written} videos to {args.dst}")
    if report.skipped:
        print(f"skipped {len(report.skipped)} unreadable videos, listed in "
              f"{report.report_path}")
    return 0


def run(args) -> int:
    from chute.convert import ConvertOptions, convert_csv, convert_imagefolder

    options = ConvertOptions(
        shard_size=args.shard_size, workers=args.workers, max_side=args.max_side,
        quality=args.quality, strict=args.strict, overwrite=args.overwrite,
        progress=not args.no_progress and not args.json, report=args.report)
    if args.source_kind == "hf":
        from chute._cli._convert_iterable import convert_iterable

        return convert_iterable(args)
    engine = engine_of(args)
    if args.source_kind == "imagefolder":
        report = convert_imagefolder(args.src, args.dst, options, engine=engine)
    elif args.source_kind == "ffcv":
        from chute.convert import convert_ffcv

        report = convert_ffcv(args.src, args.dst, options, drop=args.drop, engine=engine)
    elif args.source_kind in ("mds", "litdata"):
        from chute.convert import convert_litdata, convert_mds

        convert = convert_mds if args.source_kind == "mds" else convert_litdata
        report = convert(args.src, args.dst, options, drop=args.drop, engine=engine)
    elif args.source_kind == "webdataset":
        from chute.convert import convert_webdataset

        report = convert_webdataset(args.src, args.dst, options, max_member=args.max_member,
                                    engine=engine)
    else:
        report = convert_csv(args.src, args.dst, options, root=args.root, engine=engine)
    total = report.written + len(report.skipped)
    src = " ".join(args.src) if isinstance(args.src, list) else args.src
    if report.written == 0:
        first = report.skipped[0] if report.skipped else ("", "no images found")
        raise ChuteError(
            f"{src}: no sample was stored ({len(report.skipped)} skipped, listed in "
            f"{report.report_path}; first: {first[0]}: {first[1]}); {args.dst} is empty and "
            "unusable. Check the source"
            + (" (relative CSV paths are resolved against the CSV's folder or --root)"
               if args.source_kind == "csv" else ""))
    ratio = len(report.skipped) / total
    if ratio > args.max_skipped:
        print(f"WARNING: skipped {len(report.skipped)} of {total} images ({ratio:.1%}, more "
              f"than --max-skipped {args.max_skipped:.1%}); see {report.report_path}",
              file=sys.stderr)
    if args.json:
        print_json({"path": str(args.dst), "written": report.written,
                    "actions": dict(report.actions), "skipped": len(report.skipped),
                    "skipped_ratio": ratio, "report": report.report_path})
        return 0
    done = ", ".join(f"{n} {action}" for action, n in sorted(report.actions.items()))
    print(f"wrote {report.written} samples to {args.dst} ({done or 'none'})")
    if report.skipped:
        print(f"skipped {len(report.skipped)} unreadable images, listed in {report.report_path}")
    else:
        print("skipped 0 images")
    return 0
