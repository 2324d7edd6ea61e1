"""Datasets of other loaders for the `chute convert mds|litdata` tests: the real writers
(`mosaicml-streaming`, `litdata`, installed with the `test-peers` extra; their tests skip
without them) and small hand-written fixtures of the documented on-disk layouts, which the
tests use where the libraries are absent (and the Ray engine test uses always)."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import multiprocessing
import struct
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest


def import_streaming():
    """`streaming` (mosaicml-streaming), or skip. Its package __init__ imports its vision
    datasets, which import torchvision; chute's test environment has no torchvision (torch
    stays the pinned CPU build), so where it is absent a stand-in module is installed for that
    import only and removed after it: MDSWriter, the MDS reader and StreamingDataset never call
    it."""
    if importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming is not installed (pip install 'chute[test-peers]')")
    if "streaming" in sys.modules:
        return sys.modules["streaming"]
    modules: dict[str, types.ModuleType] = {}
    if importlib.util.find_spec("torchvision") is None:
        modules = {name: types.ModuleType(name) for name in
                   ("torchvision", "torchvision.datasets", "torchvision.transforms",
                    "torchvision.transforms.functional")}

        class VisionDataset:  # what streaming.vision subclasses
            pass

        modules["torchvision.datasets"].VisionDataset = VisionDataset  # type: ignore[attr-defined]
        modules["torchvision.datasets"].CIFAR10 = VisionDataset  # type: ignore[attr-defined]
        modules["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]
        for name, module in modules.items():
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.update(modules)
    try:
        import streaming
    except ImportError as exc:
        pytest.skip(f"mosaicml-streaming does not import here ({exc})")
    finally:
        for name in modules:  # gone again: later code asking for torchvision finds none
            sys.modules.pop(name, None)
    return streaming


def import_litdata():
    """`litdata`, or skip."""
    if importlib.util.find_spec("litdata") is None:
        pytest.skip("litdata is not installed (pip install 'chute[test-peers]')")
    try:
        import litdata
    except ImportError as exc:
        pytest.skip(f"litdata does not import here ({exc})")
    return litdata


@contextlib.contextmanager
def start_method_kept() -> Iterator[None]:
    """The multiprocessing start method as it was after the block (`litdata.optimize` sets
    "spawn" for the whole process, with force=True)."""
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def jpeg_bytes(seed: int, size=(12, 10)) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(out, format="JPEG",
                                                                          quality=90)
    return out.getvalue()


def decoded(data) -> np.ndarray:
    """The pixels of encoded image bytes (a chute bytes value is a uint8 array)."""
    from PIL import Image

    raw = data if isinstance(data, bytes) else bytes(np.asarray(data, np.uint8))
    return np.asarray(Image.open(io.BytesIO(raw)))


# -- the documented layouts, written by hand ----------------------------------------------------
def write_mds_layout(folder: Path, rows: list[dict], columns: dict[str, str],
                     per_shard: int = 3, compression: str | None = None) -> Path:
    """An MDS dataset of `rows` as MDSWriter lays it out (jpeg = bytes given, int, str,
    float32, ndarray:DTYPE:SHAPE, json); `compression` "zstd" or None."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(columns)
    encodings = [columns[n] for n in names]
    fixed = {"int": 8, "float32": 4, "int32": 4}

    def size_of(encoding: str) -> int | None:
        if encoding.startswith("ndarray:") and encoding.count(":") == 2:
            _, dtype, shape = encoding.split(":")
            return int(np.prod([int(d) for d in shape.split(",")])) * np.dtype(dtype).itemsize
        return fixed.get(encoding)

    sizes = [size_of(e) for e in encodings]

    def encode(encoding: str, value) -> bytes:
        if encoding in ("jpeg", "bytes"):
            return value
        if encoding == "str":
            return value.encode()
        if encoding == "json":
            return json.dumps(value).encode()
        if encoding == "int":
            return np.int64(value).tobytes()
        if encoding in ("float32", "int32"):
            return np.dtype(encoding).type(value).tobytes()
        return np.asarray(value).tobytes()  # a fixed ndarray

    shards = []
    for s, start in enumerate(range(0, len(rows), per_shard)):
        records = []
        for row in rows[start:start + per_shard]:
            data = [encode(e, row[n]) for n, e in zip(names, encodings, strict=True)]
            head = np.array([len(d) for d, size in zip(data, sizes, strict=True) if size is None],
                            np.uint32).tobytes()
            records.append(head + b"".join(data))
        n = len(records)
        offsets = np.cumsum([0] + [len(r) for r in records]) + 4 + 4 * (n + 1)
        shard = np.uint32(n).tobytes() + offsets.astype(np.uint32).tobytes() + b"".join(records)
        raw = f"shard.{s:05d}.mds"
        zipped = None
        if compression == "zstd":
            import zstandard

            zipped = raw + ".zstd"
            (folder / zipped).write_bytes(zstandard.ZstdCompressor().compress(shard))
        else:
            (folder / raw).write_bytes(shard)
        shards.append({"column_encodings": encodings, "column_names": names,
                       "column_sizes": sizes, "compression": compression, "format": "mds",
                       "hashes": [], "raw_data": {"basename": raw, "bytes": len(shard),
                                                  "hashes": {}},
                       "samples": n, "size_limit": 1 << 26, "version": 2,
                       "zip_data": None if zipped is None else
                       {"basename": zipped, "bytes": (folder / zipped).stat().st_size,
                        "hashes": {}}})
    (folder / "index.json").write_text(json.dumps({"shards": shards, "version": 2}))
    return folder


