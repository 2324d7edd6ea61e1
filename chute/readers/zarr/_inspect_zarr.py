"""`chute info` and `chute verify` on a zarr group read directly (docs/design.md, "Zarr
groups"). A zarr store carries no checksums: verify decodes every chunk of every array and
names the rows whose chunk does not decode to exactly its size."""

from __future__ import annotations

import math
import os

import numpy as np
from tqdm import tqdm

from chute.errors import FormatError
from chute.readers.zarr._zarr import ZarrDataset

__all__ = ["zarr_info", "verify_zarr"]

_ROWS_PER_READ = 256


def _stored_bytes(confined, folder) -> int:
    # A file that leads outside the store is not counted as its bytes: it is a FormatError,
    # as reading it would be (docs/design.md, "Zarr groups"). os.walk enters no symlinked
    # folder, so only a file that is itself a symlink can lead out: only those are resolved.
    total = 0
    for root, _, files in os.walk(confined.check(folder, "array folder")):
        for f in files:
            path = os.path.join(root, f)
            if os.path.islink(path):
                confined.check(path, "file")
            total += os.stat(path).st_size
    return total


def zarr_info(ds: ZarrDataset) -> dict:
    """What `dataset_info` reports, for a zarr group: per array its kind, dtype, shape, chunks
    and bytes on disk (payload = stored chunk bytes of every array)."""
    arrays = {}
    for name, spec in ds.specs.items():
        stored = _stored_bytes(ds.confined(), ds.path / name)
        raw = math.prod(spec["shape"]) * np.dtype(spec["dtype"]).itemsize  # no int64 wrap
        arrays[name] = {**spec, "stored_bytes": stored, "decoded_bytes": raw}
    payload = sum(a["stored_bytes"] for a in arrays.values())
    return {
        "path": str(ds.path),
        "format": "zarr",
        "samples": len(ds),
        "fields": ds.fields,
        "field_types": {name: f"{spec['kind']} {np.dtype(spec['dtype']).name} "
                              f"{tuple(spec['shape'])} chunks {tuple(spec['chunks'])}"
                        for name, spec in ds.specs.items()},
        "shards": 0,
        "class_names": 0,
        "bytes": {"payload": payload, "index": 0, "columns": 0, "metadata": 0,
                  "total": payload},
        "overhead_pct": 0.0,
        "metadata_pct": 0.0,
        "fingerprint": ds.fingerprint,
        "source": None,
        "arrays": arrays,
    }


def verify_zarr(ds: ZarrDataset, *, progress: bool = False) -> list[str]:
    """Decode every row of every array; the problems found, each naming the array and rows."""
    problems = []
    total = sum(reader.num_rows for reader in (ds.reader(n) for n in ds.specs))
    bar = tqdm(total=total, unit="row", disable=not progress, desc="verify")
    for name in ds.specs:
        reader = ds.reader(name)
        chunk_plan = reader._chunk_plan()
        if chunk_plan is not None:
            count, bad = _verify_chunks(chunk_plan, reader, bar)
        else:
            count, bad = _verify_rows(reader, bar)
        if count:
            shown = ", ".join(map(str, bad[:8])) + (", ..." if count > 8 else "")
            problems.append(f"{ds.path / name}: {count} row(s) do not decode ({shown}); "
                            "a chunk is corrupt or missing")
    bar.close()
    return problems


def _verify_rows(reader, bar) -> tuple[int, list[int]]:
    """Rows that do not decode (how many, the first ones), read through the reader."""
    count, bad = 0, list[int]()
    for first in range(0, reader.num_rows, _ROWS_PER_READ):
        ids = np.arange(first, min(first + _ROWS_PER_READ, reader.num_rows), dtype=np.int64)
        status = np.zeros(len(ids), np.uint8)
        reader.read(ids, status=status)
        failed = ids[status != 0]
        count += len(failed)
        bad += failed[:max(0, 9 - len(bad))].tolist()
        bar.update(len(ids))
    return count, bad


def _verify_chunks(p, reader, bar) -> tuple[int, list[int]]:
    """Rows of the chunk files that do not decode, each present chunk decoded once: absent
    chunks are fill values, so the work is bounded by the files that exist, not by the rows
    the metadata claims (issue 26 item 12)."""
    from chute.readers.storage._paths import LeadsOutside
    from chute.readers.zarr._zarr_chunks import _load, _pool

    where = reader._where()

    def failed(chunk: int) -> bool:
        if not os.path.lexists(p.path(chunk)):
            return False  # never written: fill values
        try:
            _load(p, chunk, where)
        except LeadsOutside:
            raise
        except FormatError:
            return True
        return False

    count, bad = 0, list[int]()
    chunks = -(-reader.num_rows // p.rows)
    for first in range(0, chunks, _ROWS_PER_READ):
        block = range(first, min(first + _ROWS_PER_READ, chunks))
        for chunk, bad_chunk in zip(block, _pool().map(failed, block), strict=True):
            rows = range(chunk * p.rows, min((chunk + 1) * p.rows, reader.num_rows))
            if bad_chunk:
                count += len(rows)
                bad += list(rows[:max(0, 9 - len(bad))])
            bar.update(len(rows))
    return count, bad
