"""Every file chute opens from a zarr group read directly stays inside the store (issue 14;
docs/design.md, "Zarr groups"): chunk files, the folders on their way, array folders, metadata
documents, shard files and consolidated metadata entries that lead out (symlinks, `..`,
absolute paths) are a FormatError naming the store and the entry, also under
on_error="skip"; links that stay inside read as usual."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from chute.errors import FormatError
from tests.readers._zarr_stores import latents_values, open_latents, write_store
from tests.readers.test_zarr import read_path  # noqa: F401  (fixture)

pytest.importorskip("zarr")

S, V = 12, 3
VALUES = latents_values(S, V)
SECRET = latents_values(S, V, seed=7)  # what a store leading out would deliver
OUT = "leads outside the zarr store"


def _pair(tmp_path, **layout):
    """A store and, next to it, one of the same layout holding other values."""
    store = write_store(tmp_path / "x.zarr", VALUES, **layout)
    other = write_store(tmp_path / "other.zarr", SECRET, **layout)
    return store, other


def _relink(path, target):
    """`path` (file or folder) replaced by a symlink to `target`."""
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(target)


def _refused(ds, ids, match=OUT):
    with pytest.raises(FormatError, match=match):
        ds.read("base_frames", ids)
    status = np.zeros(len(ids), np.uint8)  # on_error="skip" does not skip it either
    with pytest.raises(FormatError, match=match):
        ds.reader("base_frames").read(np.asarray(ids), status=status)


@pytest.mark.parametrize("fmt,chunk,codec,key", [
    (3, 1, "none", "c/1/0/0/0"), (3, 1, "none", "c/1"), (3, 1, "zstd", "c/1/0/0/0"),
    (3, 1, "zstd", "c/1/0"), (2, 4, "blosc", "1.0.0.0")],
    ids=["v3-none-file", "v3-none-folder", "v3-zstd-file", "v3-zstd-folder", "v2-blosc-file"])
def test_chunk_leading_out_is_refused(tmp_path, read_path, fmt, chunk, codec, key):  # noqa: F811
    """A chunk file, or a folder on its way, is a symlink into another store."""
    store, other = _pair(tmp_path, zarr_format=fmt, chunk=chunk, codec=codec)
    _relink(store / "base_frames" / key, other / "base_frames" / key)
    ds = open_latents(store)
    np.testing.assert_array_equal(ds.read("base_frames", [0]), VALUES["base_frames"][[0]])
    _refused(ds, [0, chunk, 2 * chunk])


def test_the_message_names_the_store_the_entry_and_the_fix(tmp_path):
    store, other = _pair(tmp_path, zarr_format=3, chunk=1, codec="none")
    _relink(store / "base_frames/c/2/0/0/0", other / "base_frames/c/2/0/0/0")
    with pytest.raises(FormatError) as caught:
        open_latents(store).read("base_frames", [2])
    message = str(caught.value)
    assert "a chunk of array 'base_frames'" in message and f"zarr store {store} " in message
    assert str(other / "base_frames/c/2/0/0/0") in message and "copy them in" in message


def test_shard_leading_out_is_refused(tmp_path):
    store, other = _pair(tmp_path, zarr_format=3, chunk=2, codec="zstd", shard=4)
    _relink(store / "base_frames/c/1/0/0/0", other / "base_frames/c/1/0/0/0")
    ds = open_latents(store)
    np.testing.assert_array_equal(ds.read("base_frames", [0]), VALUES["base_frames"][[0]])
    _refused(ds, [0, 5])


@pytest.mark.parametrize("document", ["zarr.json", "base_frames/zarr.json", "clip_emb"])
def test_metadata_leading_out_is_refused(tmp_path, document):
    store, other = _pair(tmp_path, zarr_format=3, chunk=1, codec="none")
    _relink(store / document, other / document)
    with pytest.raises(FormatError, match=OUT):
        open_latents(store)


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("name", ["..", "../other.zarr/base_frames", "/abs/base_frames"])
def test_consolidated_entries_leading_out_are_refused(tmp_path, fmt, name):
    import zarr

    store, other = _pair(tmp_path, zarr_format=fmt, chunk=1, codec="none")
    zarr.consolidate_metadata(str(store))
    name = name.replace("/abs", str(tmp_path))
    document = store / ("zarr.json" if fmt == 3 else ".zmetadata")
    meta = json.loads(document.read_text())
    if fmt == 3:
        entries = meta["consolidated_metadata"]["metadata"]
        entries[name] = entries.pop("base_frames")
    else:
        entries = meta["metadata"]
        entries[f"{name}/.zarray"] = entries.pop("base_frames/.zarray")
    document.write_text(json.dumps(meta))
    shutil.rmtree(store / "base_frames")
    with pytest.raises(FormatError, match=f"{store}.*(not a plain name|corrupt)"):
        open_latents(store).read(name, [0])


def test_links_that_stay_inside_read_as_usual(tmp_path, read_path):  # noqa: F811
    store = write_store(tmp_path / "x.zarr", VALUES, zarr_format=3, chunk=1, codec="zstd")
    chunks = store / "base_frames" / "c"
    (store / "kept").mkdir()
    shutil.move(chunks / "3", store / "kept" / "3")
    (chunks / "3").symlink_to("../../kept/3")  # relative, inside
    (chunks / "4/0/0/0").rename(store / "kept" / "four")
    (chunks / "4/0/0/0").symlink_to(store / "kept" / "four")  # absolute, inside
    ds = open_latents(store)
    ids = np.arange(S)
    np.testing.assert_array_equal(ds.read("base_frames", ids), VALUES["base_frames"])


def test_without_openat2_each_chunk_path_is_resolved(tmp_path, monkeypatch, read_path):  # noqa: F811
    """Older kernels and other systems: the same refusal, by each chunk's resolved path."""
    from chute.readers.storage import _paths
    from chute.readers.zarr import _chunk_native

    monkeypatch.setattr(_paths._open_beneath, "available", lambda: False)
    monkeypatch.setattr(_chunk_native, "available", lambda: False)
    store, other = _pair(tmp_path, zarr_format=3, chunk=1, codec="zstd")
    _relink(store / "base_frames/c/1", other / "base_frames/c/1")
    (store / "base_frames/c/2/0/0/0").rename(store / "two")
    (store / "base_frames/c/2/0/0/0").symlink_to(store / "two")  # inside: read
    ds = open_latents(store)
    np.testing.assert_array_equal(ds.read("base_frames", [0, 2]), VALUES["base_frames"][[0, 2]])
    _refused(ds, [0, 1, 2])
