import numpy as np
import pytest

from chute.convert import ShardWriter
from chute.errors import FormatError
from chute.readers import dataset_info, open_dataset


def _latents(n, shape=(4, 8, 8), seed=0, dtype=np.float16):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def _write(path, arrays, declaration="ndarray", shard_size="2KB"):
    with ShardWriter(path, {"latent": declaration, "label": "int64"},
                     shard_size=shard_size) as w:
        for i, a in enumerate(arrays):
            w.write({"latent": a, "label": i})
    return open_dataset(path)


def test_later_mismatch_is_rejected_and_leaves_no_partial_sample(tmp_path):
    with ShardWriter(tmp_path / "d", {"latent": "ndarray", "label": "int64"}) as w:
        w.write({"latent": np.zeros((4, 8, 8), np.float16), "label": 0})
        with pytest.raises(ValueError, match=r"shape \[4, 8, 9\].*\[4, 8, 8\]"):
            w.write({"latent": np.zeros((4, 8, 9), np.float16), "label": 1})
        with pytest.raises(ValueError, match="dtype float32 differs.*float16"):
            w.write({"latent": np.zeros((4, 8, 8), np.float32), "label": 1})
        w.write({"latent": np.ones((4, 8, 8), np.float16), "label": 1})
    ds = open_dataset(tmp_path / "d")
    assert len(ds) == 2
    np.testing.assert_array_equal(ds.column("label"), [0, 1])
    np.testing.assert_array_equal(ds[1]["latent"], np.ones((4, 8, 8), np.float16))


def test_float_arrays_are_inferred_as_ndarray(tmp_path):
    with ShardWriter(tmp_path / "d") as w:
        w.write({"emb": np.arange(6, dtype=np.float32).reshape(2, 3), "raw": b"xy"})
    ds = open_dataset(tmp_path / "d")
    assert ds.fields == {"emb": "ndarray", "raw": "bytes"}
    info = dataset_info(tmp_path / "d")
    assert info["field_types"]["emb"] == "ndarray float32 [2, 3]"


def test_corrupt_compressed_record_is_reported_not_returned(tmp_path):
    arrays = _latents(6, shape=(16,))
    ds = _write(tmp_path / "d", arrays, {"kind": "ndarray", "compression": "zstd"},
                shard_size="1GiB")
    record = ds.reader("latent").records
    start = int(record.pointers[2])
    with open(record.paths[0], "r+b") as f:  # garble sample 2's compressed bytes
        f.seek(start + 4)
        f.write(b"\xff" * 8)
    ds = open_dataset(tmp_path / "d")
    with pytest.raises(FormatError, match="record 2 of field 'latent'"):
        ds[2]
    status = np.zeros(3, np.uint8)
    out = ds.reader("latent").read(np.array([1, 2, 3]), status=status)
    assert status.tolist() == [0, 1, 0]
    np.testing.assert_array_equal(out[0], arrays[1])
    np.testing.assert_array_equal(out[2], arrays[3])
    with pytest.raises(FormatError, match="record 2 of field 'latent'"):
        ds.reader("latent").read(np.array([1, 2]))


@pytest.fixture(params=["shim", "python"])
def batch_path(request, monkeypatch):
    """Batches of fixed-shape zstd records: decompressed by the C shim, or record by record."""
    from chute.readers.zarr import _chunk_native

    if request.param == "shim" and not _chunk_native.chunk_reader_status().available:
        pytest.skip("chunk reader shim unavailable")
    if request.param == "python":
        monkeypatch.setattr(_chunk_native, "chunk_reader_status",
                            lambda: _chunk_native.ChunkReaderStatus(False, None, "test"))
    return request.param


