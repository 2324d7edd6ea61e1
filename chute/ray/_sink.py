"""`write_dataset`: a Ray Dataset written as a chute dataset. Each Ray write task writes its
blocks as a part (`PartWriter`); the writer on the driver adopts the parts in the Dataset's
order and writes the manifest, so a task that failed or was retried leaves nothing behind
(docs/ray.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chute._lazy import require
from chute.convert import (
    TRANSCODE_QUALITY,
    PartTarget,
    PartWriter,
    ShardWriter,
    image_declarations,
    infer_fields,
    with_jpeg,
)
from chute.ray._runtime import connect, task_env
from chute.readers import Dataset, StorageError, open_url

__all__ = ["write_dataset"]


def write_dataset(dataset: Any, path: str | Path, *, fields: Mapping[str, str | dict] | None = None,
                  shard_size: str | int = "1GiB", class_names: list[str] | None = None,
                  overwrite: bool = False, retries: int = 3, image_field: str = "image",
                  quality: int = TRANSCODE_QUALITY) -> Dataset:
    """Write the rows of a Ray Dataset, in order, as a chute dataset and open it.

    Each row becomes a sample: bytes columns `bytes` fields, numbers scalar columns, tensor
    columns `ndarray` fields, anything else `json` (as `ShardWriter` infers kinds from the
    first row, unless `fields` declares them). The `image_field` column, as in
    `chute.convert.write_dataset`, holds encoded images of any format Pillow reads: stored as
    JPEG (JPEG bytes unchanged) with the "height" and "width" columns an image Pipeline
    computes crops from (with `fields`, when they declare `image_field`).

    Args:
        dataset: a `ray.data.Dataset`.
        path: the new chute dataset: a folder on a file system every Ray node sees (one node,
            or a shared file system), or `s3://bucket/prefix`.
        fields: field name -> declaration, as `ShardWriter` takes them (None: inferred).
        shard_size: payload bytes per shard ("1GiB", "256MiB"); each write task ends its last
            shard early.
        class_names: label names stored in the manifest.
        overwrite: replace a chute dataset at `path`.
        retries: how often a write task whose process died, or that hit an I/O error, runs
            again before the write fails.
        image_field: the column holding images (absent from the rows: no image handling).
        quality: JPEG quality for images that are not JPEG already.

    Returns:
        The written dataset, opened.
    """
    connect(None)
    if fields is not None and image_field in fields:
        fields = image_declarations(dict(fields), image_field)
    with ShardWriter(path, fields, shard_size=shard_size, class_names=class_names,
                     overwrite=overwrite) as writer:
        sink = _PartsSink(writer.part_target(), image_field, quality)
        # samples in the Dataset's order: a Dataset runs with the context it was made with
        # (a copy), so the option goes on its own, for this write only
        ordered = dataset.context.execution_options.preserve_order
        dataset.context.execution_options.preserve_order = True
        try:
            dataset.write_datasink(sink, ray_remote_args={
                "max_retries": retries, "retry_exceptions": [OSError, StorageError],
                **task_env()})
        finally:
            dataset.context.execution_options.preserve_order = ordered
        for _, part in sorted(sink.returns, key=lambda r: r[0]):
            writer.adopt(part)
    written = open_url(str(writer.path))
    assert isinstance(written, Dataset)  # a chute dataset, just written
    return written


def _sink_base() -> type:
    return require("ray.data", "ray").Datasink


class _PartsSink(_sink_base()):  # type: ignore[misc]
    """Write tasks -> parts of `target`; the driver keeps what they returned."""

    def __init__(self, target: PartTarget, image_field: str, quality: int):
        self.target, self.image_field, self.quality = target, image_field, quality
        self.returns: list[tuple[int, dict]] = []

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[int, dict]:
        from ray.data.block import BlockAccessor

        writer: PartWriter | None = None
        count = 0  # this task's rows, for an error naming one
        try:
            for block in blocks:
                rows: Iterable[Mapping[str, Any]] = \
                    BlockAccessor.for_block(block).iter_rows(public_row_format=True)
                for row in rows:
                    sample = dict(row)
                    if self.image_field in sample:  # JPEG, height, width (docs/ray.md)
                        sample = with_jpeg(sample, self.image_field, count, self.quality)
                    count += 1
                    if writer is None:
                        writer = PartWriter(self.target, self._fields(sample))
                    writer.write(sample)
            writer = writer or PartWriter(self.target)
            writer.close()
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        assert writer.part is not None
        return ctx.task_idx, writer.part

    def _fields(self, sample: dict) -> dict | None:
        """The declarations of a part whose first sample is `sample`, when the write has none
        and it holds an image (inferred, the image's three declared)."""
        if self.target.fields is not None or self.image_field not in sample:
            return None
        return image_declarations(infer_fields(sample), self.image_field)

    def on_write_complete(self, write_result: Any) -> None:
        self.returns = list(write_result.write_returns)

    def get_name(self) -> str:
        return "chute"
