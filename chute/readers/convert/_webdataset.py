"""Samples of WebDataset tar shards, read with the standard library (no `webdataset` package):
the members of one sample share a key (the name up to the first dot of the base name) and the
rest of the name is the field ("000123.jpg", "000123.cls", "000123.json")."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chute.errors import FormatError

__all__ = ["iter_webdataset", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
_LABEL_EXTENSIONS = ("cls", "cls.txt", "label")
_TEXT_EXTENSIONS = ("txt", "caption", "text")


def iter_webdataset(tars: list[str | Path]) -> Iterator[dict]:
    """Samples as {"image": bytes, "label": int (when the tars have one), "meta": {...}}.

    meta holds "key" (the sample's key, for `chute meta update`), the decoded `.json` member's
    entries and the `.txt` caption as "text".

    Args:
        tars: WebDataset shard files, read in the order given.

    Raises:
        FormatError: a file that is not a tar, or a sample without an image.
    """
    for tar_path in tars:
        try:
            archive = tarfile.open(tar_path, mode="r|*")
        except (tarfile.TarError, OSError) as exc:
            raise FormatError(f"{tar_path}: not a readable tar file ({exc})") from None
        with archive:
            # `key` is the prefix of the sample in `members`; set before its first member.
            key = ""
            members: dict[str, bytes] = {}
            for member in archive:
                if not member.isfile():
                    continue
                base = member.name.rsplit("/", 1)[-1]
                stem, _, ext = base.partition(".")
                prefix = member.name[: len(member.name) - len(base)] + stem
                if prefix != key and members:
                    yield _sample(tar_path, key, members)
                    members = {}
                key = prefix
                data = archive.extractfile(member)
                assert data is not None  # a regular file's member always has one
                members[ext.lower()] = data.read()
            if members:
                yield _sample(tar_path, key, members)


def _sample(tar_path, key: str, members: dict[str, bytes]) -> dict:
    image = next((members[e] for e in IMAGE_EXTENSIONS if e in members), None)
    if image is None:
        raise FormatError(f"{tar_path}: sample {key!r} has no image member (one of "
                          f"{', '.join(IMAGE_EXTENSIONS)}); it has {sorted(members)}")
    meta: dict = {"key": key}
    if "json" in members:
        try:
            extra = json.loads(members["json"])
        except ValueError as exc:
            raise FormatError(f"{tar_path}: {key}.json is not JSON ({exc})") from None
        meta.update(extra if isinstance(extra, dict) else {"json": extra})
    text = next((members[e] for e in _TEXT_EXTENSIONS if e in members), None)
    if text is not None:
        meta["text"] = text.decode("utf-8", errors="replace")
    sample: dict[str, Any] = {"image": image}
    label = next((members[e] for e in _LABEL_EXTENSIONS if e in members), None)
    if label is not None:
        try:
            sample["label"] = int(label.decode().strip())
        except ValueError:
            raise FormatError(f"{tar_path}: {key}'s label {label[:20]!r} is not an "
                              "integer") from None
    sample["meta"] = meta
    return sample
