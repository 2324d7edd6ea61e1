"""An index must describe records inside its .bin, without overlaps or unexplained gaps (issue 11,
defect 4): a pointer near 2^63 once passed the bounds check (pointer + length wrapped around in
int64), and reads then handed one sample another sample's bytes."""

import numpy as np
import pytest

from chute.errors import FormatError
from chute.readers import open_dataset
from chute.readers._mmidx import read_index
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


def test_a_pointer_near_2_63_is_refused(dataset_dir):
    path = shard_file(dataset_dir, "image.idx")

    def wrap(lengths, pointers):
        k = _nonempty(lengths)[0]
        pointers[k] = np.iinfo(np.int64).max - int(lengths[k]) + 2  # + length wraps negative

    _rewrite(path, wrap)
    with pytest.raises(FormatError, match=f"{path.with_suffix('.bin')}.*points past the end"):
        open_dataset(dataset_dir)


def test_overlapping_records_are_refused(dataset_dir):
    path = shard_file(dataset_dir, "image.idx", 1)

    def overlap(lengths, pointers):
        a, b = _nonempty(lengths)[:2]
        pointers[b] = pointers[a]
        lengths[b] = lengths[a]

    _rewrite(path, overlap)
    with pytest.raises(FormatError, match=f"{path}.*overlap"):
        open_dataset(dataset_dir)


def test_a_gap_the_bin_size_does_not_explain_is_refused(dataset_dir):
    path = shard_file(dataset_dir, "image.idx", 2)

    def shorten(lengths, pointers):
        lengths[_nonempty(lengths)[0]] -= 1

    _rewrite(path, shorten)
    with pytest.raises(FormatError, match=f"{path}.*cover"):
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
