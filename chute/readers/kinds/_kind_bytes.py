"""Kind `bytes`: opaque per-sample payloads (encoded images, audio, video containers), read as
zero-copy views of the memory-mapped shard files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chute.readers.format._records import Records, RecordWriter, as_bytes, load_records
from chute.readers.kinds._kind import Encoded, OpenArgs

__all__ = ["BYTES", "BytesReader"]


class BytesReader:
    sample_shape = None
    dtype = np.dtype(np.uint8)

    def __init__(self, records: Records):
        self.records = records

    def get(self, shard: int, local: int, global_id: int) -> np.ndarray:
        return self.records.view(shard, global_id)

    def read(self, ids: np.ndarray, out=None) -> list[np.ndarray]:
        return self.records.views(ids)

    def sizes(self, ids: np.ndarray | None) -> np.ndarray:
        lengths = self.records.lengths
        return lengths if ids is None else lengths[ids]

    def gather(self, ids: np.ndarray, out: np.ndarray | None = None):
        """Payloads of `ids` back to back: (data uint8, offsets int64[len(ids)+1]); fills (a
        view of) `out` when it is a contiguous 1-D uint8 array large enough, else allocates."""
        lengths = self.records.lengths[ids]
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if out is not None and (out.dtype != np.uint8 or out.ndim != 1
                                or not out.flags.c_contiguous):
            raise TypeError(f"out must be a contiguous 1-D uint8 array, got {out.dtype} "
                            f"{out.shape}")
        data = out[:total] if out is not None and out.size >= total else np.empty(total, np.uint8)
        # the index lookup is vectorised; the copy is one memcpy per sample
        position = 0
        for part in self.records.views(ids):
            end = position + part.size
            data[position:end] = part
            position = end
        return data, offsets


class _BytesKind:
    name = "bytes"
    role = "payload"  # what the .bin holds, for `chute info`

    def declare(self, field: str, options: dict) -> dict:
        extra = sorted(set(options) - {"media", "dtype"})
        if extra:
            raise ValueError(f"field {field!r}: kind {self.name!r} takes no options {extra}")
        return {"kind": self.name, **options}

    def infer(self, value) -> dict | None:
        if isinstance(value, (bytes, bytearray, memoryview)) or (
                isinstance(value, np.ndarray) and value.ndim != 0 and value.dtype == np.uint8):
            return {"kind": self.name}
        return None

    def complete(self, field: str, spec: dict, value) -> dict:
        return spec

    def check(self, field: str, spec: dict) -> str | None:
        return None

    def files(self, stem: str, spec: dict) -> dict[str, str]:
        return {f"{stem}.bin": self.role, f"{stem}.idx": "index"}

    def encode(self, field: str, spec: dict, value, sample: int) -> Encoded:
        try:
            data = as_bytes(value)
        except TypeError:
            raise ValueError(f"sample {sample} field {field!r}: a {self.name} field needs "
                             f"bytes or a NumPy array, got {type(value).__name__}") from None
        RecordWriter.check_length(field, sample, len(data))
        return Encoded(data, len(data) if self.role == "payload" else 0)

    def writer(self, folder: Path, stem: str, spec: dict) -> _RecordColumn:
        return _RecordColumn(RecordWriter(folder, stem))

    def open(self, args: OpenArgs) -> BytesReader:
        return BytesReader(load_records(args.folders, args.stem, args.counts,
                                        args.trailing_index_ok, args.files))

    def describe(self, spec: dict) -> str:
        media = spec.get("media")
        return f"{self.name} ({media})" if media else self.name


class _RecordColumn:
    def __init__(self, records: RecordWriter):
        self.records = records

    def add(self, encoded: Encoded) -> None:
        self.records.add(encoded.data)

    def commit(self) -> dict[str, dict]:
        return self.records.commit()

    def abort(self) -> None:
        self.records.abort()


BYTES = _BytesKind()
