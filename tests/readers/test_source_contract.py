"""The contract of every Dataset source (issue 28, item 5): a chute dataset, a zarr group (v2
and v3) and a Megatron-LM .bin/.idx pair, each built at test time from the same logical rows
(token ids, a label, and an embedding table looked up through the label, as far as the source
can hold them), meet the DatasetProtocol (`chute/readers/_protocol.py`) with one set of
assertions: length, fields and specs, a fingerprint stable across opens and different for
other content (a DatasetRef of the old content then refuses to open), column / read / reader /
locate, pickling; they hold the same values for the same rows; and
`Pipeline(source, 4, fields=..., device="cpu", order="sequential", augment="eval")` delivers every
row once, in order (docs/design.md, "Storage and identity", "Zarr groups", "Tables and
lookups")."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import chute
from chute.cli import main
from chute.convert import ShardWriter
from chute.errors import FormatError
from chute.readers import DatasetProtocol, DatasetRef, SampleIndexError, open_dataset
from chute.readers.kinds._kinds import KINDS
from tests.readers.test_megatron import write_megatron_pair

N = 10  # rows; batches of 4 leave a short last one
TOKENS = 6  # token ids per row
DTYPES = {"tokens": np.dtype(np.uint16), "label": np.dtype(np.int64), "emb": np.dtype(np.float32)}
IDS = np.array([N - 1, 0, 5, 5, 2, 8])


def logical_rows(n: int = N, seed: int = 0) -> dict[str, np.ndarray]:
    """What every source holds: `tokens` [n, 6] uint16 and `label` [n] int64 per row, and the
    table `emb` [3, 4] float32 (one row per label)."""
    rng = np.random.default_rng(seed)
    return {"tokens": rng.integers(0, 2**16, (n, TOKENS), dtype=np.uint16),
            "label": rng.integers(0, 3, n).astype(np.int64),
            "emb": rng.standard_normal((3, 4)).astype(np.float32)}


# -- the sources -------------------------------------------------------------------------------
def _chute(path: Path, rows: dict) -> Path:
    with ShardWriter(path, {"tokens": "ndarray", "label": "int64"}, shard_size=30,
                     tables={"emb": rows["emb"]}, overwrite=True) as writer:  # 2 rows a shard
        for tokens, label in zip(rows["tokens"], rows["label"], strict=True):
            writer.write({"tokens": tokens, "label": label})
    return path


def _zarr(zarr_format: int) -> Callable[[Path, dict], Path]:
    def build(path: Path, rows: dict) -> Path:
        pytest.importorskip("zarr")
        from tests.readers._zarr_stores import write_store

        return write_store(path.with_suffix(".zarr"), rows, zarr_format=zarr_format, chunk=3)
    return build


def _megatron(path: Path, rows: dict) -> Path:
    write_megatron_pair(path, list(rows["tokens"]))  # uint16 documents of TOKENS ids each
    return path


@dataclass(frozen=True)
class Source:
    build: Callable[[Path, dict], Path]  # writes the rows at (about) path; returns what to open
    holds: tuple[str, ...]  # the logical columns it holds ("emb": the table)
    options: dict  # for open_dataset (a Megatron pair's field name)

    def open(self, path: Path):
        return open_dataset(path, **self.options)


SOURCES = {
    "chute": Source(_chute, ("tokens", "label", "emb"), {}),
    # the table's rows differ from the samples': the group names its sample array
    "zarr-v2": Source(_zarr(2), ("tokens", "label", "emb"), {"sample_array": "tokens"}),
    "zarr-v3": Source(_zarr(3), ("tokens", "label", "emb"), {"sample_array": "tokens"}),
    "megatron": Source(_megatron, ("tokens",), {"bytes_field": "tokens"}),
}
PER_SAMPLE = ("tokens", "label")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (source, path) of each source holding logical_rows(), built once."""
    cache: dict[str, tuple[Source, Path]] = {}

    def get(name: str) -> tuple[Source, Path]:
        if name not in cache:
            source = SOURCES[name]
            cache[name] = source, source.build(tmp_path_factory.mktemp(name) / "d",
                                               logical_rows())
        return cache[name]
    return get


