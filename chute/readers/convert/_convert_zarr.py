"""`chute convert zarr SRC DST`: a zarr group (see `readers/zarr/_zarr.py`) to a chute
dataset: per-sample arrays become `ndarray` fields (optionally zstd), 1-D ones scalar columns,
and tables are stored once (kind `table`), so the same
`Pipeline(..., fields={table: Lookup(index)})` call works on both.

Arrays in subgroups are converted too; a chute field name names files, so the '/' of their
path becomes '.' ("latents/base_frames" -> "latents.base_frames"). The manifest keeps, under
"zarr", each field's array path and the attributes of the group, its subgroups and arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers.format._writer import ShardWriter

__all__ = ["convert_zarr", "field_name"]

_BLOCK = 256  # samples read per zarr call while converting


def field_name(array: str) -> str:
    """The chute field name of zarr array path `array` ('/' -> '.')."""
    return array.replace("/", ".")


def _attributes(path: Path) -> dict[str, dict]:
    """{member path ("" for the group itself): its attributes} of every node that has any."""
    import zarr

    from chute.readers.zarr._zarr_store import ConfinedStore

    group = zarr.open_group(ConfinedStore(path), mode="r")
    found = {"": group.attrs.asdict()}
    found.update({name: node.attrs.asdict() for name, node in group.members(max_depth=None)})
    return {name: attrs for name, attrs in found.items() if attrs}


def convert_zarr(src: str | Path, dst: str | Path, *, shard_size: str | int = "1GiB",
                 compression: str | None = None, overwrite: bool = False,
                 sample_array: str | None = None,
                 missing_chunks: str | dict[str, str] = "error") -> int:
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

    Returns:
        The number of samples written.
    """
    from chute.readers.zarr._zarr import ZarrDataset

    ds = ZarrDataset(src, sample_array=sample_array, missing_chunks=missing_chunks)
    if ds.unreadable:  # converting without them would drop data silently
        raise FormatError(f"{ds.path}: arrays {ds.unreadable} hold no numbers, which a chute "
                          "dataset converted from zarr cannot store; remove them from a copy of "
                          "the group, or write the dataset with ShardWriter (json or bytes "
                          "fields)")
    names = {n: field_name(n) for n in ds.fields}
    clash = sorted({f for f in names.values() if list(names.values()).count(f) > 1})
    if clash:
        raise FormatError(f"{ds.path}: arrays {[n for n in names if names[n] in clash]} would "
                          f"all become field {clash[0]!r} ('/' of a subgroup path becomes '.'); "
                          "rename one of them in a copy of the group")
    per_sample = {n: k for n, k in ds.fields.items() if k != "table"}
    tables = {names[n]: ds.reader(n).read(np.arange(ds.reader(n).num_rows)) for n in ds.fields
              if n not in per_sample}
    declared = {}
    for name, kind in per_sample.items():
        spec = ds.specs[name]
        declared[names[name]] = ({"kind": "ndarray", "dtype": spec["dtype"],
                                  "shape": spec["shape"][1:], "compression": compression}
                                 if kind == "ndarray" else spec["dtype"])
    extra = {"source": f"zarr:{ds.path}",
             "zarr": {"arrays": {names[n]: n for n in ds.fields},
                      "attributes": _attributes(ds.path)}}
    with ShardWriter(dst, declared, shard_size=shard_size, overwrite=overwrite,
                     tables=tables, manifest_extra=extra) as writer:
        for lo in range(0, len(ds), _BLOCK):
            ids = np.arange(lo, min(lo + _BLOCK, len(ds)))
            block = {n: ds.read(n, ids) for n in per_sample}
            for k in range(len(ids)):
                writer.write({names[n]: block[n][k] if per_sample[n] == "ndarray"
                              else block[n][k].item() for n in per_sample})
    return len(ds)
