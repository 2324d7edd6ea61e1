"""Seeded mutations of a dataset folder: its manifest (values, deleted keys, duplicated
entries, hostile paths, broken text), its indexes (bytes and structured pointer/length edits),
its columns (bytes and extreme values) and its payloads (flips, cuts, zeroed ranges), and its
files as files (deleted, emptied, a folder, a FIFO, a symlink leading out, swapped between
shards). A file whose size changes has its manifest size "forged" half of the time, so the
cheap size check at open does not stop the mutation before the deeper checks see it. Image
datasets also get JPEG headers that claim another size (decompression bombs among them).

`mutants(root, seed, count)` returns (name, apply) pairs; `apply(copy)` mutates a copy of
`root`. Everything is a pure function of the seed and the clean dataset."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

Apply = Callable[[Path], None]

_VALUES = [None, -1, 0, 1, 7, 2**31, 2**63, -(2**63), 10**30, 1.5, float("nan"), float("inf"),
           "x", "", [], {}, True, "../evil", "/tmp", [[[[1]]]], {"kind": "bytes"}]
_IDX_HEADER = struct.Struct("<9sQBQQ")


# -- the manifest as JSON ---------------------------------------------------------------------
def _nodes(obj, path=()):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield path + (key,)
            yield from _nodes(value, path + (key,))
    elif isinstance(obj, list):
        for k, value in enumerate(obj):
            yield path + (k,)
            yield from _nodes(value, path + (k,))


def _parent(m, path):
    for key in path[:-1]:
        m = m[key]
    return m


def _manifest(root: Path) -> dict:
    return json.loads((root / "chute.json").read_text())


def _save(root: Path, m: dict) -> None:
    (root / "chute.json").write_text(json.dumps(m))


def _edit(change: Callable[[dict], None]) -> Apply:
    def apply(root: Path) -> None:
        m = _manifest(root)
        change(m)
        _save(root, m)
    return apply


def _m_value(rng: random.Random, clean: dict):
    path = rng.choice(list(_nodes(clean)))
    value = rng.choice(_VALUES)

    def change(m):
        _parent(m, path)[path[-1]] = value
    return f"manifest {'/'.join(map(str, path))} = {value!r}"[:120], _edit(change)


def _m_delete(rng: random.Random, clean: dict):
    path = rng.choice([p for p in _nodes(clean) if isinstance(_parent(clean, p), dict)])

    def change(m):
        del _parent(m, path)[path[-1]]
    return f"manifest delete {'/'.join(map(str, path))}", _edit(change)


def _m_duplicate(rng: random.Random, clean: dict):
    lists = [p for p in _nodes(clean) if isinstance(_parent(clean, p + ("x",)), list)
             and _parent(clean, p + ("x",))]
    path = rng.choice(lists)

    def change(m):
        items = _parent(m, path + ("x",))
        items.append(json.loads(json.dumps(rng_choice(items))))
    rng_choice = random.Random(rng.random()).choice
    return f"manifest duplicate an entry of {'/'.join(map(str, path))}", _edit(change)


def _outside(root: Path) -> Path:
    """A sibling folder of the mutated copy (what a hostile path points at)."""
    evil = root.parent / "evil"
    evil.mkdir(exist_ok=True)
    (evil / "x.bin").write_bytes(b"outside" * 10)
    return evil


def _m_hostile(rng: random.Random, clean: dict):
    shards = clean["shards"]
    k = rng.randrange(len(shards))
    name = shards[k]["name"]
    files = sorted(shards[k]["files"])
    target = rng.choice(["../evil", "/tmp", f"{name}/../../evil", "..", "."])
    how = rng.choice(["shard", "file", "stem", "link-folder", "link-file"])

    def apply(root: Path):
        evil = _outside(root)
        m = _manifest(root)
        if how == "shard":
            for f in (root / name).iterdir():
                shutil.copy(f, evil / f.name)
            m["shards"][k]["name"] = target
        elif how == "file":
            f = rng_file
            m["shards"][k]["files"][f"../evil/{f}"] = m["shards"][k]["files"].pop(f)
        elif how == "stem":
            field = next(iter(m["fields"]))
            m["fields"][field]["file"] = f"../evil/{field}"
        elif how == "link-folder":
            shutil.copytree(root / name, evil / name)
            shutil.rmtree(root / name)
            (root / name).symlink_to(evil / name)
        else:
            shutil.copy(root / name / rng_file, evil / rng_file)
            (root / name / rng_file).unlink()
            (root / name / rng_file).symlink_to(evil / rng_file)
        _save(root, m)

    rng_file = rng.choice(files)
    return f"hostile {how} {target if how == 'shard' else rng_file} (shard {name})", apply


def cut_bytes(path: Path, how: str, cut: int) -> bool:
    """Truncate file `path` at (`how` "truncate"), or flip one bit at ("flip"), the offset
    `cut` modulo its size, or empty it ("empty"); return whether `how` was one of these.

    Args:
        path: the file.
        how: "truncate", "flip", "empty", or another mutation (then nothing is done).
        cut: a seeded number that picks the offset and the bit.
    """
    if how not in ("truncate", "flip", "empty"):
        return False
    raw = bytearray(path.read_bytes())
    if how == "truncate":
        raw = raw[:cut % len(raw)]
    elif how == "flip":
        raw[cut % len(raw)] ^= 1 << (cut % 8)
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    return True


def not_a_file(path: Path, how: str, target: Path | None) -> bool:
    """Delete file `path` (`how` "delete") or put a folder ("folder"), a FIFO ("fifo") or a
    symlink to `target` ("link-out", "link-in", any "link-...") in its place; return whether
    `how` was one of these.

    Args:
        path: the file.
        how: "delete", "folder", "fifo", "link-...", or another mutation (then nothing is
            done).
        target: where a "link-..." symlink leads.
    """
    if how not in ("delete", "folder", "fifo") and not how.startswith("link-"):
        return False
    path.unlink()
    if how == "folder":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    elif how != "delete":
        assert target is not None, f"a {how} needs a target"
        path.symlink_to(target)
    return True


def _m_text(rng: random.Random, clean: dict):
    how = rng.choice(["truncate", "flip", "deep", "empty", "folder", "not-utf8", "missing"])

    def apply(root: Path):
        path = root / "chute.json"
        if cut_bytes(path, how, cut):
            return
        raw = path.read_bytes()
        if how == "deep":
            path.write_text("[" * 200_000 + "]" * 200_000)
        elif how == "folder":
            path.unlink()
            path.mkdir()
        elif how == "not-utf8":
            path.write_bytes(raw.replace(b'"name"', b'"n\xffme"', 1))
        else:
            path.unlink()

    cut = rng.randrange(1 << 30)
    return f"manifest text {how}", apply


# -- files ------------------------------------------------------------------------------------
def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.name != "chute.json")


def _forge(root: Path, rel: str) -> None:
    """Set the manifest size of file `rel` to its current size (the checksum stays)."""
    path = root / rel
    size = path.stat().st_size if path.is_file() else 0
    m = _manifest(root)
    parts = Path(rel).parts
    for shard in m["shards"]:
        if len(parts) == 2 and shard.get("name") == parts[0] and parts[1] in shard["files"]:
            shard["files"][parts[1]]["size"] = size
    for spec in m["fields"].values():
        if spec.get("file") == rel and "size" in spec:
            spec["size"] = size
    _save(root, m)


def _f_bytes(rng: random.Random, files: list[str]):
    rel = rng.choice(files)
    how = rng.choice(["flip-header", "flip", "flip-many", "zero-range", "truncate", "extend",
                      "empty"])
    forge = rng.random() < 0.7
    seed = rng.randrange(1 << 30)

    def apply(root: Path):
        r = random.Random(seed)
        path = root / rel
        raw = bytearray(path.read_bytes())
        n = len(raw)
        if how.startswith("flip") and n:
            lo, hi = (0, min(n, 128)) if how == "flip-header" else (0, n)
            for _ in range(1 if how != "flip-many" else r.randint(2, 16)):
                raw[r.randrange(lo, hi)] ^= 1 << r.randrange(8)
        elif how == "zero-range" and n:
            start = r.randrange(n)
            end = min(n, start + r.randint(1, 64))
            raw[start:end] = bytes(end - start)
        elif how == "truncate":
            raw = raw[:r.randrange(n)] if n else raw
        elif how == "extend":
            raw += bytes(r.randrange(256) for _ in range(r.randint(1, 300)))
        elif how == "empty":
            raw = bytearray()
        path.write_bytes(bytes(raw))
        if forge:
            _forge(root, rel)

    return f"{rel} {how}{' (size forged)' if forge else ''}", apply


def _f_replace(rng: random.Random, files: list[str]):
    rel = rng.choice(files)
    how = rng.choice(["delete", "folder", "fifo", "link-out", "swap"])
    others = [f for f in files if Path(f).name == Path(rel).name and f != rel]
    other = rng.choice(others) if others else None
    forge = rng.random() < 0.5

    def apply(root: Path):
        path = root / rel
        target = None
        if how == "link-out":  # a copy outside, so the link leads to the right bytes
            target = _outside(root) / path.name
            shutil.copy(path, target)
        if not_a_file(path, how, target):
            return
        if other is not None:
            a, b = path.read_bytes(), (root / other).read_bytes()
            path.write_bytes(b)
            (root / other).write_bytes(a)
            if forge:
                _forge(root, rel)
                _forge(root, other)

    return f"{rel} {how}{' with ' + other if how == 'swap' and other else ''}", apply


def _f_index(rng: random.Random, files: list[str]):
    """Structured edits of one `.idx` entry (sizes unchanged)."""
    rel = rng.choice([f for f in files if f.endswith(".idx")])
    what = rng.choice(["pointer", "length", "n", "m", "dtype"])
    seed = rng.randrange(1 << 30)

    def apply(root: Path):
        r = random.Random(seed)
        path = root / rel
        raw = bytearray(path.read_bytes())
        _, _, _, n, m = _IDX_HEADER.unpack_from(raw)
        off = _IDX_HEADER.size
        if what in ("n", "m"):
            at = 9 + 8 + 1 + (0 if what == "n" else 8)
            value = r.choice([0, 1, n + 1, max(n - 1, 0), 2**32, 2**63 - 1, 2**64 - 1])
            struct.pack_into("<Q", raw, at, value)
        elif what == "dtype":
            struct.pack_into("<B", raw, 17, r.choice([0, 2, 5, 8, 9, 255]))
        elif n:
            k = r.randrange(n)
            if what == "pointer":
                pointers = np.frombuffer(raw, "<i8", n, off + 4 * n)
                value = r.choice([2**63 - 1, 2**62, -1, -(2**63), int(pointers[r.randrange(n)]),
                                  int(pointers[k]) + 1, 2**63 - 8])
                struct.pack_into("<q", raw, off + 4 * n + 8 * k, value)
            else:
                lengths = np.frombuffer(raw, "<i4", n, off)
                value = r.choice([2**31 - 1, -1, 0, int(lengths[k]) + 1, -(2**31)])
                struct.pack_into("<i", raw, off + 4 * k, value)
        path.write_bytes(bytes(raw))

    return f"{rel} index {what}", apply


def _f_column(rng: random.Random, files: list[str]):
    """One value of a `.npy` column set to an extreme (size unchanged)."""
    rel = rng.choice([f for f in files if f.endswith(".npy")])
    seed = rng.randrange(1 << 30)

    def apply(root: Path):
        r = random.Random(seed)
        column = np.load(root / rel, mmap_mode="r+")
        flat = column.reshape(-1)
        if not flat.size:
            return
        if flat.dtype.kind in "iu":
            info = np.iinfo(flat.dtype)
            value = r.choice([-1, 0, info.max, info.min, 3, 1000, info.max // 2])
        else:
            value = r.choice([np.nan, np.inf, -1e30, 0.0])
        flat[r.randrange(flat.size)] = np.array(value).astype(flat.dtype)
        column.flush()
        del column

    return f"{rel} extreme value", apply


def _f_jpeg(rng: random.Random, files: list[str]):
    """One stored JPEG's header claims another size (a decompression bomb: 30000 x 30000,
    65500 x 65500; or just not the size of its height/width columns). Sizes unchanged."""
    images = [f for f in files if f.endswith("image.bin")]
    if not images:
        return _f_bytes(rng, files)
    rel = rng.choice(images)
    height, width = rng.choice([(30000, 30000), (65500, 65500), (1, 65500), (7, 9)])
    seed = rng.randrange(1 << 30)

    def apply(root: Path):
        from chute.readers.format._mmidx import read_index

        index = read_index((root / rel).with_suffix(".idx"))
        k = random.Random(seed).randrange(len(index.lengths))
        start, size = int(index.pointers[k]), int(index.lengths[k])
        raw = bytearray((root / rel).read_bytes())
        record = bytes(raw[start:start + size])
        at = max(record.find(b"\xff\xc0"), record.find(b"\xff\xc2"))
        if at < 0:
            raise ValueError("no SOF marker in the record")
        struct.pack_into(">HH", raw, start + at + 5, height, width)
        (root / rel).write_bytes(bytes(raw))

    return f"{rel} a JPEG header claims {height}x{width}", apply


_MANIFEST_OPS = (_m_value, _m_delete, _m_duplicate, _m_hostile, _m_text)
_FILE_OPS = (_f_bytes, _f_jpeg, _f_bytes, _f_replace, _f_index, _f_column)


def mutants(root: Path, seed: int, count: int) -> list[tuple[str, Apply]]:
    """`count` seeded mutations of dataset `root`, manifest and file ones interleaved."""
    rng = random.Random(seed)
    clean = _manifest(root)
    files = _files(root)
    found = []
    for k in range(count):  # one manifest mutation in three, the others on files
        if k % 3 == 0:
            name, apply = _MANIFEST_OPS[(k // 3) % len(_MANIFEST_OPS)](rng, clean)
        else:
            name, apply = _FILE_OPS[k % len(_FILE_OPS)](rng, files)
        found.append((f"#{k} {name}", apply))
    return found
