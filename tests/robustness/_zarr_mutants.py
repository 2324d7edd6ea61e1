"""Seeded mutants of a zarr group (issue 26 item 16): its metadata documents (`.zarray`,
`.zattrs`, `.zgroup`, `zarr.json`: dtype, shape, chunks, fill value, codecs, order, broken
text, not a regular file), its chunk files (truncated, flipped, emptied, extended, deleted,
a folder, a FIFO, a symlink into another store, swapped) and its keys (chunk files renamed,
extra chunk files and folders).

Each store holds `x` float32 [S, 3, 4] and `label` int32 [S], in one of LAYOUTS (v2 and v3,
codecs, chunk sizes, a sharded v3 array). `build(folder, layout)` writes the clean store
`folder/s.zarr` and, next to it, `folder/other.zarr` of the same layout holding OTHER values
(what a store leading out would deliver). `mutants(seed, count)` returns (name, layout,
apply) triples; `apply(store)` mutates the clean store. Everything is a pure function of
the seed."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.readers._zarr_stores import write_store
from tests.robustness._mutate import cut_bytes, not_a_file

S = 8
Apply = Callable[[Path], None]
# (zarr_format, chunk rows, codec, shard rows)
LAYOUTS = [(2, 2, "zstd", None), (3, 2, "zstd", None), (3, 1, "none", None),
           (2, 3, "blosc", None), (3, 1, "zstd", 4), (2, 1, "none", None)]
_METADATA = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}


def values(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((S, 3, 4)).astype(np.float32),
            "label": rng.integers(-1000, 1000, S).astype(np.int32)}


CLEAN, OTHER = values(1), values(2)


def build(folder: Path, layout: tuple) -> Path:
    """The clean store `folder/s.zarr` and `folder/other.zarr` (OTHER values) beside it."""
    fmt, chunk, codec, shard = layout
    write_store(folder / "other.zarr", OTHER, zarr_format=fmt, chunk=chunk, codec=codec,
                shard=shard)
    return write_store(folder / "s.zarr", CLEAN, zarr_format=fmt, chunk=chunk, codec=codec,
                       shard=shard)


def chunk_files(store: Path) -> list[str]:
    """The chunk (or shard) files of the store, relative to it, sorted."""
    return sorted(str(p.relative_to(store)) for p in store.rglob("*")
                  if p.is_file() and p.name not in _METADATA)


def _doc(store: Path, array: str | None) -> Path:
    folder = store / array if array else store
    for name in ("zarr.json", ".zarray", ".zgroup"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(folder)


def _edit_json(store: Path, array: str | None, change: Callable[[dict, int], None]) -> None:
    path = _doc(store, array)
    meta = json.loads(path.read_text())
    change(meta, 2 if path.name != "zarr.json" else 3)
    path.write_text(json.dumps(meta))


_DTYPES = {2: ["<f2", "<i4", "<f8", "|u1", ">f4", "<c8", "|O", "<U4", "|b1", "x", 5, None],
           3: ["float16", "int32", "float64", "uint8", "complex64", "string", "bool", "bogus",
               5, None, {"name": "int32"}]}
_SHAPES = [[S + 1], [S - 1], [2**40], [0], [-1], [2**62], "x", [], None]
_CHUNKS = [[1], [S * 2], [0], [-1], [2**40], [3]]
_FILLS = [None, "NaN", "Infinity", 1e300, "x", [1], 2**70, True, -1, {"a": 1}]


def _m_meta(rng: random.Random) -> tuple[str, Apply]:
    """One key of an array's metadata set to a hostile value."""
    array = rng.choice(["x", "label"])
    key = rng.choice(["dtype", "shape", "chunks", "fill_value", "codecs", "order", "delete"])
    pick = rng.randrange(1 << 30)

    def change(meta: dict, fmt: int) -> None:
        r = random.Random(pick)
        ndim = len(meta["shape"])
        if key == "dtype":
            meta["dtype" if fmt == 2 else "data_type"] = r.choice(_DTYPES[fmt])
        elif key == "shape":
            first = r.choice(_SHAPES)
            rest = meta["shape"][1:]
            meta["shape"] = first + rest if isinstance(first, list) and first else \
                first if not isinstance(first, list) else rest if r.random() < 0.5 else []
        elif key == "chunks":
            first = r.choice(_CHUNKS)
            if fmt == 2:
                meta["chunks"] = first + meta["chunks"][1:] if r.random() < 0.7 else first
            else:
                grid = meta["chunk_grid"]["configuration"]
                grid["chunk_shape"] = first + grid["chunk_shape"][1:] \
                    if r.random() < 0.7 else first
        elif key == "fill_value":
            meta["fill_value"] = r.choice(_FILLS)
        elif key == "codecs":
            if fmt == 2:
                meta["compressor"] = r.choice([None, {"id": "gzip", "level": 1},
                                               {"id": "bogus"}, {"id": "zstd", "level": "x"},
                                               {"id": "blosc"}, "zstd"])
                if r.random() < 0.3:
                    meta["filters"] = r.choice([[{"id": "delta", "dtype": "<f4"}], "x",
                                                [{"id": "bogus"}]])
            else:
                codecs = meta["codecs"]
                how = r.choice(["empty", "drop-last", "gzip", "bogus", "big-endian", "swap"])
                if how == "empty":
                    meta["codecs"] = []
                elif how == "drop-last":
                    meta["codecs"] = codecs[:-1] or codecs + codecs
                elif how == "gzip":
                    meta["codecs"] = codecs[:1] + [{"name": "gzip",
                                                    "configuration": {"level": 1}}]
                elif how == "bogus":
                    meta["codecs"] = codecs + [{"name": "bogus"}]
                elif how == "big-endian":
                    for c in codecs:
                        if c.get("name") == "bytes":
                            c["configuration"] = {"endian": "big"}
                else:
                    meta["codecs"] = codecs[::-1]
        elif key == "order":
            if fmt == 2:
                meta["order"] = r.choice(["F", "X", None])
            else:
                meta["dimension_names"] = r.choice([["a"] * ndim, 5, ["a"]])
        else:
            victim = r.choice(sorted(meta))
            del meta[victim]

    def apply(store: Path) -> None:
        _edit_json(store, array, change)
    return f"metadata {array} {key} ({pick})", apply


