"""`write_dataset`: a Ray Dataset written as a chute dataset. Each Ray write task writes its
blocks as a part (`PartWriter`); the writer on the driver adopts the parts in the Dataset's
order and writes the manifest, so a task that failed or was retried leaves nothing behind
(docs/ray.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chute._lazy import require
from chute.ray._runtime import connect, task_env
from chute.readers import Dataset, PartTarget, PartWriter, ShardWriter, StorageError, open_url

__all__ = ["write_dataset"]


def write_dataset(dataset: Any, path: str | Path, *, fields: Mapping[str, str | dict] | None = None,
                  shard_size: str | int = "1GiB", class_names: list[str] | None = None,
                  overwrite: bool = False, retries: int = 3) -> Dataset:
    """Write the rows of a Ray Dataset, in order, as a chute dataset and open it.

    Each row becomes a sample: bytes columns `bytes` fields, numbers scalar columns, tensor
    columns `ndarray` fields, anything else `json` (as `ShardWriter` infers kinds from the
    first row, unless `fields` declares them). Images are stored as given (encode them to JPEG
    in the Dataset, e.g. in `map_batches`, to stream them through an image Pipeline).

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

    Returns:
        The written dataset, opened.
    """
    connect(None)
    with ShardWriter(path, fields, shard_size=shard_size, class_names=class_names,
                     overwrite=overwrite) as writer:
        sink = _PartsSink(writer.part_target())
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

    def __init__(self, target: PartTarget):
        self.target = target
        self.returns: list[tuple[int, dict]] = []

    def write(self, blocks: Iterable[Any], ctx: Any) -> tuple[int, dict]:
        from ray.data.block import BlockAccessor

        writer = PartWriter(self.target)
        try:
            for block in blocks:
                rows: Iterable[Mapping[str, Any]] = \
                    BlockAccessor.for_block(block).iter_rows(public_row_format=True)
                for row in rows:
                    writer.write(dict(row))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        assert writer.part is not None
        return ctx.task_idx, writer.part

    def on_write_complete(self, write_result: Any) -> None:
        self.returns = list(write_result.write_returns)

    def get_name(self) -> str:
        return "chute"
