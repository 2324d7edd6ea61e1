"""readers/_open.py: open_dataset, open_url and DatasetRef.open share one opener, and an option
that does not apply to what the path names is refused in one line, never ignored."""

import pickle

import pytest

from chute.readers import DatasetRef, open_dataset, open_url


@pytest.mark.parametrize("option", [{"sample_array": "latents"}, {"missing_chunks": "fill"},
                                    {"chunk_cache": 0}])
@pytest.mark.parametrize("opener", [open_dataset, open_url])
def test_zarr_options_on_a_dataset_in_object_storage_are_refused(opener, option):
    # refused before anything asks the server: no server is needed
    with pytest.raises(ValueError, match=r"s3://bucket/ds: sample_array, missing_chunks and "
                                         r"chunk_cache are for local zarr groups"):
        opener("s3://bucket/ds", **option)


@pytest.mark.parametrize("opener", [open_dataset, open_url])
def test_cache_options_on_a_local_dataset_are_refused(dataset_dir, opener):
    with pytest.raises(ValueError, match="cache_dir, cache_limit and offline are for datasets "
                                         "in object storage"):
        opener(dataset_dir, cache_limit="1GB")


@pytest.mark.parametrize("option", [{"sample_array": "x"}, {"chunk_cache": 0}])
def test_zarr_options_on_a_chute_dataset_are_refused(dataset_dir, option):
    with pytest.raises(ValueError, match="are for zarr groups; this is not one"):
        open_url(str(dataset_dir), **option)


def test_the_three_openers_open_the_same_dataset(dataset_dir):
    by_path = open_dataset(dataset_dir)
    by_url = open_url(f"file://{dataset_dir}")
    again = pickle.loads(pickle.dumps(DatasetRef.of(by_path))).open()
    for ds in (by_url, again):
        assert ds.fingerprint == by_path.fingerprint and len(ds) == len(by_path)
        assert bytes(ds.gather([3, 7])[0]) == bytes(by_path.gather([3, 7])[0])