def _values(name: str, value) -> np.ndarray:
    """A stored value of logical column `name` as its logical dtype (a Megatron pair's tokens
    are bytes; a Pipeline's are tensors)."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    array = np.asarray(value)
    return np.ascontiguousarray(array).view(DTYPES[name]) if array.dtype == np.uint8 else array


def _check(name: str, got, want: np.ndarray, where: str) -> None:
    got = _values(name, got)
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{where}: {got.dtype} {got.shape} != {want.dtype} {want.shape}"
    np.testing.assert_array_equal(got, want, err_msg=where)


def _batch(name: str, got, want: np.ndarray, where: str) -> None:
    """A batch: an array [B, ...], or a list of B values (a bytes field)."""
    assert len(got) == len(want), where
    if isinstance(got, list):
        for row, value in enumerate(got):
            _check(name, value, want[row], f"{where} row {row}")
    else:
        _check(name, got, want, where)


# -- the protocol ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SOURCES)
def test_meets_the_protocol(name, built):
    source, path = built(name)
    ds = source.open(path)
    assert isinstance(ds, DatasetProtocol)
    assert len(ds) == N and isinstance(ds.path, Path)
    assert ds.url.startswith("file:///") and ds.url == source.open(path).url
    assert set(source.holds) <= set(ds.fields) and set(ds.specs) == set(ds.fields)
    for field, kind in ds.fields.items():
        assert kind in KINDS and ds.specs[field]["kind"] == kind, field
        reader = ds.reader(field)
        assert reader.sample_shape is None or isinstance(reader.sample_shape, tuple), field
        assert callable(reader.get) and callable(reader.read), field
    with pytest.raises(KeyError):
        ds.reader("no such field")
    with pytest.raises(KeyError):
        ds.read("no such field", [0])
    for i in range(N):
        shard, local = ds.locate(i)
        assert isinstance(shard, str) and shard and isinstance(local, int) and 0 <= local <= i
    assert ds.locate(-1) == ds.locate(N - 1)
    for beyond in (N, -N - 1):
        with pytest.raises(SampleIndexError):
            ds.locate(beyond)
        with pytest.raises(SampleIndexError):
            ds[beyond]
    with pytest.raises(SampleIndexError):
        ds.read("tokens", [N])
    with pytest.raises(TypeError):
        ds.read("tokens", [[0]])


@pytest.mark.parametrize("name", SOURCES)
def test_fingerprint_is_stable_and_a_ref_refuses_changed_content(name, tmp_path):
    source = SOURCES[name]
    path = source.build(tmp_path / "d", logical_rows())
    ds = source.open(path)
    fingerprint = ds.fingerprint
    assert isinstance(fingerprint, str) and fingerprint
    assert source.open(path).fingerprint == fingerprint  # stable across opens
    copy = pickle.loads(pickle.dumps(ds))  # what a DALI worker or a DDP rank gets
    assert copy.fingerprint == fingerprint and len(copy) == N and copy.fields == ds.fields
    ref = pickle.loads(pickle.dumps(DatasetRef.of(ds)))
    reopened = ref.open()
    assert (reopened.fingerprint, len(reopened), reopened.fields) == (fingerprint, N, ds.fields)
    for i in (0, N - 1):
        _check("tokens", reopened[i]["tokens"], logical_rows()["tokens"][i], f"{name} ref {i}")
        _check("tokens", copy[i]["tokens"], logical_rows()["tokens"][i], f"{name} copy {i}")

    other = logical_rows(N - 1, seed=1)  # other content, rewritten at the same place
    assert source.build(tmp_path / "d", other) == path
    changed = source.open(path)
    assert changed.fingerprint != fingerprint and len(changed) == N - 1
    with pytest.raises(FormatError, match="changed"):
        ref.open()


@pytest.mark.parametrize("name", SOURCES)
def test_same_values_for_the_same_rows(name, built):
    """Every way of reading a row gives the logical row: a sample, the reader, Dataset.read,
    the scalar column, the table's rows, and gather for a bytes field."""
    source, path = built(name)
    ds = source.open(path)
    rows = logical_rows()
    for column in (c for c in source.holds if c in PER_SAMPLE):
        for i in range(N):
            _check(column, ds[i][column], rows[column][i], f"{name} sample {i} {column}")
        want = rows[column][IDS]
        _batch(column, ds.reader(column).read(IDS), want, f"{name} reader {column}")
        _batch(column, ds.read(column, IDS), want, f"{name} Dataset.read {column}")
        if ds.fields[column] == "bytes":
            data, offsets = ds.gather(IDS, column)
            assert data.tobytes() == want.tobytes(), name
            assert np.diff(offsets).tolist() == [TOKENS * 2] * len(IDS), name
        else:
            with pytest.raises(KeyError):
                ds.gather(IDS, column)
    if "label" in source.holds:
        _check("label", ds.column("label"), rows["label"], f"{name} column")
    with pytest.raises(KeyError):
        ds.column("tokens")  # not a scalar field in any source
    if "emb" in source.holds:
        assert ds.fields["emb"] == "table"
        table_rows = np.array([2, 0, 1, 1])
        reader = ds.reader("emb")
        assert reader.sample_shape == (4,) and reader.dtype == np.float32
        _check("emb", reader.read(table_rows), rows["emb"][table_rows], f"{name} table")
        _check("emb", ds.read("emb", table_rows), rows["emb"][table_rows], f"{name} table")


@pytest.mark.parametrize("name", SOURCES)
def test_pipeline_delivers_every_row_once_in_order(name, built):
    source, path = built(name)
    ds = source.open(path)
    rows = logical_rows()
    fields = {c: None for c in source.holds if c in PER_SAMPLE}
    if "emb" in source.holds:
        fields["emb"] = chute.Lookup("label")  # the table row of each sample's label
    pipe = chute.Pipeline(ds, 4, fields=fields, device="cpu", order="sequential", augment="eval")
    got: dict[str, list] = {"index": [], **{c: [] for c in fields}}
    sizes = []
    try:
        assert len(pipe) == 3
        for batch in pipe:
            sizes.append(len(batch["index"]))
            got["index"] += batch["index"].tolist()
            for column in fields:
                value = batch[column]
                got[column] += [_values(column, v).copy() for v in value] \
                    if isinstance(value, list) else list(_values(column, value).copy())
    finally:
        pipe.close()
    assert sizes == [4, 4, 2] and got["index"] == list(range(N))
    want = {**rows, "emb": rows["emb"][rows["label"]]}
    for column in fields:
        _check(column, np.stack(got[column]), want[column], f"{name} Pipeline {column}")


@pytest.mark.parametrize("name", SOURCES)
def test_info_and_verify_describe_it(name, built, capsys):
    source, path = built(name)
    ds = source.open(path)
    capsys.readouterr()
    named = ["--sample-array", "tokens"] if name.startswith("zarr") else []
    assert main(["info", str(path), "--json", *named]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["samples"] == N and info["fingerprint"] == ds.fingerprint
    assert info["fields"] == (ds.fields if named else open_dataset(path).fields)
    assert set(info["field_types"]) == set(info["fields"])
    assert main(["verify", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
