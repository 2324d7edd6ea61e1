"""`chute convert audio FILE DST`: recordings (JSONL metainfo, a WeNet data.list, CSV
path,text or a Kaldi data folder) -> a chute dataset, registered under `chute convert` by
`add_parser`."""

from __future__ import annotations

from chute._cli._args import positive
from chute._cli._engine import add_engine_args, engine_of
from chute._cli._output import add_json_flag, print_json

__all__ = ["add_parser", "run"]


def add_parser(kinds, size) -> None:
    """Register `audio` among `chute convert`'s sources; `size` parses --shard-size."""
    parser = kinds.add_parser(
        "audio", help="JSONL of recordings with segments (or CSV path,text) -> audio dataset",
        description="Each recording's bytes are stored as they are (FLAC, WAV, OGG, MP3), with "
        "sample_rate, channels, num_frames and duration columns and JSON metadata (key, txt, "
        "segments) that `chute meta update` can replace. Files that do not decode and invalid "
        "segments are skipped and listed in a report. A file listed on several lines is "
        "stored once, with every line's segments.")
    parser.add_argument("src", metavar="FILE", help="recordings: .jsonl (one per line; also a "
                        "WeNet data.list), .csv (path,text; header row optional), a Kaldi "
                        "data folder (wav.scp, segments, text, utt2spk) or a lhotse "
                        "recordings or cuts manifest (.jsonl or .jsonl.gz)")
    parser.add_argument("dst", metavar="DST", help="new dataset folder")
    parser.add_argument("--root", metavar="DIR", help="folder the paths are relative to "
                        "(default: the listing's folder; for Kaldi and lhotse the current one)")
    parser.add_argument("--supervisions", metavar="FILE", help="a lhotse supervisions "
                        "manifest: its segments of the recordings manifest FILE")
    parser.add_argument("--shard-size", type=size, default="1GiB", metavar="SIZE",
                        help="payload bytes per shard (default 1GiB)")
    parser.add_argument("--workers", type=positive(int), default=None, metavar="N",
                        help="probe processes (default: CPU count)")
    parser.add_argument("--strict", action="store_true",
                        help="fail on the first bad file or segment instead of skipping it")
    parser.add_argument("--report", metavar="FILE", help="default DST/skipped.tsv")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(parser)
    add_engine_args(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from chute.convert import AudioConvertOptions, convert_audio

    report = convert_audio(args.src, args.dst, AudioConvertOptions(
        shard_size=args.shard_size, workers=args.workers, strict=args.strict,
        overwrite=args.overwrite, progress=not args.no_progress and not args.json,
        report=args.report, root=args.root, supervisions=args.supervisions),
        engine=engine_of(args))
    if args.json:
        print_json({"path": str(args.dst), "written": report.written,
                    "segments": report.segments,
                    "skipped": len(report.skipped) - report.dropped_segments,
                    "dropped_segments": report.dropped_segments,
                    "report": report.report_path if report.skipped else None})
        return 0
    print(f"wrote {report.written} recordings ({report.segments} segments) to {args.dst}")
    print(f"skipped {len(report.skipped) - report.dropped_segments} files and "
          f"{report.dropped_segments} segments"
          + (f", listed in {report.report_path}" if report.skipped else ""))
    return 0
