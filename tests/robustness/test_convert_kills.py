"""`chute convert` killed (SIGKILL, its whole process group) at random moments, for every
converter (issue 26 item 16; `convert hf` on a folder saved by `datasets`): the destination
is always the old dataset or the new one, whole (`chute verify` clean), or, when there was
none, absent; the next convert needs no cleanup and leaves nothing beside the destination.
Every third trial converts to a fresh destination, the others `--overwrite` a dataset.
`pytest -s` prints the counts per converter; CHUTE_ROBUSTNESS_KILLS sets the trials per
converter, CHUTE_ROBUSTNESS_SEED the seed."""

import csv
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from chute.readers import open_dataset, verify_dataset
from tests._media import jpeg

pytestmark = pytest.mark.slow  # starts processes (docs/testing.md)

REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("CHUTE_ROBUSTNESS_KILLS", "6"))
SEED = int(os.environ.get("CHUTE_ROBUSTNESS_SEED", "20261126"))


def _images(folder: Path, seed: int, n: int = 6) -> list[str]:
    names = []
    for k in range(n):
        path = folder / f"c{k % 2}" / f"{k}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg(24 + 4 * k, 20 + k, seed=seed * 100 + k))
        names.append(str(path.relative_to(folder)))
    return names


def _imagefolder(folder: Path, seed: int) -> list[str]:
    _images(folder, seed)
    return ["imagefolder", str(folder), "--workers", "1", "--shard-size", "1KB"]


def _csv(folder: Path, seed: int) -> list[str]:
    names = _images(folder, seed)
    with open(folder / "list.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "label"], *[[n, k % 3] for k, n in enumerate(names)]])
    return ["csv", str(folder / "list.csv"), "--workers", "1", "--shard-size", "1KB"]


def _webdataset(folder: Path, seed: int) -> list[str]:
    folder.mkdir(parents=True)
    with tarfile.open(folder / "a.tar", "w") as tar:
        for k in range(6):
            for ext, data in (("jpg", jpeg(24, 20 + k, seed=seed * 100 + k)),
                              ("cls", str(k).encode())):
                info = tarfile.TarInfo(f"{k:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return ["webdataset", str(folder / "a.tar"), "--shard-size", "1KB"]


def _audio(folder: Path, seed: int) -> list[str]:
    pytest.importorskip("soundfile")
    from tests._audio import write_recordings

    jsonl = write_recordings(folder, names=("a.wav", "b.flac") if seed == 1
                             else ("c.flac", "d.wav"))
    return ["audio", str(jsonl), "--workers", "1", "--shard-size", "8KB"]


def _video(folder: Path, seed: int) -> list[str]:
    pytest.importorskip("av")
    from tests._video_media import make_video

    folder.mkdir(parents=True)
    rows = [["path", "text"]]
    for k in range(3):
        (folder / f"v{k}.mp4").write_bytes(make_video(8 + 2 * k + seed, 32, 48))
        rows.append([f"v{k}.mp4", f"clip {k}"])
    with open(folder / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return ["video", str(folder / "v.csv"), "--workers", "1", "--shard-size", "2KB"]


def _zarr(folder: Path, seed: int) -> list[str]:
    pytest.importorskip("zarr")
    from tests.readers._zarr_stores import write_store

    rng = np.random.default_rng(seed)
    write_store(folder / "s.zarr", {"x": rng.standard_normal((12, 8, 8)).astype(np.float32)})
    return ["zarr", str(folder / "s.zarr"), "--shard-size", "1KB"]


def _hf(folder: Path, seed: int) -> list[str]:
    datasets = pytest.importorskip("datasets")

    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["cat", "dog"]),
                                  "caption": datasets.Value("string")})
    table = datasets.Dataset.from_dict(
        {"image": [{"bytes": jpeg(24, 20 + k, seed=seed * 100 + k), "path": None}
                   for k in range(6)],
         "label": [k % 2 for k in range(6)],
         "caption": [f"picture {seed}.{k}" for k in range(6)]}, features=features)
    table.save_to_disk(str(folder / "saved"))
    return ["hf", str(folder / "saved"), "--shard-size", "1KB"]