def _dict_spec(keys: list[str]) -> str:
    leaf = {"type": None, "context": None, "children_spec": []}
    return json.dumps([1, {"type": "builtins.dict", "context": json.dumps(keys),
                           "children_spec": [leaf] * len(keys)}])


def write_litdata_layout(folder: Path, rows: list[dict], formats: dict[str, str],
                         per_chunk: int = 3) -> Path:
    """A litdata dataset of `rows` as its BinaryWriter lays out uncompressed chunks (formats:
    jpeg = the bytes given, int, float, str, bytes, numpy, json = plain JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = list(formats)
    numpy_codes = {"int8": 0, "int16": 1, "int32": 2, "int64": 3, "uint8": 4, "uint16": 5,
                   "uint32": 6, "uint64": 7, "float16": 8, "float32": 9, "float64": 10}

    def encode(fmt: str, value) -> bytes:
        if fmt in ("jpeg", "bytes"):
            return value
        if fmt == "str":
            return value.encode()
        if fmt == "json":
            return json.dumps(value).encode()
        if fmt == "int":
            return struct.pack("<q", value)
        if fmt == "float":
            return struct.pack("<d", value)
        array = np.ascontiguousarray(value)  # numpy
        return (np.array([numpy_codes[array.dtype.name], array.ndim, *array.shape],
                         np.uint32).tobytes() + array.tobytes())

    chunks = []
    for c, start in enumerate(range(0, len(rows), per_chunk)):
        items = []
        for row in rows[start:start + per_chunk]:
            data = [encode(formats[k], row[k]) for k in keys]
            items.append(np.array([len(d) for d in data], np.uint32).tobytes() + b"".join(data))
        n = len(items)
        offsets = np.cumsum([0] + [len(i) for i in items]) + 4 + 4 * (n + 1)
        name = f"chunk-0-{c}.bin"
        body = np.uint32(n).tobytes() + offsets.astype(np.uint32).tobytes() + b"".join(items)
        (folder / name).write_bytes(body)
        chunks.append({"chunk_bytes": len(body), "chunk_size": n, "dim": None,
                       "filename": name})
    config = {"chunk_bytes": 1 << 26, "chunk_size": None, "compression": None,
              "data_format": [formats[k] for k in keys], "data_spec": _dict_spec(keys),
              "encryption": None, "item_loader": "PyTreeLoader"}
    (folder / "index.json").write_text(json.dumps({"chunks": chunks, "config": config}))
    return folder
