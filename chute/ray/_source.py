"""`read_dataset`: a chute dataset read as a Ray Dataset, one read task and one block per shard
(docs/ray.md). Tasks open the dataset by its URL and fingerprint, so a dataset that changed
meanwhile is refused, and an s3:// dataset is read through each node's cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from chute._lazy import require
from chute.errors import ChuteError
from chute.ray._runtime import connect, task_env
from chute.readers import DatasetRef, open_url

__all__ = ["read_dataset"]


def read_dataset(path: Any, *, fields: list[str] | None = None) -> Any:
    """A chute dataset as a `ray.data.Dataset` of one row per sample, in order, one block per
    shard.

    Columns: a `bytes` field as Arrow binary (undecoded, e.g. JPEG bytes), scalar fields as
    numbers, `ndarray` fields as tensors, `json` fields as the Python objects stored (dicts
    exactly as written). Table fields (stored once, read through `Lookup`) are left out.

    Args:
        path: a chute dataset folder, `s3://bucket/prefix`, or an opened chute Dataset (its
            cache settings go with it).
        fields: the fields to read (default: every per-sample field).
    """
    dataset = open_url(str(path)) if isinstance(path, (str, Path)) else path
    if not hasattr(dataset, "shard_starts"):
        raise ChuteError(f"{path}: read_dataset reads chute datasets (folders with chute.json, "
                         "or s3://, gs://, az://...); convert this one first with `chute convert`")
    per_sample = [name for name, kind in dataset.fields.items() if kind != "table"]
    names = per_sample if fields is None else list(fields)
    unknown = sorted(set(names) - set(per_sample))
    if unknown:
        raise ChuteError(f"{dataset.url}: no per-sample fields {unknown} (it has {per_sample})")
    starts = [int(s) for s in dataset.shard_starts]  # then the sample count
    spans = [(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True) if b > a]
    ray = connect(None)
    source = _ShardSource(DatasetRef.of(dataset), spans, names,
                          {n: dataset.fields[n] for n in names}, _sizes(dataset, spans))
    read = ray.data.read_datasource(source, override_num_blocks=max(1, len(spans)),
                                    runtime_env=task_env().get("runtime_env"))
    # Ray Data hands out blocks as their tasks finish unless told to keep their order; this
    # dataset's own context (its copy of Ray's DataContext) says so (docs/ray.md)
    read.context.execution_options.preserve_order = True
    return read


def _sizes(dataset: Any, spans: list[tuple[int, int]]) -> list[int]:
    """Payload bytes of each span (for Ray's memory planning)."""
    total = np.zeros(len(dataset), np.int64)
    for name, kind in dataset.fields.items():
        if kind == "bytes":
            total += dataset.sizes(None, name)
    return [int(total[a:b].sum()) for a, b in spans]


def _source_base() -> type:
    return require("ray.data", "ray").Datasource


class _ShardSource(_source_base()):  # type: ignore[misc]
    """One read task per shard."""

    def __init__(self, ref: DatasetRef, spans: list[tuple[int, int]], names: list[str],
                 kinds: dict[str, str], sizes: list[int]):
        self.ref, self.spans, self.names, self.kinds, self.sizes = ref, spans, names, kinds, sizes

    def estimate_inmemory_data_size(self) -> int:
        return sum(self.sizes)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[Any]:
        from ray.data.block import BlockMetadata
        from ray.data.datasource import ReadTask

        tasks = []
        for (start, stop), size in zip(self.spans, self.sizes, strict=True):
            meta = BlockMetadata(num_rows=stop - start, size_bytes=size, input_files=None,
                                 exec_stats=None)
            tasks.append(ReadTask(_ReadShard(self.ref, start, stop, self.names, self.kinds),
                                  meta, per_task_row_limit=per_task_row_limit))
        return tasks

    def get_name(self) -> str:
        return "chute"


class _ReadShard:
    """The block of samples [start, stop) (one shard)."""

    def __init__(self, ref: DatasetRef, start: int, stop: int, names: list[str],
                 kinds: dict[str, str]):
        self.ref, self.start, self.stop, self.names, self.kinds = ref, start, stop, names, kinds

    def __call__(self) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]
        from ray.data.extensions import ArrowPythonObjectArray, ArrowTensorArray

        dataset = self.ref.open()
        ids = np.arange(self.start, self.stop)
        columns = {}
        for name in self.names:
            values = dataset.read(name, ids)
            kind = self.kinds[name]
            if kind == "bytes":
                columns[name] = pa.array([v.tobytes() for v in values], pa.binary())
            elif kind == "json":
                columns[name] = ArrowPythonObjectArray.from_objects(values)
            elif kind == "ndarray":
                arrays = values if isinstance(values, np.ndarray) else list(values)
                columns[name] = ArrowTensorArray.from_numpy(arrays)
            else:
                columns[name] = pa.array(np.asarray(values))
        yield pa.table(columns)
