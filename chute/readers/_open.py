"""Opening a dataset by path or URL: `open_dataset`, `open_url` and `DatasetRef.open` all go
through `_open`, the one place that tells a dataset in object storage from a local one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chute.errors import FormatError
from chute.readers._dataset import Dataset
from chute.readers.storage._storage import local_path

if TYPE_CHECKING:
    from chute.readers.zarr._zarr import ZarrDataset

__all__ = ["open_dataset", "open_url", "DatasetRef"]


def open_dataset(path: str | os.PathLike[str], *, bytes_field: str = "data",
                 cache_dir: str | os.PathLike[str] | None = None,
                 cache_limit: str | int | None = None, sample_array: str | None = None,
                 missing_chunks: str | dict[str, str] = "error",
                 chunk_cache: str | int = "256MiB",
                 offline: bool = False) -> Dataset | ZarrDataset:
    """Open a chute dataset, a zarr group, or a Megatron-LM / TouchDataset `.bin/.idx` pair.

    Args:
        path: a chute dataset folder (or its chute.json), a zarr group folder (`x.zarr`,
            read directly: see `chute.readers.zarr._zarr`), a `file://` URL, a chute dataset
            in object storage (`s3://bucket/prefix`, `gs://`, `az://`, `abfs://`,
            docs/storage.md), or a Megatron pair
            given as PREFIX, PREFIX.bin or PREFIX.idx.
        bytes_field: the name of a Megatron pair's one bytes field ("data" unless told
            otherwise, e.g. "image" for a pair of encoded images).
        cache_dir: for `s3://`: the node cache folder shared by every process of the
            machine (default: $CHUTE_DATA_CACHE, else the `data` folder of chute's cache).
        cache_limit: for `s3://`: bytes the cache may hold, e.g. "50GB" (default:
            $CHUTE_DATA_CACHE_LIMIT, else no limit).
        sample_array: for a zarr group: the array whose rows are the samples (e.g.
            "latents/base_frames"); needed when its arrays' first dimensions differ.
        missing_chunks: for a zarr group: "error" (an absent chunk file fails its rows, as
            on_error says), "fill" (zarr's fill value: arrays written sparse on purpose), or
            {array: "error" | "fill"} (docs/latents.md, "Missing chunks").
        chunk_cache: for a zarr group: bytes of decoded chunks kept per process ("256MiB";
            0: none), so batches sharing a chunk decode it once.
        offline: for `s3://`: never ask the server (also `CHUTE_OFFLINE=1`): open the newest
            version whose files are all in the node cache (docs/storage.md).

    Returns:
        The open Dataset, a ZarrDataset for a zarr group (memory-mapped; cheap to pickle).
    """
    return _open(path, bytes_field=bytes_field, fingerprint=None, cache_dir=cache_dir,
                 cache_limit=cache_limit, sample_array=sample_array,
                 missing_chunks=missing_chunks, chunk_cache=chunk_cache, offline=offline)


def open_url(url: str, *, bytes_field: str = "data", fingerprint: str | None = None,
             **options):
    """Open the dataset at `url` (a plain path works too), as `open_dataset` does; a known
    `fingerprint` lets a dataset in object storage reopen from its cached manifest.

    Args:
        url: what `open_dataset` takes as `path`.
        bytes_field: a Megatron pair's one field.
        fingerprint: the version expected (object storage only; None: the newest).
        options: `open_dataset`'s other keywords.
    """
    return _open(url, bytes_field=bytes_field, fingerprint=fingerprint, **options)


def _open(path, *, bytes_field: str = "data", fingerprint: str | None = None, cache_dir=None,
          cache_limit=None, sample_array: str | None = None,
          missing_chunks: str | dict[str, str] = "error", chunk_cache: str | int = "256MiB",
          offline: bool = False) -> Dataset | ZarrDataset:
    # the one place that tells a dataset in object storage from a local one
    from chute.readers.storage._object_store import is_remote
    from chute.readers.zarr._zarr import ZarrDataset, is_zarr_group

    zarr_options = (sample_array, missing_chunks, chunk_cache) != (None, "error", "256MiB")
    if is_remote(path):
        if zarr_options:
            raise ValueError(f"{path}: sample_array, missing_chunks and chunk_cache are for "
                             "local zarr groups; a dataset in object storage is a chute "
                             "dataset")
        return Dataset.remote(str(path), cache_dir=cache_dir, cache_limit=cache_limit,
                              fingerprint=fingerprint, offline=offline)
    if cache_dir is not None or cache_limit is not None or offline:
        raise ValueError(f"{path}: cache_dir, cache_limit and offline are for datasets in "
                         "object storage (s3://, gs://, az://...); a local dataset is read in "
                         "place")
    local = local_path(path)
    if is_zarr_group(Path(local)):
        return ZarrDataset(local, sample_array=sample_array, missing_chunks=missing_chunks,
                           chunk_cache=chunk_cache)
    if zarr_options:
        raise ValueError(f"{path}: sample_array, missing_chunks and chunk_cache are for zarr "
                         "groups; this is not one")
    return Dataset(local, bytes_field=bytes_field)


@dataclass(frozen=True)
class DatasetRef:
    """A dataset's identity across processes: its storage URL and fingerprint. `open()` in
    another process (a DALI worker, a DDP rank) refuses a dataset that changed meanwhile."""

    url: str
    fingerprint: str
    bytes_field: str = "data"  # what a Megatron pair's field was called when it was opened
    options: tuple = ()  # (name, value) of open_dataset's cache settings (s3:// only)

    @classmethod
    def of(cls, dataset) -> DatasetRef:
        options = tuple(sorted(getattr(dataset, "open_options", {}).items()))
        return cls(dataset.url, dataset.fingerprint, getattr(dataset, "_bytes_field", "data"),
                   options)

    def open(self):
        dataset = open_url(self.url, bytes_field=self.bytes_field,
                           fingerprint=self.fingerprint if self.options else None,
                           **dict(self.options))
        if dataset.fingerprint != self.fingerprint:
            raise FormatError(f"{self.url}: the dataset changed since it was opened "
                              f"(fingerprint {dataset.fingerprint}, expected {self.fingerprint}); "
                              "restart the job on the new version")
        return dataset
