"""`order=ShardWindows(shards=k)` on a zarr group: the windows are windows of k chunks
(shards, for a sharded array) along the first dimension, so a shuffled epoch decodes each
chunk once even when the chunk cache holds only a window (docs/latents.md)."""

from __future__ import annotations

import numpy as np
import pytest

from chute import Pipeline, ShardWindows
from chute.readers import open_dataset

zarr = pytest.importorskip("zarr")

N, ROWS, K, BATCH = 256, 16, 2, 8  # 16 chunks of 16 rows; windows of 2 chunks = 4 batches
VALUES = np.arange(N * 6, dtype=np.float32).reshape(N, 6)


def _store(path, *, shards=None, tail=0):
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    n = N + tail
    chunks = (ROWS if shards is None else 4, 6)  # sharded: 4-row inner chunks
    array = group.create_array("x", shape=(n, 6), dtype=np.float32, chunks=chunks,
                               shards=None if shards is None else (shards, 6))
    array[...] = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    group.create_array("table", shape=(5, 3), dtype=np.float32, chunks=(5, 3))[...] = 1.0
    return path


def _epoch(ds, order, **kw):
    with Pipeline(ds, BATCH, fields=("x",), device="cpu", order=order, seed=3,
                  **kw) as pipe:
        batches = []
        for batch in pipe:
            ids = batch["index"].numpy().copy()
            np.testing.assert_array_equal(batch["x"].numpy()[:, 0], ids * 6.0)
            batches.append(ids)
        return batches, pipe.dataset.chunk_cache()


@pytest.mark.slow  # about a second each: the fast lane stays under 2 minutes
@pytest.mark.parametrize("shards", [None, ROWS], ids=["chunks", "shards"])
def test_windows_are_windows_of_chunks(tmp_path, shards):
    ds = open_dataset(_store(tmp_path / "x.zarr", shards=shards), sample_array="x")
    starts = ds.shard_starts
    assert starts.tolist() == list(range(0, N + 1, ROWS))
    batches, _ = _epoch(ds, ShardWindows(shards=K))
    ids = np.concatenate(batches)
    assert sorted(ids.tolist()) == list(range(N))  # every sample once
    per_window = (K * ROWS) // BATCH
    for w in range(0, len(batches), per_window):
        chunks = {int(i) // ROWS for b in batches[w:w + per_window] for i in b}
        assert len(chunks) == K, chunks  # each window's batches read K chunks only
    again, _ = _epoch(ds, ShardWindows(shards=K))
    assert all((a == b).all() for a, b in zip(batches, again, strict=True))  # keyed


def test_a_window_sized_cache_decodes_each_chunk_once(tmp_path):
    path = _store(tmp_path / "x.zarr")
    chunk_bytes = ROWS * 6 * 4
    def opened():
        return open_dataset(path, sample_array="x", chunk_cache=K * chunk_bytes)

    _, cache = _epoch(opened(), ShardWindows(shards=K))
    assert cache.decoded == N // ROWS
    _, cache = _epoch(opened(), "shuffle")
    assert cache.decoded > 2 * (N // ROWS)  # a global shuffle decodes chunks again and again


def test_a_last_chunk_shorter_than_the_others(tmp_path):
    ds = open_dataset(_store(tmp_path / "x.zarr", tail=5), sample_array="x")
    assert ds.shard_starts.tolist() == [*range(0, N + 1, ROWS), N + 5]
    batches, _ = _epoch(ds, ShardWindows(shards=K), drop_last=False)
    assert sorted(np.concatenate(batches).tolist()) == list(range(N + 5))


def test_the_chunks_are_those_of_the_largest_rows(tmp_path):
    # a per-sample index column stored as one chunk must not make the whole store one window
    path = _store(tmp_path / "x.zarr")
    group = zarr.open_group(str(path), mode="a", zarr_format=3)
    group.create_array("label", shape=(N,), dtype=np.int32, chunks=(N,))[...] = 0
    assert open_dataset(path, sample_array="x").shard_starts.tolist() == \
        list(range(0, N + 1, ROWS))
