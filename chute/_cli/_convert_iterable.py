"""`chute convert hf`: a Hugging Face `datasets` dataset, written with
`chute.convert.write_dataset`."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from chute._cli._output import print_json
from chute.errors import ChuteError

__all__ = ["convert_iterable"]

_HUB_TIMEOUT_S = 10  # seconds to reach the Hub before `convert hf NAME` gives up


def convert_iterable(args) -> int:
    ignored = [flag for flag, value in (("--max-side", args.max_side), ("--strict", args.strict),
                                        ("--report", args.report), ("--workers", args.workers))
               if value]
    if ignored:  # refused rather than silently ignored
        verb = "does" if len(ignored) == 1 else "do"
        raise ChuteError(f"{', '.join(ignored)} {verb} not apply to `convert hf` (an unreadable "
                         "image stops it naming the row; images are stored as they are)")
    from chute._cli._engine import engine_of
    from chute.convert import HFJob, run_job

    engine = engine_of(args)
    job = HFJob(_hf_table(args), args.src, image_column=args.image_column,
                label_column=args.label_column, shard_size=args.shard_size,
                overwrite=args.overwrite, quality=args.quality,
                progress=not args.no_progress and not args.json)
    written = run_job(job, args.dst, engine=engine).written
    if args.json:
        print_json({"path": str(args.dst), "written": written, "skipped": 0})
    else:
        print(f"wrote {written} samples to {args.dst}")
    return 0


def _hf_table(args):
    try:
        import datasets
    except ImportError:
        raise ChuteError("`chute convert hf` needs the Hugging Face `datasets` package: "
                         "pip install datasets") from None
    return _load(datasets, args.src, args.split)


def _load(datasets, src: str, split: str | None):
    """The table of `src`: a folder saved by save_to_disk, else a Hub dataset. A name that
    looks like a path but is no folder is refused without asking the Hub, and an unreachable
    Hub fails at once (datasets retries for half a minute, then prints a long ConnectionError)."""
    if Path(src).is_dir():
        try:
            table = datasets.load_from_disk(src)
        except (OSError, ValueError) as exc:  # FileNotFoundError: not a save_to_disk folder
            raise ChuteError(f"{src}: not a folder written by save_to_disk "
                             f"({' '.join(str(exc).split())})") from None
        if not isinstance(table, datasets.DatasetDict):
            if split is not None:
                raise ChuteError(f"{src}: a dataset without splits (saved from a Dataset, not "
                                 f"a DatasetDict) has no split {split!r}; drop --split")
            return table
        split = split or "train"
        if split not in table:
            raise ChuteError(f"{src}: no split {split!r} (it has {sorted(table)}); pass "
                             "--split")
        return table[split]
    if _looks_like_a_path(src):
        raise ChuteError(f"{src}: no such folder (a folder written by save_to_disk, or a Hub "
                         "name such as 'owner/name'); check the path")
    _check_hub(src)
    try:
        return datasets.load_dataset(src, split=split or "train")
    except Exception as exc:  # datasets raises many kinds: one line naming the dataset
        raise ChuteError(f"{src}: datasets.load_dataset failed ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None


def _looks_like_a_path(name: str) -> bool:
    """A name the Hub cannot hold ("owner/name" or "name"): absolute, relative with ./ or ../,
    ~, backslashes, more than one '/', or a parent folder that exists here."""
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or \
            os.path.isabs(name):
        return True
    parent = os.path.dirname(name)
    return bool(parent) and os.path.isdir(parent)


def _check_hub(name: str) -> None:
    """ChuteError at once when the Hub cannot be reached (unless HF_HUB_OFFLINE or
    HF_DATASETS_OFFLINE asks datasets for its cache)."""
    if any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
           for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=_HUB_TIMEOUT_S).close()
    except OSError as exc:
        raise ChuteError(f"{name}: not a local folder, and the Hugging Face Hub ({host}) "
                         f"cannot be reached ({exc.strerror or exc}); pass a folder written by "
                         "save_to_disk, or set HF_HUB_OFFLINE=1 to use a cached copy") from None
