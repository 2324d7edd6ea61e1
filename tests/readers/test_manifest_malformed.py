"""Malformed manifests and columns raise a FormatError naming the file and the key, never a
raw KeyError, AttributeError, TypeError, OverflowError, RecursionError, IsADirectoryError or
EOFError (issue 11, defects 9 and 10); the CLI prints one line and exits non-zero."""

import json

import numpy as np
import pytest

from chute.cli import main
from chute.convert import ShardWriter
from chute.errors import FormatError
from chute.readers import open_dataset, verify_dataset


def _set(path, value):
    """A manifest change that sets manifest[path...] = value (path: keys / indices)."""
    def change(m):
        target = m
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _drop(path):
    def change(m):
        target = m
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


# (name, change, what the message must name)
MUTANTS = [
    ("fields-list", _set(["fields"], ["image"]), "fields"),
    ("fields-none", _set(["fields"], None), "fields"),
    ("shards-dict", _set(["shards"], {"a": 1}), "shards"),
    ("shard-str", _set(["shards", 0], "00000"), "shards"),
    ("shard-no-name", _drop(["shards", 0, "name"]), "name"),
    ("shard-no-files", _drop(["shards", 0, "files"]), "files"),
    ("shard-files-list", _set(["shards", 0, "files"], []), "files"),
    ("shard-count-str", _set(["shards", 0, "num_samples"], "3"), "num_samples"),
    ("shard-count-neg", _set(["shards", 0, "num_samples"], -1), "num_samples"),
    ("shard-count-huge", _set(["shards", 0, "num_samples"], 10**30), "num_samples"),
    ("shard-count-float", _set(["shards", 0, "num_samples"], 1e300), "num_samples"),
    ("shard-name-int", _set(["shards", 0, "name"], 7), "name"),
    ("file-entry-str", _set(["shards", 0, "files", "label.npy"], "x"), "label.npy"),
    ("file-size-missing", _drop(["shards", 0, "files", "label.npy", "size"]), "size"),
    ("file-size-str", _set(["shards", 0, "files", "label.npy", "size"], "10"), "size"),
    ("file-size-huge", _set(["shards", 0, "files", "label.npy", "size"], 10**40), "size"),
    ("num-samples-str", _set(["num_samples"], "120"), "num_samples"),
    ("num-samples-huge", _set(["num_samples"], 10**30), "num_samples"),
    ("class-names-int", _set(["class_names"], 5), "class_names"),
    ("field-kind-list", _set(["fields", "image", "kind"], ["bytes"]), "kind"),
    ("scalar-dtype-dict", _set(["fields", "label", "dtype"], {"a": 1}), "dtype"),
    ("scalar-dtype-object", _set(["fields", "label", "dtype"], "O"), "dtype"),
    ("field-file-int", _set(["fields", "meta", "file"], 3), "file"),
    ("checksum-list", _set(["checksum"], ["xxh3_64"]), "checksum"),
]