def _m_text(rng: random.Random) -> tuple[str, Apply]:
    """A metadata document's text broken, or the document not a regular file."""
    where = rng.choice(["x", "label", None])
    how = rng.choice(["truncate", "flip", "empty", "delete", "not-utf8", "deep", "big-int",
                      "folder", "fifo", "link-out", "attrs"])
    cut = rng.randrange(1 << 30)

    def apply(store: Path) -> None:
        path = _doc(store, where)
        if cut_bytes(path, how, cut) or not_a_file(
                path, how, store.parent / "other.zarr" / path.relative_to(store)):
            return
        raw = path.read_bytes()
        if how == "not-utf8":
            path.write_bytes(raw.replace(b'"', b'"\xff', 1))
        elif how == "deep":
            path.write_text("[" * 100_000 + "]" * 100_000)
        elif how == "big-int":
            path.write_bytes(raw.replace(b"[", b"[" + b"9" * 5000 + b",", 1))
        else:  # attributes: v2 `.zattrs` beside, v3 "attributes" inside
            attrs = path.with_name(".zattrs")
            text = r_attrs[cut % len(r_attrs)]
            if path.name == "zarr.json":
                meta = json.loads(path.read_text())
                try:
                    meta["attributes"] = json.loads(text)
                except (ValueError, RecursionError):
                    path.write_text(path.read_text()[:-1] + ', "attributes": ' + text + "}")
                    return
                path.write_text(json.dumps(meta))
            else:
                attrs.write_text(text)

    r_attrs = ["{", "[" * 100_000, '{"a": ' + "9" * 5000 + "}", "null", "[1, 2]",
               '{"a": NaN}', '{"a": "\\ud800"}', '"x"']
    return f"metadata text {how} ({where or 'group'}, {cut})", apply


