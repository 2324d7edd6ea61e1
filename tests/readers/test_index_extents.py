"""An index must describe records inside its .bin, without overlaps or unexplained gaps (issue 11,
defect 4): a pointer near 2^63 once passed the bounds check (pointer + length wrapped around in
int64), and reads then handed one sample another sample's bytes."""

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import open_dataset
from chute.readers.format._mmidx import read_index
from tests.readers.test_errors import shard_file


def _rewrite(path, change):
    """Apply change(lengths, pointers) to the .idx at path (same size, so the manifest agrees)."""
    index = read_index(path)
    raw = bytearray(path.read_bytes())
    n = len(index.lengths)
    off = len(raw) - 12 * n - 8 * len(index.doc_idx)
    lengths = np.frombuffer(raw, "<i4", n, off).copy()
    pointers = np.frombuffer(raw, "<i8", n, off + 4 * n).copy()
    change(lengths, pointers)
    raw[off:off + 4 * n] = lengths.astype("<i4").tobytes()
    raw[off + 4 * n:off + 12 * n] = pointers.astype("<i8").tobytes()
    path.write_bytes(bytes(raw))
    return lengths


def _nonempty(lengths):
    return [int(i) for i in np.flatnonzero(lengths > 0)]


def _wrap(lengths, pointers):
    k = _nonempty(lengths)[0]
    pointers[k] = np.iinfo(np.int64).max - int(lengths[k]) + 2  # + length wraps negative


def _overlap(lengths, pointers):
    a, b = _nonempty(lengths)[:2]
    pointers[b] = pointers[a]
    lengths[b] = lengths[a]


def _shorten(lengths, pointers):
    lengths[_nonempty(lengths)[0]] -= 1


@pytest.mark.parametrize(("shard", "change", "named", "message"), [
    (0, _wrap, ".bin", "points past the end"),
    (1, _overlap, ".idx", "overlap"),
    (2, _shorten, ".idx", "cover"),  # a gap the .bin's size does not explain
], ids=["pointer-near-2^63", "overlapping-records", "gap"])
def test_an_index_not_tiling_its_bin_is_refused(dataset_dir, shard, change, named, message):
    """The error names the file (the .bin or the .idx) and what is wrong."""
    path = shard_file(dataset_dir, "image.idx", shard)
    _rewrite(path, change)
    with pytest.raises(FormatError, match=f"{path.with_suffix(named)}.*{message}"):
        open_dataset(dataset_dir)


def test_records_in_another_order_are_fine(dataset_dir):
    """Extents are checked in pointer order: an index listing back-to-back records out of order
    still reads each record's own bytes."""
    path = shard_file(dataset_dir, "image.idx")
    before = open_dataset(dataset_dir)
    count = len(read_index(path).lengths)
    expected = [bytes(before[i]["image"]) for i in range(count)]

    def swap(lengths, pointers):
        a, b = _nonempty(lengths)[:2]
        # the records a..b move: b's bytes first is not possible without rewriting the .bin,
        # so swap two index entries and the samples they name
        pointers[[a, b]] = pointers[[b, a]]
        lengths[[a, b]] = lengths[[b, a]]
        expected[a], expected[b] = expected[b], expected[a]

    _rewrite(path, swap)
    after = open_dataset(dataset_dir)
    assert [bytes(after[i]["image"]) for i in range(count)] == expected


@pytest.mark.parametrize("size", [1 << 55, (5 << 40) + 1], ids=["2^55", "5TiB+1"])
def test_a_remote_index_claiming_more_than_an_object_holds_is_one_line(s3, size):
    """A manifest in object storage saying an index is 2^55 bytes: opening reserved that size in
    the node cache (raw OSError EFBIG, issue 37); now a FormatError naming the object."""
    import json

    from chute.readers.format._manifest import MANIFEST, MANIFEST_CHECKSUM, manifest_checksum
    from chute.readers.storage._object_store import Remote
    from tests.readers.storage.test_object_storage import samples, write

    url = f"{s3[1]}/ds"
    write(url, samples(10))
    remote = Remote(url)
    manifest = json.loads(remote.get_bytes(MANIFEST))
    shard = manifest["shards"][0]
    shard["files"]["image.idx"]["size"] = size
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    remote.put_bytes(MANIFEST, json.dumps(manifest).encode())
    with pytest.raises(FormatError, match=f"{shard['name']}/image.idx: .*{size} bytes.*5 TiB"):
        open_dataset(url)