def _rewrite(root, change):
    manifest = json.loads((root / "chute.json").read_text())
    change(manifest)
    (root / "chute.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("name,change,names", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_malformed_manifest_is_a_format_error(dataset_dir, capsys, name, change, names):
    _rewrite(dataset_dir, change)
    with pytest.raises(FormatError) as info:
        open_dataset(dataset_dir)
    assert "chute.json" in str(info.value) and names in str(info.value)
    with pytest.raises(FormatError):
        verify_dataset(dataset_dir)
    for command in (["info", str(dataset_dir)], ["verify", str(dataset_dir), "--no-progress"]):
        assert main(command) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and "chute.json" in err


def test_deeply_nested_manifest(dataset_dir, capsys):
    (dataset_dir / "chute.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match="chute.json.*nested"):
        open_dataset(dataset_dir)
    assert main(["info", str(dataset_dir)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_manifest_is_a_directory(tmp_path):
    (tmp_path / "d.chute" / "chute.json").mkdir(parents=True)
    with pytest.raises(FormatError, match="chute.json"):
        open_dataset(tmp_path / "d.chute")


def _shard_file(root, name, index=0):
    manifest = json.loads((root / "chute.json").read_text())
    return root / manifest["shards"][index]["name"] / name


@pytest.mark.parametrize("name", ["label.npy", "image.idx", "image.bin"])
def test_listed_file_is_a_directory(dataset_dir, name):
    path = _shard_file(dataset_dir, name)
    path.unlink()
    path.mkdir()
    with pytest.raises(FormatError, match=f"{path}.*not a regular file"):
        open_dataset(dataset_dir)
    assert any(str(path) in p for p in verify_dataset(dataset_dir))


def test_empty_npy_column(dataset_dir):
    path = _shard_file(dataset_dir, "label.npy")
    path.write_bytes(b"")
    _rewrite(dataset_dir, _set(["shards", 0, "files", "label.npy", "size"], 0))
    with pytest.raises(FormatError, match=f"{path}.*not a readable .npy"):
        open_dataset(dataset_dir)


@pytest.mark.parametrize("key", ["size", "file", "shape"])
def test_table_spec_without_key(tmp_path, key):
    root = tmp_path / "t.chute"
    with ShardWriter(root, {"idx": "int64"}, tables={"emb": np.ones((3, 2), np.float32)}) as w:
        w.write({"idx": 0})
    _rewrite(root, _drop(["fields", "emb", key]))
    with pytest.raises(FormatError, match=f"chute.json: table 'emb' needs .*{key}"):
        open_dataset(root)


def test_empty_table(tmp_path):
    root = tmp_path / "t.chute"
    with ShardWriter(root, {"idx": "int64"}, tables={"emb": np.ones((3, 2), np.float32)}) as w:
        w.write({"idx": 0})
    (root / "emb.table.npy").write_bytes(b"")
    _rewrite(root, _set(["fields", "emb", "size"], 0))  # so that only the load can notice
    with pytest.raises(FormatError, match="emb.table.npy.*not a readable .npy"):
        open_dataset(root)


def test_shard_listed_twice(dataset_dir):
    """Defect 10: a shard listed twice doubled its samples."""
    def twice(m):
        m["shards"].append(json.loads(json.dumps(m["shards"][0])))
        m["num_samples"] += m["shards"][0]["num_samples"]

    _rewrite(dataset_dir, twice)
    with pytest.raises(FormatError, match="chute.json.*listed twice"):
        open_dataset(dataset_dir)


def test_label_outside_class_range(tmp_path):
    """Defect 10: labels outside [0, len(class_names)) were delivered silently."""
    root = tmp_path / "l.chute"
    with ShardWriter(root, {"x": "int32", "label": "int64"}, class_names=["a", "b"]) as w:
        for i, label in enumerate([0, 1, 2, 1]):
            w.write({"x": i, "label": label})
    with pytest.raises(FormatError,
                       match="label.npy: sample 2 .*has label 2, outside the 2 class names"):
        open_dataset(root)
    ok = tmp_path / "ok.chute"
    with ShardWriter(ok, {"label": "int64"}, class_names=["a", "b"]) as w:
        for label in [0, 1, 1]:
            w.write({"label": label})
    assert open_dataset(ok).column("label").tolist() == [0, 1, 1]


@pytest.mark.parametrize("column", ["height", "width"])
def test_zero_image_size_is_a_format_error_at_open(dataset_dir, column):
    """A 0 height raised a plain ValueError from the crop code in the middle of an epoch."""
    path = _shard_file(dataset_dir, f"{column}.npy", 1)
    values = np.load(path)
    values[2] = 0
    np.save(path, values)
    _rewrite(dataset_dir, lambda m: None)
    with pytest.raises(FormatError, match=f"{path}: sample .* has {column} 0"):
        open_dataset(dataset_dir)


def test_cli_error_is_one_line(monkeypatch, capsys, dataset_dir):
    """Any ChuteError becomes one line on stderr, also when its message has line breaks."""
    import chute.readers

    def broken(*args, **kwargs):
        raise FormatError("first line\nsecond line")

    monkeypatch.setattr(chute.readers, "dataset_info", broken)
    assert main(["info", str(dataset_dir)]) == 1
    err = capsys.readouterr().err
    assert err == "chute info: error: first line second line\n"


@pytest.mark.parametrize("old,new", [(b"'descr'", b"'descr"), (b"'shape': (", b"'shape': (("),
                                     (b"{", b"["), (b"'fortran_order'", b"'fortran_order")])
def test_corrupt_npy_header(dataset_dir, old, new):
    """NumPy's header parser raised TokenError / SyntaxError through open_dataset."""
    path = _shard_file(dataset_dir, "label.npy")
    path.write_bytes(path.read_bytes().replace(old, new, 1))
    _rewrite(dataset_dir, _set(["shards", 0, "files", "label.npy", "size"],
                               path.stat().st_size))
    with pytest.raises(FormatError, match=f"{path}: not a readable .npy"):
        open_dataset(dataset_dir)


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("length", [2**40, 2**62, 3])
def test_ragged_length_disagreeing_with_its_record(tmp_path, compression, length):
    """A corrupt ragged length sized every batch buffer (a bogus out-of-memory error)."""
    root = tmp_path / "r.chute"
    spec = {"kind": "ndarray", "ragged": True, "compression": compression}
    with ShardWriter(root, {"x": spec}) as w:
        for n in (1, 2, 1):
            w.write({"x": np.ones((n, 4), np.float32)})
    path = root / "00000" / "x.rows.npy"
    rows = np.load(path)
    rows[1] = length
    np.save(path, rows)
    with pytest.raises(FormatError, match=f"{path}: sample 1 has length {length}"):
        open_dataset(root)


def _video_like(root, frames, rotation=0):
    fields = {"video": {"kind": "bytes", "media": "video"}, "num_frames": "int64",
              "rotation": "int16", "pts": {"kind": "ndarray", "ragged": True, "dtype": "int64",
                                           "shape": [None]}}
    with ShardWriter(root, fields) as w:
        for n in frames:
            w.write({"video": b"\0" * 8, "num_frames": n, "rotation": rotation,
                     "pts": np.arange(3, dtype=np.int64)})
    return root


def test_video_frame_count_must_match_its_timestamps(tmp_path):
    """A corrupt num_frames indexed past the pts record (a raw IndexError in a Pipeline)."""
    assert len(open_dataset(_video_like(tmp_path / "ok", [3, 3]))) == 2
    with pytest.raises(FormatError, match="num_frames.npy: sample 1 .*has num_frames 9"):
        open_dataset(_video_like(tmp_path / "bad", [3, 9]))
    with pytest.raises(FormatError, match="rotation.npy: sample 0 .*has rotation 400"):
        open_dataset(_video_like(tmp_path / "rot", [3, 3], rotation=400))


@pytest.mark.parametrize("column,value", [("channels", 2**31 - 1), ("channels", 0),
                                          ("sample_rate", -5)])
def test_audio_columns_out_of_range(tmp_path, column, value):
    """A corrupt channel count sized the decode buffer: a raw MemoryError in a Pipeline."""
    fields = {"audio": {"kind": "bytes", "media": "audio"}, "sample_rate": "int32",
              "channels": "int32"}
    root = tmp_path / "a.chute"
    with ShardWriter(root, fields) as w:
        for i in range(3):
            sample = {"audio": b"\0" * 8, "sample_rate": 16000, "channels": 1}
            if i == 2:
                sample[column] = value
            w.write(sample)
    with pytest.raises(FormatError, match=f"{column}.npy: sample 2 .*has {column} {value}"):
        open_dataset(root)


@pytest.mark.parametrize("shape", [{"kind": "bytes"}, "abc", [None, "x"], 7])
def test_ndarray_shape_not_a_list(tmp_path, shape):
    root = tmp_path / "n.chute"
    with ShardWriter(root, {"x": {"kind": "ndarray", "ragged": True}}) as w:
        w.write({"x": np.ones((2, 3), np.float32)})
    _rewrite(root, _set(["fields", "x", "shape"], shape))
    with pytest.raises(FormatError, match="chute.json: field 'x' needs a valid dtype and shape"):
        open_dataset(root)


def test_an_integer_of_more_than_4300_digits_is_a_format_error(tmp_path):
    """issue 26 item 14: int's conversion limit raised a raw ValueError from json."""
    path = tmp_path / "d.chute"
    with ShardWriter(path, fields={"label": "int64"}) as w:
        w.write({"label": 1})
    text = (path / "chute.json").read_text()
    manifest = json.loads(text)
    (path / "chute.json").write_text(text.replace(f'"num_samples": {manifest["num_samples"]}',
                                                  '"num_samples": ' + "9" * 5000, 1))
    with pytest.raises(FormatError, match="chute.json: manifest holds a value"):
        open_dataset(path)
