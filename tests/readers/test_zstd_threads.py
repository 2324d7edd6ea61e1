"""zstd decompression state is bounded by the threads reading at once, not by every thread that
ever read (issue 26 item 15): a new reading thread per read must not add a context each."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.readers import open_dataset
from chute.readers.zarr._zstd_native import decoder

zstandard = pytest.importorskip("zstandard")


def _in_new_threads(fn, count: int = 30) -> None:
    for _ in range(count):
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()


def test_ndarray_reads_from_new_threads_reuse_decompressors(tmp_path, monkeypatch):
    values = np.arange(6 * 40, dtype=np.float32).reshape(6, 40)
    with ShardWriter(tmp_path / "d.chute", {"x": {"kind": "ndarray", "compression": "zstd"}}) as w:
        for row in values:
            w.write({"x": row})
    ds = open_dataset(tmp_path / "d.chute")
    made = []
    real = zstandard.ZstdDecompressor

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", counting)
    got = []
    _in_new_threads(lambda: got.append(ds[3]["x"]))
    assert len(got) == 30 and all(np.array_equal(g, values[3]) for g in got)
    assert len(made) <= 1


def test_native_decoder_reuses_contexts_across_threads(monkeypatch):
    zstd = decoder()
    if zstd is None:
        pytest.skip("no libzstd exporting ZSTD_decompressDCtx")
    data = np.arange(4096, dtype=np.uint8)
    frame = bytearray(zstandard.ZstdCompressor().compress(data.tobytes()))
    made = []
    real = zstd._create

    def counting():
        made.append(1)
        return real()

    monkeypatch.setattr(zstd, "_create", counting)

    def read():
        out = np.empty(4096, np.uint8)
        assert zstd.decode(frame, len(frame), out) == 4096
        assert np.array_equal(out, data)

    _in_new_threads(read)
    assert len(made) <= 1
