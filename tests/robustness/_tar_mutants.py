"""Seeded mutants of a WebDataset tar (issue 26 item 16): member names that leave the tar's
tree (`../`, absolute, long names), members that are links, folders, FIFOs or devices,
duplicated and split samples, hostile labels and JSON, headers claiming other sizes, flipped
header bytes and truncations, and gzip wrappers cut short.

A tar holds N samples "KKK.jpg" + "KKK.cls" (+ "KKK.json"); sample k's image is `image(k)`
and its label k. `mutants(seed, count)` returns (name, build) pairs: `build(path)` writes the
mutated tar to `path` and returns the sample indices the mutation touched (which may be
skipped or lost; every other sample must be stored). Everything is a pure function of the
seed."""

from __future__ import annotations

import functools
import gzip
import io
import json
import random
import tarfile
from collections.abc import Callable
from pathlib import Path

from tests._media import jpeg

N = 6
Build = Callable[[Path], set[int]]
ALL = set(range(N))


@functools.cache
def image(k: int) -> bytes:
    return jpeg(16 + 2 * k, 20, seed=k)


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _members(prefix: Callable[[int], str] = lambda k: f"{k:03d}") -> list:
    out = []
    for k in range(N):
        out.append(_file(f"{prefix(k)}.jpg", image(k)))
        out.append(_file(f"{prefix(k)}.cls", str(k).encode()))
        out.append(_file(f"{prefix(k)}.json", json.dumps({"k": k}).encode()))
    return out


