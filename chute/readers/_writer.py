"""ShardWriter: append samples to a new chute v1 dataset, shard by shard, atomically."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np

from chute.errors import ChuteError
from chute.readers._files import CHECKSUM, HashingWriter, atomic_write_bytes, fsync_dir
from chute.readers._manifest import FORMAT, MANIFEST, VERSION, write_manifest
from chute.readers._mmidx import MAX_LENGTH, encode_index
from chute.readers._sizes import parse_size

__all__ = ["ShardWriter", "infer_fields", "encode_json", "write_index"]


def encode_json(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _kind_of(value) -> str:
    if isinstance(value, (bytes, bytearray, memoryview, np.ndarray)) and np.ndim(value) != 0:
        return "bytes"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, np.generic):
        return value.dtype.str.lstrip("<>|=")
    return "json"


def infer_fields(sample: dict) -> dict[str, str]:
    """Field specs from one sample: bytes-like -> "bytes", numbers -> a numpy dtype
    ("int64", "float64", ...), anything else (dict, list, str, None) -> "json"."""
    return {name: _kind_of(value) for name, value in sample.items()}


def _field_spec(name: str, spec: str) -> dict:
    if spec in ("bytes", "json"):
        return {"kind": spec}
    try:
        dtype = np.dtype(spec)
    except TypeError:
        raise ValueError(f"field {name!r}: {spec!r} is neither 'bytes', 'json' nor a numpy "
                         "dtype such as 'int64'") from None
    return {"kind": "scalar", "dtype": dtype.newbyteorder("<").str}


def _to_scalar(name: str, value, dtype: str, sample: int) -> np.ndarray:
    given = np.asarray(value)
    if given.ndim != 0:
        raise ValueError(f"sample {sample} field {name!r}: a scalar column needs one number, "
                         f"got shape {given.shape}")
    try:
        cast = given.astype(dtype, casting="same_kind")
    except TypeError:
        raise ValueError(f"sample {sample} field {name!r}: {value!r} does not fit the "
                         f"column type {np.dtype(dtype).name}") from None
    if cast.dtype.kind in "iub" and cast != given:
        raise ValueError(f"sample {sample} field {name!r}: {value!r} overflows "
                         f"{np.dtype(dtype).name}")
    return cast


def write_index(path: Path, lengths: list[int]) -> dict:
    """Atomically write the MMIDIDX index of back-to-back records; returns its manifest entry."""
    lengths = np.asarray(lengths, dtype=np.int64)
    pointers = np.zeros_like(lengths)
    np.cumsum(lengths[:-1], out=pointers[1:])
    index = encode_index(lengths, pointers, np.arange(len(lengths) + 1))
    return atomic_write_bytes(path, index)


class _Shard:
    """The files of the shard being written."""

    def __init__(self, folder: Path, fields: dict[str, dict]):
        folder.mkdir()
        self.folder = folder
        self.fields = fields
        self.bins = {n: HashingWriter(folder / f"{n}.bin")
                     for n, s in fields.items() if s["kind"] != "scalar"}
        self.lengths: dict[str, list[int]] = {n: [] for n in self.bins}
        self.scalars: dict[str, list] = {n: [] for n, s in fields.items() if s["kind"] == "scalar"}
        self.count = 0
        self.payload = 0

    def add(self, encoded: dict) -> None:
        for name, data in encoded.items():
            if name in self.bins:
                self.bins[name].write(data)
                self.lengths[name].append(len(data))
                if self.fields[name]["kind"] == "bytes":
                    self.payload += len(data)
            else:
                self.scalars[name].append(data)
        self.count += 1

    def commit(self) -> dict:
        files = {}
        for name, writer in self.bins.items():
            files[writer.path.name] = writer.commit()
            files[f"{name}.idx"] = write_index(self.folder / f"{name}.idx", self.lengths[name])
        for name, values in self.scalars.items():
            column = np.array(values, dtype=self.fields[name]["dtype"])
            buf = io.BytesIO()
            np.save(buf, column, allow_pickle=False)
            files[f"{name}.npy"] = atomic_write_bytes(self.folder / f"{name}.npy", buf.getvalue())
        fsync_dir(self.folder)
        return {"name": self.folder.name, "num_samples": self.count,
                "files": dict(sorted(files.items()))}

    def abort(self) -> None:
        for writer in self.bins.values():
            writer.abort()


class ShardWriter:
    """Write a chute v1 dataset.

    with ShardWriter("train.chute", {"image": "bytes", "label": "int64",
                                     "height": "int32", "width": "int32", "meta": "json"}) as w:
        w.write({"image": jpeg_bytes, "label": 3, "height": 375, "width": 500,
                 "meta": {"key": "n01440764/x.JPEG"}})

    `fields` maps names to "bytes", "json" or a numpy dtype for scalar columns; when None it is
    inferred from the first sample. A new shard starts when the bytes fields of the current one
    would exceed `shard_size` ("1GiB", "64MB", or an int). Every file is written under a temporary
    name, fsynced and renamed; the manifest comes last, so an interrupted write leaves no dataset.
    `manifest_extra` adds keys to the manifest (e.g. {"class_names": [...]}).
    """

    def __init__(self, path, fields: dict[str, str] | None = None, *,
                 shard_size: str | int = "1GiB", class_names: list[str] | None = None,
                 manifest_extra: dict | None = None, overwrite: bool = False):
        self.path = Path(path)
        self.shard_size = parse_size(shard_size)
        self._fields = None if fields is None else {n: _field_spec(n, s) for n, s in fields.items()}
        # keys added to the manifest at close (may be changed until then)
        self.manifest_extra = {"class_names": class_names, **(manifest_extra or {})}
        self._shards: list[dict] = []
        self._current: _Shard | None = None
        self._count = 0
        self._closed = False
        self._prepare_dir(overwrite)

    def _prepare_dir(self, overwrite: bool) -> None:
        if self.path.exists():
            entries = list(self.path.iterdir()) if self.path.is_dir() else [self.path]
            if (self.path / MANIFEST).exists() and overwrite:
                shutil.rmtree(self.path)
            elif entries:
                hint = ("pass overwrite=True (--overwrite) to replace it"
                        if (self.path / MANIFEST).exists() else "choose an empty or new folder")
                raise ChuteError(f"{self.path}: already exists and is not empty; {hint}")
        self.path.mkdir(parents=True, exist_ok=True)

    def __len__(self) -> int:
        return self._count

    def write(self, sample: dict) -> int:
        """Append one sample; returns its global id."""
        if self._closed:
            raise ChuteError(f"{self.path}: writer is closed")
        if self._fields is None:
            self._fields = {n: _field_spec(n, s) for n, s in infer_fields(sample).items()}
        encoded, size = self._encode(sample)
        shard = self._current
        if shard is not None and shard.count and shard.payload + size > self.shard_size:
            self._shards.append(shard.commit())
            shard = None
        if shard is None:
            shard = self._current = _Shard(self.path / f"{len(self._shards):05d}", self._fields)
        shard.add(encoded)
        self._count += 1
        return self._count - 1

    def _encode(self, sample: dict) -> tuple[dict, int]:
        if sample.keys() != self._fields.keys():
            raise ValueError(f"sample {self._count} has fields {sorted(sample)}, the dataset "
                             f"has {sorted(self._fields)}; every sample needs the same fields")
        encoded, size = {}, 0
        for name, spec in self._fields.items():
            value = sample[name]
            if spec["kind"] == "json":
                value = encode_json(value)
            elif spec["kind"] == "bytes":
                value = memoryview(np.ascontiguousarray(value, dtype=np.uint8)
                                   if isinstance(value, np.ndarray) else value).cast("B")
                size += len(value)
            else:
                value = _to_scalar(name, value, spec["dtype"], self._count)
            if spec["kind"] != "scalar" and len(value) > MAX_LENGTH:
                raise ValueError(f"sample {self._count} field {name!r}: {len(value)} bytes is "
                                 "more than an index entry holds (2 GiB - 1)")
            encoded[name] = value
        return encoded, size

    def close(self) -> None:
        """Finish the last shard and write the manifest (makes the dataset visible)."""
        if self._closed:
            return
        if self._current is not None:
            self._shards.append(self._current.commit())
            self._current = None
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "checksum": CHECKSUM,
            "num_samples": self._count,
            "fields": self._fields or {},
            **self.manifest_extra,
            "shards": self._shards,
        }
        write_manifest(self.path, manifest)
        self._closed = True

    def abort(self) -> None:
        """Drop everything written so far."""
        if self._current is not None:
            self._current.abort()
        self._closed = True
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
