"""A process still reading the old version of a dataset that is rewritten (or deleted) in
object storage (docs/storage.md, "Writing to s3://"): the old version's objects are gone, and
it is told so in one line, with what to do (reopen), not to check its URL; a file missing
from a dataset that still lists it keeps the plain "not found"."""

from __future__ import annotations

import pytest

from chute.readers import open_dataset
from chute.readers.storage._object_store import Remote, StorageError
from tests.convert.destination.test_write_lease import rows, writer


def write(url: str, data: list[dict], overwrite: bool = False) -> None:
    with writer(url, overwrite=overwrite) as w:
        for row in data:
            w.write(row)


@pytest.fixture
def opened(s3, tmp_path):
    """(URL, its dataset opened): nothing of its payload files is fetched yet."""
    server, bucket = s3
    url = f"{bucket}/ds"
    write(url, rows(6, 0))
    return url, open_dataset(url, cache_dir=tmp_path / "c")


def test_a_reader_of_a_rewritten_dataset_is_told_to_reopen(opened, tmp_path):
    url, old = opened
    write(url, rows(6, 1), overwrite=True)
    with pytest.raises(StorageError, match=r"/ds/w[0-9a-f]{8}-00000/.*: the dataset .*/ds was "
                                           r"rewritten while this process read it .*reopen"
                       ) as info:
        old[0]
    assert "\n" not in str(info.value)
    new = open_dataset(url, cache_dir=tmp_path / "c")  # reopened: the new version
    assert bytes(new[0]["image"]) == rows(1, 1)[0]["image"]


def test_a_reader_of_a_deleted_dataset_is_told_so(opened):
    url, old = opened
    remote = Remote(url)
    remote.delete([name for name, _ in remote.list()])
    with pytest.raises(StorageError, match="was deleted while this process read it"):
        old[0]


def test_a_file_missing_from_a_dataset_that_lists_it_is_not_found(opened):
    url, old = opened
    remote = Remote(url)
    remote.delete([name for name, _ in remote.list() if name.endswith("00000/image.bin")
                   or name.endswith("00000/data.bin")])
    with pytest.raises(StorageError, match="not found in object storage; check the URL"):
        old[0]
