"""The C chunk reader (chute/readers/zarr/_chunk_native.py, _native/zarr_chunks.c) and the libzstd
decoder it takes its functions from (chute/readers/zarr/_zstd_native.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zstandard

from chute.readers.storage._paths import Confined
from chute.readers.zarr import _chunk_native
from chute.readers.zarr._chunk_native import (
    CHUNK_ERRORS,
    MISSING,
    OUTSIDE,
    chunk_reader_status,
    read_chunks,
)
from chute.readers.zarr._zstd_native import decoder

NBYTES = 3000
ROWS = [np.random.default_rng(k).integers(0, 4, NBYTES, dtype=np.uint8) for k in range(6)]


def _native():
    status = chunk_reader_status()
    if not status.available:
        pytest.skip(f"chunk reader shim unavailable: {status.reason}")


def _files(tmp_path, compressed: bool):
    """Chunks 0..5 as files c<k>.bin: 2 corrupt, 3 too short, 4 missing."""
    pack = zstandard.ZstdCompressor().compress if compressed else bytes
    for k, row in enumerate(ROWS):
        (tmp_path / f"c{k}.bin").write_bytes(pack(row.tobytes()))
    (tmp_path / "c2.bin").write_bytes(b"\x28\xb5\x2f\xfd garbage" if compressed else b"x" * 9)
    (tmp_path / "c3.bin").write_bytes(pack(ROWS[3].tobytes()[:-1]))
    (tmp_path / "c4.bin").unlink()
    return "c", ".bin"


@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "none"])
def test_files_read_into_their_rows_with_a_status_each(tmp_path, compressed):
    _native()
    prefix, suffix = _files(tmp_path, compressed)
    out = np.full((6, NBYTES), 7, np.uint8)
    chunks = np.array([5, 0, 2, 3, 4, 1])  # row r gets chunk chunks[r]
    dests = out.ctypes.data + np.arange(6, dtype=np.uintp) * np.uintp(NBYTES)
    with ThreadPoolExecutor(2) as pool:
        status = read_chunks(compressed, dests, NBYTES, pool, 3, store=Confined(tmp_path),
                             prefix=prefix, suffix=suffix, chunks=chunks)
    assert status[4] == MISSING
    assert status[2] in CHUNK_ERRORS and status[3] in CHUNK_ERRORS
    for row in (0, 1, 5):
        assert status[row] == 0
        np.testing.assert_array_equal(out[row], ROWS[chunks[row]])


@pytest.mark.parametrize("beneath", [True, False], ids=["openat2", "realpath"])
def test_chunk_files_leading_out_of_the_store_are_refused(tmp_path, monkeypatch, beneath):
    """A chunk file (or a folder on its way) that is a symlink out of the store is never read:
    status OUTSIDE, by the kernel (openat2) or by its resolved path (older kernels)."""
    _native()
    if not beneath:
        monkeypatch.setattr(_chunk_native, "available", lambda: False)
    elif not _chunk_native.available():
        pytest.skip("openat2 is not available here")
    store, outside = tmp_path / "store", tmp_path / "outside"
    (store / "d").mkdir(parents=True)
    outside.mkdir()
    for k, row in enumerate(ROWS[:4]):
        (outside / f"c{k}.bin").write_bytes(row.tobytes())
    (store / "c0.bin").write_bytes(ROWS[0].tobytes())  # inside: read
    (store / "c1.bin").symlink_to(outside / "c1.bin")  # the file leads out
    (store / "c2.bin").symlink_to(store / "c0.bin")  # an absolute link back inside
    (store / "d" / "c3.bin").symlink_to(outside / "c3.bin")
    (store / "e").symlink_to(outside)  # a folder on the way leads out
    out = np.zeros((4, NBYTES), np.uint8)
    dests = out.ctypes.data + np.arange(4, dtype=np.uintp) * np.uintp(NBYTES)
    with ThreadPoolExecutor(1) as pool:
        status = read_chunks(False, dests, NBYTES, pool, 2, store=Confined(store), prefix="c",
                             suffix=".bin", chunks=np.array([0, 1, 2, 1]))
        status_d = read_chunks(False, dests[:2], NBYTES, pool, 2, store=Confined(store),
                               prefix="d/c", suffix=".bin", chunks=np.array([3, 3]))
        status_e = read_chunks(False, dests[:1], NBYTES, pool, 2, store=Confined(store),
                               prefix="e/c", suffix=".bin", chunks=np.array([0]))
    assert status[0] == 0 and status[1] == status[3] == OUTSIDE
    assert status[2] in (0, OUTSIDE)  # openat2 refuses absolute links: the caller re-checks
    assert status_d.tolist() == [OUTSIDE, OUTSIDE] and status_e.tolist() == [OUTSIDE]
    np.testing.assert_array_equal(out[0], ROWS[0])
    assert not out[1].any() and not out[3].any()


def test_frames_in_memory_as_the_decompression_bound_reads_them():
    _native()
    frames = [zstandard.ZstdCompressor().compress(r.tobytes()) for r in ROWS]
    out = np.zeros((6, NBYTES), np.uint8)
    dests = out.ctypes.data + np.arange(6, dtype=np.uintp)[::-1] * np.uintp(NBYTES)
    with ThreadPoolExecutor(1) as pool:
        status = read_chunks(True, dests, NBYTES, pool, 2, sources=frames)
    assert not status.any()
    np.testing.assert_array_equal(out[::-1], np.stack(ROWS))


def test_libzstd_decoder_writes_into_the_destination_or_names_the_error():
    zstd = decoder()
    if zstd is None:
        pytest.skip("no libzstd exporting ZSTD_decompressDCtx")
    frame = zstandard.ZstdCompressor().compress(ROWS[0].tobytes())
    out = np.zeros(NBYTES, np.uint8)
    assert zstd.decode(frame, len(frame), out) == NBYTES
    np.testing.assert_array_equal(out, ROWS[0])
    with pytest.raises(ValueError, match="zstd: "):
        zstd.decode(frame, len(frame), out[:-1])  # does not fit
    with pytest.raises(ValueError, match="zstd: "):
        zstd.decode(b"\x28\xb5\x2f\xfd junk", 9, out)
