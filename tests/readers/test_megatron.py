"""Reading a Megatron-LM / TouchDataset .bin/.idx pair written by an independent minimal writer
that follows the documented MMIDIDX layout (not chute's own encoder)."""

import struct

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import open_dataset


def write_megatron_pair(prefix, documents, dtype=np.uint16, code=8, trailing=b""):
    """documents: list of 1-D arrays of `dtype`; one sequence per document."""
    pointers, lengths, pos = [], [], 0
    with open(f"{prefix}.bin", "wb") as f:
        for doc in documents:
            raw = np.asarray(doc, dtype=dtype).tobytes()
            f.write(raw)
            pointers.append(pos)
            lengths.append(len(doc))
            pos += len(raw)
    n = len(documents)
    doc_idx = list(range(n + 1))
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", n))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack(f"<{n}i", *lengths))
        f.write(struct.pack(f"<{n}q", *pointers))
        f.write(struct.pack(f"<{len(doc_idx)}q", *doc_idx))
        f.write(trailing)


@pytest.fixture
def tokens():
    rng = np.random.default_rng(3)
    return [rng.integers(0, 60000, rng.integers(1, 50)).astype(np.uint16) for _ in range(40)]


@pytest.mark.parametrize("suffix", ["", ".bin", ".idx"])
def test_open_megatron_pair(tmp_path, tokens, suffix):
    write_megatron_pair(tmp_path / "corpus_text_document", tokens)
    ds = open_dataset(f"{tmp_path / 'corpus_text_document'}{suffix}")
    assert len(ds) == len(tokens)
    assert ds.fields == {"data": "bytes"}
    assert ds.manifest["fields"]["data"]["dtype"] == "uint16"
    for i, doc in enumerate(tokens):
        # lengths count uint16 elements; the bytes field yields their raw bytes
        np.testing.assert_array_equal(ds[i]["data"].view(np.uint16), doc)
    ids = np.array([3, 0, 39, 3])
    data, offsets = ds.gather(ids, field="data")
    assert data.tobytes() == b"".join(tokens[i].tobytes() for i in ids)
    assert ds.locate(5) == ("corpus_text_document", 5)


def test_megatron_dtype_and_default_gather_field(tmp_path, tokens):
    write_megatron_pair(tmp_path / "corpus", tokens)
    ds = open_dataset(tmp_path / "corpus")
    assert ds.dtype == np.uint16
    data, _ = ds.gather([1, 2])  # no field name: the pair's only bytes field
    assert data.view(ds.dtype).tolist() == tokens[1].tolist() + tokens[2].tolist()


def test_megatron_bytes_named_image(tmp_path):
    payloads = [b"\xff\xd8abc", b"", b"\xff\xd8xyzw"]
    write_megatron_pair(tmp_path / "imgs", [np.frombuffer(p, np.uint8) for p in payloads],
                        dtype=np.uint8, code=1)
    ds = open_dataset(tmp_path / "imgs", bytes_field="image")
    assert [ds[i]["image"].tobytes() for i in range(3)] == payloads
    assert ds.gather([2, 0])[0].tobytes() == payloads[2] + payloads[0]


def test_megatron_trailing_sequence_modes_tolerated(tmp_path, tokens):
    write_megatron_pair(tmp_path / "mm", tokens, trailing=bytes(len(tokens)))
    assert len(open_dataset(tmp_path / "mm")) == len(tokens)


def test_megatron_truncated_bin(tmp_path, tokens):
    write_megatron_pair(tmp_path / "t", tokens)
    bin_path = tmp_path / "t.bin"
    bin_path.write_bytes(bin_path.read_bytes()[:-3])
    with pytest.raises(FormatError, match="t.bin.*truncated"):
        open_dataset(tmp_path / "t")


def test_megatron_missing_half(tmp_path, tokens):
    write_megatron_pair(tmp_path / "m", tokens)
    (tmp_path / "m.idx").unlink()
    with pytest.raises(FormatError, match=r"m\.idx: missing"):
        open_dataset(tmp_path / "m.bin")