CONVERTERS = {"imagefolder": _imagefolder, "csv": _csv, "webdataset": _webdataset,
              "audio": _audio, "video": _video, "zarr": _zarr, "hf": _hf}


def _command(args: list[str], dst: Path, overwrite: bool) -> list[str]:
    source, *options = args
    command = [sys.executable, "-m", "chute.cli", "convert", source, options[0], str(dst),
               *options[1:]]
    if source != "zarr":
        command.append("--no-progress")
    return command + (["--overwrite"] if overwrite else [])


def _run(command, env, parent: Path, kill_after: float | None) -> float:
    """Run a convert; with `kill_after`, SIGKILL its process group that many seconds after it
    starts to change `parent` (or when it exits). Returns how long the change phase took."""
    before = sorted(os.listdir(parent))
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and sorted(os.listdir(parent)) == before \
                and time.monotonic() < deadline:
            time.sleep(0.0005)
        started = time.monotonic()
        if kill_after is None:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()[-2000:]
            return time.monotonic() - started
        while proc.poll() is None and time.monotonic() - started < kill_after:
            time.sleep(0.0005)
        return 0.0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)


def _state(dst: Path, fingerprints: list[str]) -> str:
    """"absent", "a" or "b" (which source's dataset, whole), or "half"."""
    if not os.path.lexists(dst):
        return "absent"
    try:
        ds = open_dataset(dst)
        fingerprint = ds.fingerprint
        ds.close()
        problems = verify_dataset(dst)
    except Exception as exc:
        return f"half ({type(exc).__name__}: {exc})"
    if problems or fingerprint not in fingerprints:
        return f"half (verify: {problems[:2]}, fingerprint known: {fingerprint in fingerprints})"
    return "ab"[fingerprints.index(fingerprint)]


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_a_convert_killed_at_random_moments_leaves_old_or_new(tmp_path, name):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sources = [CONVERTERS[name](tmp_path / src, seed) for src, seed in (("a", 1), ("b", 2))]
    parent = tmp_path / "out"
    parent.mkdir()
    dst = parent / "d.chute"
    fingerprints, write_s = [], 0.0
    for k, args in enumerate(sources):  # the two datasets a kill may leave, and write times
        write_s = max(write_s, _run(_command(args, dst, k > 0), env, parent, None))
        fingerprints.append(open_dataset(dst).fingerprint)
    assert fingerprints[0] != fingerprints[1]
    rng = random.Random(f"{SEED}-{name}")
    outcomes: Counter = Counter()
    failures = []
    for trial in range(TRIALS):
        fresh = trial % 3 == 0
        target = trial % 2
        if fresh and os.path.lexists(dst):
            shutil.rmtree(dst)
        elif not fresh and not os.path.lexists(dst):  # an earlier kill left none: make one
            _run(_command(sources[1 - target], dst, False), env, parent, None)
        before = _state(dst, fingerprints)
        _run(_command(sources[target], dst, not fresh), env, parent,
             rng.uniform(0, 1.2 * write_s))
        after = _state(dst, fingerprints)
        allowed = {before, "ab"[target]}
        outcomes[("fresh " if fresh else "overwrite ") +
                 ("new" if after == "ab"[target] else "absent" if after == "absent"
                  else "old" if after == before else "half")] += 1
        if after not in allowed:
            failures.append(f"trial {trial} ({'fresh' if fresh else 'overwrite'}): "
                            f"{before} -> {after}")
    # a later convert just works and leaves nothing beside the destination
    _run(_command(sources[0], dst, os.path.lexists(dst)), env, parent, None)
    assert open_dataset(dst).fingerprint == fingerprints[0]
    leftovers = sorted(set(os.listdir(parent)) - {"d.chute"})
    print(f"\n{name}: {TRIALS} kills (write phase {write_s:.2f} s): "
          f"{json.dumps(dict(sorted(outcomes.items())))}")
    assert not failures, "\n".join(failures)
    assert not leftovers, f"left beside the destination: {leftovers}"