def _c_bytes(rng: random.Random) -> tuple[str, Apply]:
    """One chunk file's bytes damaged."""
    pick, seed = rng.randrange(1 << 30), rng.randrange(1 << 30)
    how = rng.choice(["truncate", "flip", "flip-many", "empty", "extend", "zero-range"])

    def apply(store: Path) -> None:
        r = random.Random(seed)
        files = chunk_files(store)
        path = store / files[pick % len(files)]
        raw = bytearray(path.read_bytes())
        n = len(raw)
        if how == "truncate":
            raw = raw[:r.randrange(n)] if n else raw
        elif how.startswith("flip") and n:
            for _ in range(1 if how == "flip" else r.randint(2, 16)):
                raw[r.randrange(n)] ^= 1 << r.randrange(8)
        elif how == "empty":
            raw = bytearray()
        elif how == "extend":
            raw += r.randbytes(r.randint(1, 300))
        elif how == "zero-range" and n:
            start = r.randrange(n)
            end = min(n, start + r.randint(1, 64))
            raw[start:end] = bytes(end - start)
        path.write_bytes(bytes(raw))
    return f"chunk {how} (file {pick}, {seed})", apply


def _c_replace(rng: random.Random) -> tuple[str, Apply]:
    """One chunk file deleted, or replaced by a folder, a FIFO, a symlink (into the other
    store, or to another chunk of this one), or swapped with another chunk."""
    pick, other_pick = rng.randrange(1 << 30), rng.randrange(1 << 30)
    how = rng.choice(["delete", "folder", "fifo", "link-out", "link-in", "swap",
                      "link-dangling"])

    def apply(store: Path) -> None:
        files = chunk_files(store)
        rel = files[pick % len(files)]
        path = store / rel
        other = files[other_pick % len(files)]
        if how == "swap":
            a, b = path.read_bytes(), (store / other).read_bytes()
            path.write_bytes(b)
            (store / other).write_bytes(a)
            return
        not_a_file(path, how, {"link-out": store.parent / "other.zarr" / rel,
                               "link-in": store / other,
                               "link-dangling": store / "nowhere"}.get(how))
    return f"chunk {how} (file {pick}, other {other_pick})", apply


def _k_keys(rng: random.Random) -> tuple[str, Apply]:
    """Keys: a chunk file renamed, an extra chunk beyond the grid, extra files and folders,
    an array folder renamed or linked out."""
    pick = rng.randrange(1 << 30)
    how = rng.choice(["rename", "extra-chunk", "extra-file", "extra-folder", "array-renamed",
                      "array-link-out", "extra-array"])

    def apply(store: Path) -> None:
        files = chunk_files(store)
        rel = files[pick % len(files)]
        path = store / rel
        if how == "rename":
            path.rename(path.with_name(path.name + "0"))
        elif how == "extra-chunk":
            shutil.copy(path, path.with_name("99" + path.name[1:] if path.name[0].isdigit()
                                             else "99"))
        elif how == "extra-file":
            (path.parent / "junk\xe9.tmp").write_bytes(b"junk")
        elif how == "extra-folder":
            (store / "x" / "notes").mkdir(exist_ok=True)
            (store / "x" / "notes" / "zarr.json").write_text("{")
        elif how == "array-renamed":
            (store / "x").rename(store / "y")
        elif how == "array-link-out":
            shutil.rmtree(store / "x")
            (store / "x").symlink_to(store.parent / "other.zarr" / "x")
        else:
            shutil.copytree(store / "label", store / "extra")
            _edit_json(store, "extra", lambda m, fmt: m.__setitem__("shape", [S + 3]))
    return f"keys {how} (file {pick})", apply


_KINDS = [(_m_meta, 4), (_m_text, 2), (_c_bytes, 3), (_c_replace, 3), (_k_keys, 2)]


def mutants(seed: int, count: int) -> list[tuple[str, tuple, Apply]]:
    """`count` seeded (name, layout, apply) triples."""
    rng = random.Random(seed)
    kinds = [k for k, weight in _KINDS for _ in range(weight)]
    found = []
    for k in range(count):
        layout = LAYOUTS[rng.randrange(len(LAYOUTS))]
        name, apply = rng.choice(kinds)(rng)
        found.append((f"{k:03d} v{layout[0]}-c{layout[1]}-{layout[2]}-s{layout[3]} {name}",
                      layout, apply))
    return found
