"""`chute info` and `chute verify` on a zarr group read directly (docs/design.md, "Zarr
groups"). A zarr store carries no checksums: verify decodes every chunk of every array, names
the rows whose chunk does not decode to exactly its size, and names the chunk files that are
absent (zarr would read their rows as its fill value) unless the array was opened with
missing_chunks="fill"."""

from __future__ import annotations

import math
import os

import numpy as np
from tqdm import tqdm

from chute.errors import FormatError
from chute.readers.zarr._zarr import ZarrDataset, constants_json

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
    and bytes on disk (payload = stored chunk bytes of every array); the 0-d arrays under
    "constants" ({name: {"dtype", "value"}})."""
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
        "constants": constants_json(ds.constants),
    }


def verify_zarr(ds: ZarrDataset, *, progress: bool = False) -> list[str]:
    """Decode every row of every array; the problems found, each naming the array and rows:
    rows that do not decode, and chunk files that are absent (for arrays opened with
    missing_chunks="error", the default)."""
    problems = []
    total = sum(reader.num_rows for reader in (ds.reader(n) for n in ds.specs))
    bar = tqdm(total=total, unit="row", disable=not progress, desc="verify")
    for name in ds.specs:
        reader = ds.reader(name)
        chunk_plan = reader._chunk_plan()
        empty: list = []
        if chunk_plan is not None:
            count, bad, absent = _verify_chunks(chunk_plan, reader, bar)
        else:
            count, bad, absent, empty = _verify_rows(reader, bar)
        if absent:
            problems.append(_absent_problem(ds, name, reader, absent))
        if empty:
            problems.append(_empty_problem(ds, name, empty))
        if count:
            shown = ", ".join(map(str, bad[:8])) + (", ..." if count > 8 else "")
            problems.append(f"{ds.path / name}: {count} row(s) do not decode ({shown}); "
                            "a chunk is corrupt")
    bar.close()
    return problems


def _absent_problem(ds: ZarrDataset, name: str, reader, absent: list[int]) -> str:
    """The problem line of array `name`'s absent chunk files (chunk indices `absent`)."""
    per = reader.chunk_rows()
    spans = [f"{c * per}-{min((c + 1) * per, reader.num_rows) - 1}" if per > 1 else str(c)
             for c in absent[:8]]
    rows = sum(min((c + 1) * per, reader.num_rows) - c * per for c in absent)
    more = ", ..." if len(absent) > 8 else ""
    return (f"{ds.path / name}: array {name!r} has {len(absent)} chunk file(s) missing "
            f"(chunks {', '.join(map(str, absent[:8]))}{more}; rows {', '.join(spans)}{more}; "
            f"{rows} row(s)), which zarr would read as its fill value; restore the store, or, "
            "if the array was written sparse on purpose, pass missing_chunks='fill' "
            "(chute verify --missing-chunks fill)")


def _empty_problem(ds: ZarrDataset, name: str, empty: list[tuple[str, int, int]]) -> str:
    """The problem line of array `name`'s inner chunks recorded empty in their shards
    ((shard file, first row, last row) each)."""
    spans = [str(a) if a == b else f"{a}-{b}" for _, a, b in empty[:8]]
    more = ", ..." if len(empty) > 8 else ""
    rows = sum(b - a + 1 for _, a, b in empty)
    return (f"{ds.path / empty[0][0]}: array {name!r} has {len(empty)} chunk(s) recorded "
            f"empty in its shards (rows {', '.join(spans)}{more}; {rows} row(s)), which zarr "
            "would read as its fill value; restore the store, or, if the array was written "
            "sparse on purpose, pass missing_chunks='fill' (chute verify --missing-chunks "
            "fill)")


def _verify_rows(reader, bar) -> tuple[int, list[int], list[int], list[tuple[str, int, int]]]:
    """Rows that do not decode (how many, the first ones), the chunks whose file is absent
    and the inner chunks recorded empty in a shard ((shard file, first row, last row)), read
    through the reader (arrays zarr reads: sharded, other codecs)."""
    per = reader.chunk_rows()
    chunks = -(-reader.num_rows // per)
    absent = [] if reader.fill_missing else [
        c for first in range(0, chunks, _ROWS_PER_READ)
        for c in reader.absent_chunks(range(first, min(first + _ROWS_PER_READ, chunks)))]
    skip = set(absent)
    empty = [] if reader.fill_missing else reader.empty_spans(
        c for c in range(chunks) if c not in skip)
    empty_rows = {i for _, a, b in empty for i in range(a, b + 1)}
    count, bad = 0, list[int]()
    for first in range(0, reader.num_rows, _ROWS_PER_READ):
        ids = np.arange(first, min(first + _ROWS_PER_READ, reader.num_rows), dtype=np.int64)
        status = np.zeros(len(ids), np.uint8)
        reader.read(ids, status=status)
        failed = [i for i in ids[status != 0].tolist()
                  if i // per not in skip and i not in empty_rows]
        count += len(failed)
        bad += failed[:max(0, 9 - len(bad))]
        bar.update(len(ids))
    return count, bad, absent, empty


def _verify_chunks(p, reader, bar) -> tuple[int, list[int], list[int]]:
    """Rows of the chunk files that do not decode, each present chunk decoded once, and the
    chunks whose file is absent (unless they read as fill values: missing_chunks="fill"):
    the work is bounded by the chunks the metadata claims, which opening bounded by the
    files (issue 26 item 12)."""
    from chute.readers.storage._paths import LeadsOutside
    from chute.readers.zarr._zarr_chunks import _load, _pool

    where = reader._where()
    ABSENT = 2

    def failed(chunk: int) -> int:
        if not os.path.lexists(p.path(chunk)):
            return 0 if p.fill_missing else ABSENT
        try:
            data = _load(p, chunk, where)
        except LeadsOutside:
            raise
        except FormatError:
            return 1
        # a symlink leading nowhere inside the store: the readers find no chunk there
        return ABSENT if data is None and not p.fill_missing else 0

    count, bad, absent = 0, list[int](), list[int]()
    chunks = -(-reader.num_rows // p.rows)
    for first in range(0, chunks, _ROWS_PER_READ):
        block = range(first, min(first + _ROWS_PER_READ, chunks))
        for chunk, result in zip(block, _pool().map(failed, block), strict=True):
            rows = range(chunk * p.rows, min((chunk + 1) * p.rows, reader.num_rows))
            if result == ABSENT:
                absent.append(chunk)
            elif result:
                count += len(rows)
                bad += list(rows[:max(0, 9 - len(bad))])
            bar.update(len(rows))
    return count, bad, absent
