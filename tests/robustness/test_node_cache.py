"""Seeded hostile contents of the node cache (issue 37 items 3, 4, 7; docs/storage.md, "The
node cache"), in this process under a per-trial alarm. Each trial builds a cache holding one
version of a dataset (6 shards' payload files, its manifest and listing) in use, plants one
or more hostile things in it (symlinks leading out, FIFOs, folders, truncated or rewritten
files, files others may write, crafted `.usage` and `.payload`), then reads every payload
file through `ShardFiles` under a cache limit that makes it evict, twice (a second process's
first map is simulated by a fresh ShardFiles).

Outcomes: "correct" (every byte the source's), "named" (a one-line chute error), or a
failure: "raw" (any other exception, or an error of several lines), "hang" (over LIMIT_S),
"wrong" (a byte delivered that is not the source's), "lost" (a file outside the cache
deleted or changed, or a new one written there). `pytest -s` prints the counts;
CHUTE_ROBUSTNESS_SEED explores another seed, CHUTE_ROBUSTNESS_CACHE sets the count."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
import xxhash

from chute.errors import ChuteError
from chute.readers.storage._files import map_path
from chute.readers.storage._node_cache import NodeCache, VersionPin
from chute.readers.storage._shard_files import RemoteFile, ShardFiles
from tests.robustness._alarm import Hang, alarm

SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))
COUNT = int(os.environ.get("CHUTE_ROBUSTNESS_CACHE", "60"))
LIMIT_S = 20
SHARDS = 6
FAILURES = ("raw", "hang", "wrong", "lost")


class Source:
    """The "server": each payload file's bytes; downloads write them as chute's client does
    (a temporary name, renamed into place)."""

    def __init__(self, rng: random.Random):
        self.data = {f"{k:05d}/image.bin": rng.randbytes(700 + 97 * k) for k in range(SHARDS)}

    def where(self, name: str) -> str:
        return f"s3://bucket/ds/{name}"

    def download(self, name, dest, size, checksum, *, temp):
        Path(temp).write_bytes(self.data[name])
        os.replace(temp, dest)


def outside_tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _usage(rng: random.Random, now: float) -> bytes:
    choices = [
        {"files": -(10**12), "parts": {}, "counted": now},
        {"files": 0, "parts": {}, "counted": now + 10**8},
        '{"files": 1e400, "parts": {}, "counted": ' + f"{now:f}" + "}",
        {"files": 0, "parts": {"../../outside/victim.txt": 10}, "counted": now},
        {"files": 0, "parts": {"../outside/.victim.txt.part-1-ab": 10}, "counted": now},
        {"files": 0, "parts": {"u/v/00000/.image.bin.part-999999-ab": -5}, "counted": now},
        {"files": "many", "parts": [], "counted": None},
        '{"files": 0, "parts": {}, "counted": NaN}',
        "[" * 100_000,
        b"\xff\xfe\x00garbage",
    ]
    pick = rng.choice(choices)
    if isinstance(pick, bytes):
        return pick
    return (pick if isinstance(pick, str) else json.dumps(pick)).encode()


def plant(
    rng: random.Random, cache: NodeCache, folder: Path, outside: Path, source: Source
) -> list[str]:
    """One to three hostile things; returns what was planted (for the report)."""
    planted = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(
            [
                "root symlink",
                "shard symlink",
                "payload symlink",
                "truncated",
                "fifo",
                "folder",
                "other bytes",
                "writable",
                "usage",
                "usage fifo",
                "usage folder",
                "listing",
                "pin symlink",
                "part symlink",
            ]
        )
        shard = folder / f"{rng.randrange(SHARDS):05d}"
        payload = shard / "image.bin"
        if kind in (
            "payload symlink",
            "truncated",
            "fifo",
            "folder",
            "other bytes",
            "writable",
            "pin symlink",
        ):  # on a regular file: undo an earlier plant
            if shard.is_symlink():
                shard.unlink()
            shard.mkdir(exist_ok=True)
            if payload.is_dir() and not payload.is_symlink():
                shutil.rmtree(payload)
            elif payload.is_symlink() or payload.exists() and not payload.is_file():
                payload.unlink()
            if not payload.exists():
                payload.write_bytes(source.data[str(payload.relative_to(folder))])
        if kind == "root symlink":
            os.symlink(outside, cache.root / f"link{rng.randrange(99)}")
        elif kind == "shard symlink":
            shutil.rmtree(shard, ignore_errors=True)
            os.symlink(outside / "v" / "00000", shard)
        elif kind == "payload symlink":
            payload.unlink()
            os.symlink(outside / rng.choice(["victim.txt", "same-size.bin"]), payload)
        elif kind == "truncated":
            payload.chmod(0o644)
            payload.write_bytes(payload.read_bytes()[: rng.randrange(1, 200)])
        elif kind == "fifo":
            payload.unlink()
            os.mkfifo(payload)
        elif kind == "folder":
            payload.unlink()
            payload.mkdir()
            (payload / "x").write_bytes(b"x")
        elif kind == "other bytes":
            data = bytearray(payload.read_bytes())
            data[rng.randrange(len(data))] ^= 0xFF
            payload.chmod(0o644)
            payload.write_bytes(bytes(data))
            payload.chmod(0o444)
        elif kind == "writable":
            payload.chmod(0o666)
        elif kind == "usage":
            _clear(cache.root / ".usage")
            (cache.root / ".usage").write_bytes(_usage(rng, time.time()))
        elif kind == "usage fifo":
            _clear(cache.root / ".usage")
            os.mkfifo(cache.root / ".usage")
        elif kind == "usage folder":
            _clear(cache.root / ".usage")
            (cache.root / ".usage").mkdir()
        elif kind == "listing":
            lines = [
                "../../../outside/victim.txt",
                "00000/../../../../outside/victim.txt",
                "00001/image.bin\n../../outside/v/chute.json",
                "\0",
                "/etc/passwd",
            ]
            with open(folder / ".payload", "a") as f:
                f.write(rng.choice(lines) + "\n")
        elif kind == "pin symlink":
            pin = shard / ".image.bin.pin"
            pin.unlink(missing_ok=True)
            os.symlink(outside / "victim.txt", pin)
        elif kind == "part symlink":
            part = shard / f".image.bin.part-999999-{rng.randrange(99)}"
            os.symlink(outside / "victim.txt", part)
        planted.append(kind)
    return planted


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def trial(rng: random.Random, base: Path) -> str:
    outside = base / "outside"
    (outside / "v" / "00000").mkdir(parents=True)
    (outside / "victim.txt").write_bytes(b"victim" * 50)
    (outside / "same-size.bin").write_bytes(b"s" * 700)
    (outside / "v" / "00000" / "image.bin").write_bytes(b"i" * 700)
    (outside / "v" / "chute.json").write_bytes(b"{}")
    before = outside_tree(outside)
    source = Source(rng)
    largest = max(len(d) for d in source.data.values())
    cache = NodeCache(base / "cache", limit=3 * largest + 4000)
    folder = cache.version_folder("s3://bucket/ds", "fp")
    pin = VersionPin(folder)
    files = {}
    for name, data in source.data.items():
        (folder / name).parent.mkdir(exist_ok=True)
        files[folder / name] = RemoteFile(name, len(data), xxhash.xxh3_64_hexdigest(data))
    cache.place(folder / ".payload", "".join(f"{n}\n" for n in source.data).encode())
    # a first reader fills the cache, then the hostile things are planted
    first = ShardFiles(source, cache, files, 2, map_path)  # type: ignore[arg-type]
    for path in files:
        first.map(path)
    first.release()
    planted = plant(rng, cache, folder, outside, source)
    outcome = "correct"
    try:
        with alarm(LIMIT_S):
            for _ in range(2):  # this process, then another one's first maps
                reader = ShardFiles(source, cache, files, 2, map_path)  # type: ignore[arg-type]
                order = list(files)
                rng.shuffle(order)
                for path in order:
                    got = bytes(reader.map(path))
                    if got != source.data[str(path.relative_to(folder))]:
                        outcome = "wrong"
                reader.release()
            cache.usage()
            cache.recount()
    except Hang:
        outcome = "hang"
    except ChuteError as exc:
        outcome = "named" if "\n" not in str(exc) else "raw"
    except Exception as exc:  # noqa: BLE001 - what the suite counts
        outcome = "raw"
        if os.environ.get("CHUTE_ROBUSTNESS_SHOW"):
            print(planted, repr(exc)[:300])
    finally:
        pin.release()
    if outside_tree(outside) != before:
        outcome = "lost"
        if os.environ.get("CHUTE_ROBUSTNESS_SHOW"):
            print(planted, "lost", set(outside_tree(outside).items()) ^ set(before.items()))
    return outcome


@pytest.mark.slow
def test_node_cache_hostile_contents(tmp_path):
    rng = random.Random(SEED)
    totals: Counter[str] = Counter()
    for k in range(COUNT):
        base = tmp_path / f"t{k}"
        base.mkdir()
        totals[trial(random.Random(rng.getrandbits(64)), base)] += 1
        shutil.rmtree(base, ignore_errors=True)
    assert_no_failures("node cache", totals)


def assert_no_failures(surface: str, totals: Counter[str], more: str = "") -> None:
    """Print the suite's line (tried, then raw / hang / wrong / lost) and fail on any."""
    failed = {name: totals[name] for name in FAILURES}
    print(
        f"\n{surface}: tried {sum(totals.values())}, raw / hang / wrong / lost = "
        f"{failed['raw']} / {failed['hang']} / {failed['wrong']} / {failed['lost']}, "
        f"{dict(sorted(totals.items()))}{more}"
    )
    assert not any(failed.values()), totals
