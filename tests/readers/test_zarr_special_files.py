"""A zarr store's files that are not regular files (issue 26 items 9 and 14): a chunk, a shard
or a metadata document that is a FIFO blocked every reader forever (`ds.read`, the Pipeline,
`chute verify`, `convert zarr`); a chunk replaced by a folder raised a raw IsADirectoryError.
Each is now a FormatError naming the file (a failed sample under a status), within seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from chute.errors import FormatError
from tests.readers._zarr_stores import latents_values, open_latents, write_store
from tests.readers.test_zarr import read_path  # noqa: F401  (fixture)

pytest.importorskip("zarr")

S, V = 6, 2
VALUES = latents_values(S, V)
REPO = Path(__file__).resolve().parents[2]
_METADATA = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}


def _in_time(fn, seconds: float = 20.0):
    """fn()'s result, or its exception; fails when it does not return within `seconds`."""
    done: dict = {}

    def run():
        try:
            done["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  (handed to the test)
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return done


def _chunk_file(store: Path, array: str = "base_frames") -> Path:
    files = sorted(p for p in (store / array).rglob("*") if p.is_file() and
                   p.name not in _METADATA)
    return files[0]  # chunk (or shard) 0


def _replace(path: Path, by: str) -> None:
    path.unlink()
    if by == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("by", ["fifo", "folder"])
@pytest.mark.parametrize("layout", [(2, 1, "zstd", None), (3, 1, "none", None),
                                    (3, 2, "blosc", None), (2, 2, "none", None),
                                    (3, 1, "zstd", 3)],
                         ids=lambda p: "v{}-chunk{}-{}-shard{}".format(*p))
def test_chunk_that_is_not_a_regular_file_fails_its_rows(tmp_path, layout, by, read_path):  # noqa: F811
    fmt, chunk, codec, shard = layout
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=chunk, codec=codec,
                        shard=shard)
    bad = _chunk_file(store)
    _replace(bad, by)
    ds = open_latents(store)
    reader = ds.reader("base_frames")

    done = _in_time(lambda: ds.read("base_frames", np.arange(S)))
    assert isinstance(done.get("error"), FormatError), done
    assert bad.name in str(done["error"]) and "regular file" in str(done["error"])

    status = np.zeros(S, np.uint8)
    done = _in_time(lambda: reader.read(np.arange(S, dtype=np.int64), status=status))
    assert "error" not in done, done
    assert status[0] == 1 and not status[-1]
    np.testing.assert_array_equal(done["value"][-1], VALUES["base_frames"][-1])


@pytest.mark.parametrize("fmt", [2, 3])
def test_metadata_document_that_is_a_fifo_is_a_format_error(tmp_path, fmt):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt)
    document = store / "base_frames" / (".zarray" if fmt == 2 else "zarr.json")
    _replace(document, "fifo")
    done = _in_time(lambda: open_latents(store))
    assert isinstance(done.get("error"), FormatError), done
    assert str(document) in str(done["error"]) and "FIFO" in str(done["error"])


def test_attributes_document_that_is_a_fifo_is_a_format_error(tmp_path):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=2)
    (store / "base_frames" / ".zattrs").unlink(missing_ok=True)
    os.mkfifo(store / "base_frames" / ".zattrs")
    done = _in_time(lambda: open_latents(store))
    assert isinstance(done.get("error"), FormatError), done
    assert ".zattrs" in str(done["error"])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [2, 3])
def test_verify_on_a_store_with_a_fifo_chunk_exits_nonzero_in_time(tmp_path, fmt):
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt)
    bad = _chunk_file(store)
    _replace(bad, "fifo")
    done = subprocess.run([sys.executable, "-m", "chute.cli", "verify", str(store),
                           "--no-progress"], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "base_frames" in done.stderr


def test_inspect_verify_names_the_fifo_rows(tmp_path):
    from chute.readers import verify_dataset

    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=2)
    _replace(_chunk_file(store), "fifo")
    done = _in_time(lambda: verify_dataset(store))
    assert "error" not in done, done
    assert any("base_frames" in p and "(0, 1)" in p for p in done["value"]), done
    shutil.rmtree(store)


def test_a_folder_whose_name_is_not_utf8_is_no_raw_error(tmp_path):
    """issue 26 item 14: a non-UTF-8 folder name in the store raised UnicodeEncodeError."""
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=2)
    odd = os.path.join(os.fsencode(store), b"\xff\xfe")
    os.mkdir(odd)
    with open(os.path.join(odd, b".zattrs"), "w") as f:
        f.write("{}")
    ds = open_latents(store)
    np.testing.assert_array_equal(ds.read("base_frames", [0])[0], VALUES["base_frames"][0])


@pytest.mark.parametrize("link", ["dangling", "loop"])
@pytest.mark.parametrize("layout", [(2, 2, "zstd", None), (3, 1, "none", None),
                                    (3, 1, "zstd", None), (3, 1, "zstd", 3)],
                         ids=lambda p: "v{}-chunk{}-{}-shard{}".format(*p))
def test_chunk_symlink_to_nothing_fails_its_rows_and_verify_names_it(tmp_path, layout, link,
                                                                     read_path):  # noqa: F811
    """Found by tests/robustness/test_zarr_stores.py (issue 26 item 16): a chunk that is a
    symlink to itself raised a raw OSError (ELOOP) in reads, verify and convert; one leading
    to no file failed its rows while `chute verify` passed the store (and a sharded array
    read zarr's fill value as data)."""
    from chute.readers import verify_dataset

    fmt, chunk, codec, shard = layout
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=fmt, chunk=chunk, codec=codec,
                        shard=shard)
    bad = _chunk_file(store)
    bad.unlink()
    bad.symlink_to(bad if link == "loop" else store / "nowhere")
    ds = open_latents(store)

    done = _in_time(lambda: ds.read("base_frames", np.arange(S)))
    assert isinstance(done.get("error"), FormatError), done
    assert bad.name in str(done["error"]) or "chunk" in str(done["error"])

    status = np.zeros(S, np.uint8)
    done = _in_time(lambda: ds.reader("base_frames").read(np.arange(S, dtype=np.int64),
                                                          status=status))
    assert "error" not in done, done
    assert status[0] == 1 and not status[-1]
    np.testing.assert_array_equal(done["value"][-1], VALUES["base_frames"][-1])

    done = _in_time(lambda: verify_dataset(store))
    assert "error" not in done, done
    assert any("base_frames" in p for p in done["value"]), done
