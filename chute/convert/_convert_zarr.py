"""`chute convert zarr SRC DST`: a zarr group (see `readers/zarr/_zarr.py`) to a chute
dataset: per-sample arrays become `ndarray` fields (optionally zstd), 1-D ones scalar columns,
and tables are stored once (kind `table`), so the same
`Pipeline(..., fields={table: Lookup(index)})` call works on both.

Arrays in subgroups are converted too; a chute field name names files, so the '/' of their
path becomes '.' ("latents/base_frames" -> "latents.base_frames"). The manifest keeps, under
"zarr", each field's array path, the attributes of the group, its subgroups and arrays, and the
0-d arrays' values ("constants": {array path: {"dtype", "value"}}, docs/latents.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.convert._jobs import ConvertJob, run_job
from chute.errors import FormatError

__all__ = ["convert_zarr", "ZarrJob", "field_name"]

_BLOCK = 256  # samples read per zarr call while converting


def field_name(array: str) -> str:
    """The chute field name of zarr array path `array` ('/' -> '.')."""
    return array.replace("/", ".")


def _attributes(path: Path) -> dict[str, dict]:
    """{member path ("" for the group itself): its attributes} of every node that has any."""
    import zarr

    from chute.readers.zarr import ConfinedStore

    group = zarr.open_group(ConfinedStore(path), mode="r")
    nodes = [("", group), *group.members(max_depth=None)]
    found = {}
    for name, node in nodes:
        attrs = node.metadata.attributes
        if not isinstance(attrs, dict):  # zarr opens a `.zattrs` holding a list or a string
            raise FormatError(f"{path / name}: its attributes are {type(attrs).__name__} "
                              f"{str(attrs)[:40]!r}, not a JSON object; the metadata (.zattrs, "
                              "zarr.json) is corrupt or was edited by hand: restore the store")
        found[name] = dict(attrs)
    return {name: attrs for name, attrs in found.items() if attrs}


def convert_zarr(src: str | Path, dst: str | Path, *, shard_size: str | int = "1GiB",
                 compression: str | None = None, overwrite: bool = False,
                 sample_array: str | None = None,
                 missing_chunks: str | dict[str, str] = "error", engine=None) -> int:
    """Convert zarr group `src` to a chute dataset at `dst`.

    Args:
        src: the zarr group folder (v2 or v3); arrays in subgroups become fields named by
            their path with '.' for '/'.
        dst: the new chute dataset folder.
        shard_size: payload bytes per shard.
        compression: None or "zstd" for the ndarray fields.
        overwrite: replace an existing chute dataset at `dst`.
        sample_array: the array whose rows are the samples (its path in the group); needed
            when the arrays' first dimensions differ.
        missing_chunks: "error" (an absent chunk file stops the conversion, naming it) or
            "fill" (zarr's fill value), or {array: "error" | "fill"}.
        engine: where to run it (None: this process; `chute.ray.RayEngine`: slices of the
            samples as tasks).

    Returns:
        The number of samples written.
    """
    job = ZarrJob(src, shard_size=shard_size, compression=compression, overwrite=overwrite,
                  sample_array=sample_array, missing_chunks=missing_chunks)
    return run_job(job, dst, engine=engine).written


class ZarrJob(ConvertJob):
    """The samples of a zarr group as units (tables read once, by the committing writer).

    Args:
        src, shard_size, compression, overwrite, sample_array, missing_chunks: as
            `convert_zarr` takes them.
    """

    kind = "zarr"
    unit = "sample"

    def __init__(self, src: str | Path, *, shard_size: str | int = "1GiB",
                 compression: str | None = None, overwrite: bool = False,
                 sample_array: str | None = None,
                 missing_chunks: str | dict[str, str] = "error"):
        self.src, self.sample_array, self.missing_chunks = src, sample_array, missing_chunks
        self.shard_size, self.overwrite, self.progress = shard_size, overwrite, False
        ds = self._dataset()
        if ds.unreadable:  # converting without them would drop data silently
            raise FormatError(f"{ds.path}: arrays {ds.unreadable} hold no numbers, which a "
                              "chute dataset converted from zarr cannot store; remove them from "
                              "a copy of the group, or write the dataset with ShardWriter (json "
                              "or bytes fields)")
        from chute.readers.zarr import constants_json

        names = self.names = {n: field_name(n) for n in ds.fields}
        clash = sorted({f for f in names.values() if list(names.values()).count(f) > 1})
        if clash:
            raise FormatError(f"{ds.path}: arrays {[n for n in names if names[n] in clash]} "
                              f"would all become field {clash[0]!r} ('/' of a subgroup path "
                              "becomes '.'); rename one of them in a copy of the group")
        self.per_sample = {n: k for n, k in ds.fields.items() if k != "table"}
        self.tables = {names[n]: ds.reader(n).read(np.arange(ds.reader(n).num_rows))
                       for n in ds.fields if n not in self.per_sample}
        self.fields = {}
        for name, kind in self.per_sample.items():
            spec = ds.specs[name]
            self.fields[names[name]] = ({"kind": "ndarray", "dtype": spec["dtype"],
                                         "shape": spec["shape"][1:], "compression": compression}
                                        if kind == "ndarray" else spec["dtype"])
        self.extra = {"zarr": {"arrays": {names[n]: n for n in ds.fields},
                               "attributes": _attributes(ds.path),
                               "constants": constants_json(ds.constants)}}
        self.path = ds.path
        self.units = range(len(ds))

    def _dataset(self):
        from chute.readers.zarr import ZarrDataset

        ds = getattr(self, "_ds", None)
        if ds is None:
            ds = self._ds = ZarrDataset(self.src, sample_array=self.sample_array,
                                        missing_chunks=self.missing_chunks)
        return ds

    def __getstate__(self) -> dict:
        # tasks open the group themselves; the tables go with the committing writer only
        return {k: v for k, v in self.__dict__.items() if k not in ("_ds", "tables")}

    def write(self, units, writer, report, progress, workers) -> None:
        ds, names, per_sample = self._dataset(), self.names, self.per_sample
        for lo in range(0, len(units), _BLOCK):
            ids = np.asarray(units[lo:lo + _BLOCK], dtype=np.int64)
            block = {n: ds.read(n, ids) for n in per_sample}
            for k in range(len(ids)):
                writer.write({names[n]: block[n][k] if per_sample[n] == "ndarray"
                              else block[n][k].item() for n in per_sample})
            progress(len(ids))

    def source_info(self, report) -> str:
        return f"zarr:{self.path}"