def test_compressed_batches_exact_and_a_flipped_bit_fails_its_row(tmp_path, batch_path):
    arrays = [np.arange(256, dtype=np.float32) * (i + 1) for i in range(6)]
    ds = _write(tmp_path / "d", arrays, {"kind": "ndarray", "compression": "zstd"},
                shard_size="1GiB")
    ids = np.array([5, 0, 3, 3, 1])
    np.testing.assert_array_equal(ds.reader("latent").read(ids), np.stack(arrays)[ids])
    records = ds.reader("latent").records
    start, size = int(records.pointers[3]), int(records.lengths[3])
    with open(records.paths[0], "r+b") as f:  # the checksum, not the size, catches this
        f.seek(start + size // 2)
        byte = f.read(1)
        f.seek(start + size // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    status = np.zeros(len(ids), np.uint8)
    out = open_dataset(tmp_path / "d").reader("latent").read(ids, status=status)
    assert status.tolist() == [0, 0, 1, 1, 0]
    np.testing.assert_array_equal(out[[0, 1, 4]], np.stack(arrays)[[5, 0, 1]])


def test_fixed_field_whose_index_disagrees_with_the_shape_is_refused(tmp_path):
    _write(tmp_path / "d", _latents(4, shape=(6,)), shard_size="1GiB")
    manifest = (tmp_path / "d" / "chute.json").read_text()
    (tmp_path / "d" / "chute.json").write_text(manifest.replace('"shape": [\n    6\n   ]',
                                                                '"shape": [\n    3\n   ]'))
    with pytest.raises(FormatError, match="not 6-byte float16"):
        open_dataset(tmp_path / "d")


def test_compressed_reads_from_many_threads_are_correct(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    arrays = _latents(64, shape=(32, 16), dtype=np.float32)
    ds = _write(tmp_path / "d", arrays, {"kind": "ndarray", "compression": "zstd"},
                shard_size="1GiB")

    def check(i):
        return all(np.array_equal(ds[j]["latent"], arrays[j]) for j in range(i % 7, 64, 3))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(check, range(40)))


def test_a_single_flipped_bit_in_a_compressed_record_is_caught(tmp_path):
    arrays = [np.zeros((256,), np.float32) + i for i in range(4)]
    ds = _write(tmp_path / "d", arrays, {"kind": "ndarray", "compression": "zstd"},
                shard_size="1GiB")
    records = ds.reader("latent").records
    start, size = int(records.pointers[1]), int(records.lengths[1])
    with open(records.paths[0], "r+b") as f:
        f.seek(start + size // 2)
        byte = f.read(1)
        f.seek(start + size // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    ds = open_dataset(tmp_path / "d")
    with pytest.raises(FormatError, match="record 1"):
        ds[1]
    np.testing.assert_array_equal(ds[2]["latent"], arrays[2])


def test_declarations_are_checked_up_front(tmp_path):
    with pytest.raises(ValueError, match="would both write x.rows.npy"):
        ShardWriter(tmp_path / "a", {"x": {"kind": "ndarray", "ragged": True},
                                     "x.rows": "int64"})
    with pytest.raises(ValueError, match="cannot name files"):
        ShardWriter(tmp_path / "b", {"../x": "int64"})
    with pytest.raises(ValueError, match="field 'z': zstd level"):
        ShardWriter(tmp_path / "c", {"z": {"kind": "ndarray", "compression": "zstd",
                                           "level": 40}})
    with ShardWriter(tmp_path / "d", {"z": {"kind": "ndarray", "shape": np.array([2, 3])}}) as w:
        w.write({"z": np.zeros((2, 3), np.float32)})
    assert open_dataset(tmp_path / "d").specs["z"]["shape"] == [2, 3]


def test_an_empty_writer_with_an_open_declaration_says_what_to_declare(tmp_path):
    writer = ShardWriter(tmp_path / "e", {"x": "ndarray"})
    with pytest.raises(ValueError, match="declare the field fully"):
        writer.close()
    assert not (tmp_path / "e").exists()
    with ShardWriter(tmp_path / "e", {"x": {"kind": "ndarray", "dtype": "float16",
                                            "shape": [4]}}):
        pass
    assert len(open_dataset(tmp_path / "e")) == 0


def test_a_big_endian_or_text_dtype_in_a_manifest_is_refused(tmp_path):
    _write(tmp_path / "d", _latents(2, shape=(4,)), shard_size="1GiB")
    manifest = (tmp_path / "d" / "chute.json").read_text()
    for bad in ('">f2"', '"<U1"'):
        (tmp_path / "d" / "chute.json").write_text(manifest.replace('"<f2"', bad))
        with pytest.raises(FormatError, match="field 'latent'"):
            open_dataset(tmp_path / "d")
