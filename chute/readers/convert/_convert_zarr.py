"""`chute convert zarr SRC DST`: a zarr group (see `readers/zarr/_zarr.py`) to a chute
dataset: per-sample arrays become `ndarray` fields (optionally zstd), 1-D ones scalar columns,
and tables are stored once (kind `table`), so the same
`Pipeline(..., fields={table: Lookup(index)})` call works on both."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.errors import FormatError
from chute.readers.format._writer import ShardWriter

__all__ = ["convert_zarr"]

_BLOCK = 256  # samples read per zarr call while converting


def convert_zarr(src: str | Path, dst: str | Path, *, shard_size: str | int = "1GiB",
                 compression: str | None = None, overwrite: bool = False) -> int:
    """Convert zarr group `src` to a chute dataset at `dst`.

    Args:
        src: the zarr group folder (v2 or v3).
        dst: the new chute dataset folder.
        shard_size: payload bytes per shard.
        compression: None or "zstd" for the ndarray fields.
        overwrite: replace an existing chute dataset at `dst`.

    Returns:
        The number of samples written.
    """
    from chute.readers.zarr._zarr import ZarrDataset

    ds = ZarrDataset(src)
    if ds.unreadable:  # converting without them would drop data silently
        raise FormatError(f"{ds.path}: arrays {ds.unreadable} hold no numbers, which a chute "
                          "dataset converted from zarr cannot store; remove them from a copy of "
                          "the group, or write the dataset with ShardWriter (json or bytes "
                          "fields)")
    per_sample = {n: k for n, k in ds.fields.items() if k != "table"}
    tables = {n: ds.reader(n).read(np.arange(ds.reader(n).num_rows)) for n in ds.fields
              if n not in per_sample}
    declared = {}
    for name, kind in per_sample.items():
        spec = ds.specs[name]
        declared[name] = ({"kind": "ndarray", "dtype": spec["dtype"], "shape": spec["shape"][1:],
                           "compression": compression} if kind == "ndarray" else spec["dtype"])
    with ShardWriter(dst, declared, shard_size=shard_size, overwrite=overwrite,
                     tables=tables, manifest_extra={"source": f"zarr:{ds.path}"}) as writer:
        for lo in range(0, len(ds), _BLOCK):
            ids = np.arange(lo, min(lo + _BLOCK, len(ds)))
            block = {n: ds.read(n, ids) for n in per_sample}
            for k in range(len(ids)):
                writer.write({n: block[n][k] if per_sample[n] == "ndarray" else block[n][k].item()
                              for n in per_sample})
    return len(ds)
