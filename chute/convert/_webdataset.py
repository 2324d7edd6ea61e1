"""Samples of WebDataset tar shards, read with the standard library (no `webdataset` package):
the members of one sample share a key (the name up to the first dot of the base name) and the
rest of the name is the field ("000123.jpg", "000123.cls", "000123.json")."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO, Any, cast

from chute.convert._jobs import ConvertJob
from chute.errors import ChuteError, FormatError
from chute.readers import format_size, parse_size

__all__ = ["iter_webdataset", "convert_webdataset", "WebDatasetJob", "IMAGE_EXTENSIONS",
           "WEBDATASET_MAX_MEMBER"]

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")
_LABEL_EXTENSIONS = ("cls", "cls.txt", "label")
_TEXT_EXTENSIONS = ("txt", "caption", "text")
# The largest tar member read (`--max-member`): a member is read whole into memory, and a small
# compressed tar can hold a huge one (2 MB of .tar.gz inflating to a 2 GiB member). Larger
# members are not read; their sample is skipped and listed.
WEBDATASET_MAX_MEMBER = "256MiB"


class _SkippedSample(Exception):
    """A sample that cannot be stored (the message says why)."""


def iter_webdataset(tars: list[str | Path], *,
                    max_member: str | int = WEBDATASET_MAX_MEMBER) -> Iterator[dict]:
    """Samples as {"image": bytes, "label": int (when the tars have one), "meta": {...}}.

    meta holds "key" (the sample's key, for `chute meta update`), the decoded `.json` member's
    entries and the `.txt` caption as "text".

    Args:
        tars: WebDataset shard files, read in the order given.
        max_member: the largest member read (bytes, or "256MiB"); a larger one is an error.

    Raises:
        FormatError: a file that is not a tar, or a sample without an image, a member over
            `max_member`, a label that is not an integer, a `.json` that is not JSON.
    """
    for tar_path, key, sample in _samples(tars, parse_size(max_member)):
        if isinstance(sample, _SkippedSample):
            raise FormatError(f"{tar_path}: sample {key!r}: {sample}")
        yield sample


def _samples(tars, max_member: int) -> Generator[tuple[Any, str, dict | _SkippedSample]]:
    """(tar, key, sample or why it cannot be stored) for every sample of `tars`."""
    for tar_path in tars:
        try:
            raw = open(tar_path, "rb")  # noqa: SIM115  (closed with the archive below)
        except OSError as exc:
            raise FormatError(f"{tar_path}: not a readable tar file ({exc})") from None
        try:
            archive = tarfile.open(fileobj=cast(IO[bytes], _EndOnce(raw)), mode="r|*")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raw.close()
            raise FormatError(f"{tar_path}: not a readable tar file ({exc})") from None
        with raw, archive:
            # `key` is the prefix of the sample in `members`; set before its first member.
            key = ""
            members: dict[str, bytes] = {}
            too_big: list[str] = []
            try:
                for member in archive:
                    if not member.isfile():
                        continue
                    base = member.name.rsplit("/", 1)[-1]
                    stem, _, ext = base.partition(".")
                    prefix = member.name[: len(member.name) - len(base)] + stem
                    if prefix != key and (members or too_big):
                        yield tar_path, key, _sample(key, members, too_big)
                        members, too_big = {}, []
                    key = prefix
                    if member.size > max_member:
                        # not read: the stream skips it in blocks, never holding it whole
                        too_big.append(f"member {base} is {format_size(member.size)}, over the "
                                       f"limit of {format_size(max_member)} (--max-member)")
                        continue
                    if ext.lower() in members:
                        # two members for one field: which one is meant is ambiguous, so the
                        # sample is skipped (listed with the other reasons in `too_big`)
                        too_big.append(f"member {base} appears twice in the sample")
                        continue
                    data = archive.extractfile(member)
                    assert data is not None  # a regular file's member always has one
                    members[ext.lower()] = data.read()
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise FormatError(f"{tar_path}: the tar is truncated or corrupt after sample "
                                  f"{key!r} ({type(exc).__name__}: {exc})") from None
            if members or too_big:
                yield tar_path, key, _sample(key, members, too_big)


class _EndOnce:
    """A tar file read by tarfile's stream mode, which skips a member by reading on block by
    block, also past the end: a header claiming 2^80 bytes (base-256 size field) kept it
    reading nothing for ever. Reading again after the end raises EOFError (a corrupt tar)."""

    def __init__(self, raw) -> None:
        self.raw, self.ended = raw, False

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        if not data and size:
            if self.ended:
                raise EOFError("a member claims more bytes than the file holds")
            self.ended = True
        return data


def _sample(key: str, members: dict[str, bytes], too_big: list[str]) -> dict | _SkippedSample:
    if too_big:
        return _SkippedSample("; ".join(too_big))
    image = next((members[e] for e in IMAGE_EXTENSIONS if e in members), None)
    if image is None:
        return _SkippedSample(f"no image member (one of {', '.join(IMAGE_EXTENSIONS)}); it has "
                              f"{sorted(members)}")
    meta: dict = {"key": key}
    if "json" in members:
        try:
            extra = json.loads(members["json"])
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
            return _SkippedSample(f"{key}.json is not JSON ({type(exc).__name__}: "
                                  f"{str(exc)[:120]})")
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
            return _SkippedSample(f"label {label[:20]!r} is not an integer")
        if not -(2**63) <= sample["label"] < 2**63:  # the label column is int64
            return _SkippedSample(f"label {label[:20]!r} does not fit a 64-bit integer")
    sample["meta"] = meta
    return sample


def convert_webdataset(tars: list[str | Path], dst, options=None, *,
                       max_member: str | int = WEBDATASET_MAX_MEMBER, engine=None):
    """WebDataset shards -> a dataset with fields image, height, width, meta (+ label), as
    `convert_imagefolder` writes: JPEG bytes stored as they are, other formats transcoded,
    `options.max_side` downscales. A sample that cannot be stored (unreadable or truncated
    image, no image, a member over `max_member`, a bad label or .json) is skipped and listed
    as "TAR:KEY" in the report (`options.strict`: an error instead).

    Args:
        tars: the shard files, in order.
        dst: the new dataset (folder or s3://...).
        options: a ConvertOptions (workers does not apply).
        max_member: the largest tar member read.
        engine: where to run it (None: this process; `chute.ray.RayEngine`: one task per
            group of tars).

    Returns:
        A ConvertReport (written, actions, skipped, report_path).
    """
    from chute.convert._convert import ConvertOptions
    from chute.convert._jobs import run_job

    job = WebDatasetJob(tars, options or ConvertOptions(), parse_size(max_member))
    return run_job(job, dst, engine=engine)


class WebDatasetJob(ConvertJob):
    """Tar shards as units. Whether the dataset has labels is decided by the first sample
    that can be stored (looked up before writing, so every slice of a distributed convert
    declares the same fields); later samples that differ are skipped.

    Args:
        tars: the shard files, in order.
        options: a ConvertOptions (max_side, quality, strict, shard_size, overwrite, ...).
        max_member: the largest tar member read, in bytes.
    """

    unit = "tar"
    kind = "webdataset"
    class_names = None

    def __init__(self, tars: list[str | Path], options, max_member: int):
        self.units = [str(t) for t in tars]
        self.options, self.max_member = options, max_member
        self.take_options(options)
        self.info = {"tars": [str(Path(t).resolve()) for t in tars]}
        self.with_label = self._first_has_label()
        self.fields: dict[str, Any] = {"image": {"kind": "bytes", "media": "image"},
                                       "height": "int32", "width": "int32", "meta": "json"}
        if self.with_label:
            self.fields["label"] = "int64"

    def _first_has_label(self) -> bool:
        from chute.convert._images import UnreadableImage, prepare_image

        samples = _samples(self.units, self.max_member)
        try:
            for _, _, sample in samples:
                if isinstance(sample, _SkippedSample):
                    continue
                try:
                    prepare_image(sample["image"], max_side=self.options.max_side,
                                  quality=self.options.quality)
                except UnreadableImage:
                    continue
                return "label" in sample
        finally:
            samples.close()
        return False

    def write(self, units, writer, report, progress, workers) -> None:
        from chute.convert._images import UnreadableImage, prepare_image

        options, with_label = self.options, self.with_label
        for tar in units:
            samples = _samples([tar], self.max_member)
            try:
                for tar_path, key, sample in samples:
                    try:
                        if isinstance(sample, _SkippedSample):
                            raise sample
                        try:
                            image = prepare_image(sample["image"], max_side=options.max_side,
                                                  quality=options.quality)
                        except UnreadableImage as exc:
                            raise _SkippedSample(str(exc)) from None
                        if ("label" in sample) != with_label:
                            raise _SkippedSample(
                                "no label member (.cls) where the first sample has one"
                                if with_label else "a label where the first sample has none")
                    except _SkippedSample as exc:
                        if options.strict:
                            raise ChuteError(f"{tar_path}: sample {key!r}: {exc}; fix or remove "
                                             "it, or convert without --strict to skip it") from None
                        report.skipped.append((f"{tar_path}:{key}", str(exc)))
                        continue
                    writer.write({**sample, "image": image.data, "height": image.height,
                                  "width": image.width})
                    report.actions[image.action] += 1
            finally:
                samples.close()  # closes the tar being read
            progress(1)