def _tar(members: list, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _write(path: Path, data: bytes, touched: set[int]) -> set[int]:
    path.write_bytes(data)
    return touched


def _m_name(rng: random.Random) -> tuple[str, Build]:
    """Every member of one sample (or all samples) under a hostile name."""
    # names whose base name stays "KKK.ext": the sample must be stored (its key is a name,
    # never a path)
    same_base = ["../{k:03d}", "../../etc/{k:03d}", "/abs/dir/{k:03d}", "a/../../{k:03d}",
                 "./{k:03d}", "x" * 300 + "/{k:03d}", "d\u00e9j\u00e0/{k:03d}", "{k:03d}\nname",
                 "{k:03d} "]
    # names whose base name starts with a dot: no "jpg" field is left (WebDataset keys end at
    # the first dot), so the sample may be skipped
    other_base = ["{k:03d}/../..{k:03d}", "..\\{k:03d}"]
    form, every = rng.choice(same_base + other_base), rng.random() < 0.5
    victim = rng.randrange(N)

    def build(path: Path) -> set[int]:
        def prefix(k: int) -> str:
            return form.format(k=k) if every or k == victim else f"{k:03d}"

        renamed = ALL if every else {victim}
        return _write(path, _tar(_members(prefix)), renamed if form in other_base else set())
    return f"name {form!r}{' (all)' if every else f' (sample {victim})'}", build


def _m_type(rng: random.Random) -> tuple[str, Build]:
    """One sample's image member replaced by a link, folder, FIFO or device."""
    k = rng.randrange(N)
    kind = rng.choice(["symlink", "hardlink", "dir", "fifo", "chr", "symlink-out"])

    def build(path: Path) -> set[int]:
        members = _members()
        info = tarfile.TarInfo(f"{k:03d}.jpg")
        info.type = {"symlink": tarfile.SYMTYPE, "symlink-out": tarfile.SYMTYPE,
                     "hardlink": tarfile.LNKTYPE, "dir": tarfile.DIRTYPE,
                     "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}[kind]
        info.linkname = {"symlink": "000.cls", "symlink-out": "/etc/passwd",
                         "hardlink": "../../etc/passwd"}.get(kind, "")
        members[3 * k] = (info, None)
        return _write(path, _tar(members), {k})
    return f"type {kind} (sample {k})", build


def _m_label(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(N)
    # b" K \n" is label k (white space is stripped); the others are not integers or not int64
    label = rng.choice([b"9" * 30, b"-1" * 2, b"", b"\xff\xfe", b"1e3", b" %d \n" % k, b"0x10",
                        b"9" * 5000, b"\x00", b"nan"])

    def build(path: Path) -> set[int]:
        members = _members()
        members[3 * k + 1] = _file(f"{k:03d}.cls", label)
        return _write(path, _tar(members), {k})
    return f"label {label[:12]!r} (sample {k})", build


def _m_json(rng: random.Random) -> tuple[str, Build]:
    k = rng.randrange(N)
    text = rng.choice([b"[" * 100000, b"{" + b'"a":' * 1 + b"9" * 5000 + b"}", b"\xff",
                       b"null", b"[1,2]", b'{"key": "forged"}', b"{", b'"' + b"x" * 100000
                       + b'"'])

    def build(path: Path) -> set[int]:
        members = _members()
        members[3 * k + 2] = _file(f"{k:03d}.json", text)
        return _write(path, _tar(members), {k})
    return f"json {text[:12]!r} (sample {k})", build


def _m_order(rng: random.Random) -> tuple[str, Build]:
    """Samples duplicated, split (members of one key apart) or an image member twice."""
    k, other = rng.randrange(N), rng.randrange(N)
    kind = rng.choice(["duplicate", "split", "image twice", "reversed"])

    def build(path: Path) -> set[int]:
        members = _members()
        if kind == "duplicate":
            members += members[3 * k: 3 * k + 3]
            touched = {k}
        elif kind == "split":
            members.append(members.pop(3 * k + 1))  # its label after every other sample
            touched = {k}
        elif kind == "image twice":
            # two "jpg" members in one sample: which is its image is ambiguous
            members.insert(3 * k + 1, _file(f"{k:03d}.jpg", image(other)))
            touched = {k}
        else:
            members.reverse()
            touched = set()
        return _write(path, _tar(members), touched)
    return f"order {kind} (sample {k}, other {other})", build


def _m_bytes(rng: random.Random) -> tuple[str, Build]:
    """Raw damage: a cut, flipped header bytes, a size field claiming more or less, gzip."""
    kind = rng.choice(["cut", "flip header", "size", "gzip cut", "zeros", "garbage"])
    seed = rng.randrange(2**32)

    def build(path: Path) -> set[int]:
        r = random.Random(seed)
        data = bytearray(_tar(_members(), tarfile.USTAR_FORMAT))
        if kind == "cut":
            data = data[: r.randrange(len(data))]
        elif kind == "flip header":
            block = r.choice(_header_offsets(bytes(data)))
            for _ in range(4):
                data[block + r.randrange(512)] ^= 1 << r.randrange(8)
        elif kind == "size":  # an octal size field rewritten, checksum fixed
            block = 0
            field = r.choice([b"77777777777", b"00000000000", b"-0000000001",
                              b"\x80" + b"\xff" * 10])
            data[block + 124: block + 135] = field
            _fix_checksum(data, block)
        elif kind == "gzip cut":
            packed = gzip.compress(bytes(data))
            path.write_bytes(packed[: r.randrange(10, len(packed))])
            return ALL
        elif kind == "zeros":
            start = r.randrange(len(data))
            data[start: start + 1024] = bytes(len(data[start: start + 1024]))
        else:
            data = bytearray(r.randbytes(r.randrange(1, 4096)))
        return _write(path, bytes(data), ALL)
    return f"bytes {kind} ({seed})", build


def _header_offsets(data: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [m.offset for m in tar.getmembers()]


def _fix_checksum(data: bytearray, block: int) -> None:
    header = data[block: block + 512]
    header[148:156] = b" " * 8
    data[block + 148: block + 156] = b"%06o\x00 " % sum(header)


_KINDS = [(_m_name, 3), (_m_type, 2), (_m_label, 1), (_m_json, 1), (_m_order, 1), (_m_bytes, 2)]


def mutants(seed: int, count: int) -> list[tuple[str, Build]]:
    """`count` seeded (name, build) pairs."""
    rng = random.Random(seed)
    kinds = [k for k, weight in _KINDS for _ in range(weight)]
    return [(f"{k:03d} {name}", build) for k in range(count)
            for name, build in [rng.choice(kinds)(rng)]]
