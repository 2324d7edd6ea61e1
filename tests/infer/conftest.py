import csv
import os
from pathlib import Path

import pytest

from tests._video_media import make_video

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def video_dataset(tmp_path_factory):
    """A converted video dataset of 4 tiny clips of different lengths and sizes."""
    pytest.importorskip("av")
    from chute.convert._convert_video import convert_video_csv

    root = tmp_path_factory.mktemp("infer_videos")
    rows = [["path", "text"]]
    for k, (n, h, w) in enumerate([(20, 48, 64), (12, 40, 40), (30, 64, 48), (9, 36, 52)]):
        (root / f"v{k}.mp4").write_bytes(make_video(n, h, w))
        rows.append([f"v{k}.mp4", f"clip {k}"])
    with open(root / "videos.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    convert_video_csv(root / "videos.csv", root / "ds", progress=False)
    return root / "ds"


def _children() -> set[int]:
    me = str(os.getpid())
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                out.add(int(entry.name))
    return out


def _shm_files(pids) -> set[str]:
    """/dev/shm files torch named after one of `pids` (the folder is shared with every process
    on the machine, so files of unrelated processes are not counted)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names for p in pids if n.startswith(f"torch_{p}_")}


def _shm_mappings() -> set[str]:
    """Shared-memory segments this process maps (torch's are named /torch_*)."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line.split(None, 5)[-1] for line in lines
            if "/dev/shm/" in line or "/torch_" in line}


@pytest.fixture
def leak_check():
    """Yields a function that asserts no child process, torch /dev/shm file or shared-memory
    mapping that the test created is left (multiprocessing's resource tracker, started once
    per process, is not the test's)."""
    before_children, before_maps = _children(), _shm_mappings()

    def check(pids=()):
        import multiprocessing.resource_tracker as rt

        tracker = getattr(rt._resource_tracker, "_pid", None)
        alive = [p for p in pids if Path(f"/proc/{p}").exists()]
        assert not alive, f"replica processes still exist: {alive}"
        left = _children() - before_children - {tracker}
        assert not left, f"child processes left: {left}"
        assert _shm_files([os.getpid(), *pids]) == set()
        import gc

        gc.collect()
        assert _shm_mappings() - before_maps == set()

    return check
