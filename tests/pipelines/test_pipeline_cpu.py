"""The Pipeline on the real cpu backend: same pixels as the decoder, bad samples handled."""

import warnings

import numpy as np
import pytest
import torch

from chute.errors import DecodeError
from chute.pipelines import ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset
from tests.pipelines._plans import image_batch

pytest.importorskip("chute.fallbacks._decode")
from chute.fallbacks import decode_batch  # noqa: E402

N = 24
BAD = 5


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("cpu") / "ds.chute", n=N)


@pytest.fixture(scope="module")
def corrupt_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("bad") / "bad.chute", n=N, corrupt=(BAD,))


def make(path, **kw):
    """dtype=, layout= and backend_options= here are the image field's options."""
    image = {"size": 16, "backend": "cpu", "backend_options": {"threads": 1},
             **{k: kw.pop(k) for k in ("dtype", "layout", "backend_options") if k in kw}}
    kw = {"device": "cpu", "rank": 0, "world_size": 1, **kw}
    return Pipeline(path, 8, fields={"image": ImageOptions(**image), "label": None}, **kw)


@pytest.mark.parametrize("dtype,layout", [("float16", "NCHW"), ("uint8", "NHWC")])
def test_batches_equal_the_decoder_on_the_plan(dataset_path, dtype, layout):
    with make(dataset_path, dtype=dtype, layout=layout, seed=3) as pipe:
        plan = pipe.plan()
        batches = [{k: v.clone() for k, v in b.items()} for b in pipe]
    assert len(batches) == len(plan) == N // 8
    ds = pipe.dataset
    for k, batch in enumerate(batches):
        ids, boxes, flips = image_batch(plan, k)
        assert torch.equal(batch["index"], torch.from_numpy(ids))
        assert torch.equal(batch["label"], torch.from_numpy(ds.column("label")[ids]))
        data, offsets = ds.gather(ids)
        shape = (8, 3, 16, 16) if layout == "NCHW" else (8, 16, 16, 3)
        expected = np.empty(shape, dtype)
        status = decode_batch(data, offsets, boxes, flips, expected, layout=layout,
                              mean=None if dtype == "uint8" else (0.485, 0.456, 0.406),
                              std=None if dtype == "uint8" else (0.229, 0.224, 0.225))
        assert not status.any()
        assert batch["image"].dtype == getattr(torch, dtype)
        assert np.array_equal(batch["image"].numpy(), expected)


def run_eval(path, **kw):
    with make(path, augment="eval", **kw) as pipe:
        out = [(b["index"].clone(), b["label"].clone(), b["image"].clone()) for b in pipe]
        return out, pipe.stats


def run_train(path, **kw):
    with make(path, augment="train", **kw) as pipe:
        out = [(b["index"].clone(), b["label"].clone(), b["image"].clone()) for b in pipe]
        return out, pipe.stats


def test_skip_replaces_a_truncated_jpeg_deterministically_in_train(corrupt_path):
    with pytest.warns(RuntimeWarning, match=rf"sample {BAD} \(shard \S+, local index \d+\)"
                      r".*replaced by sample \d+"):
        first, stats = run_train(corrupt_path)
    ids = torch.cat([b[0] for b in first])
    labels = torch.cat([b[1] for b in first])
    assert BAD not in ids.tolist()
    assert len(ids) == N  # train keeps its batch size: the substitute fills the row
    assert stats.decode_errors == 1 and stats.skipped == []
    assert torch.equal(labels, ids + 1000)  # the substitute brings its own label
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        second, _ = run_train(corrupt_path)
    for a, b in zip(first, second, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    # no substitute image is blank: it was decoded, not zero-filled
    images = torch.cat([b[2] for b in first]).float()
    assert (images.flatten(1).abs().amax(dim=1) > 0).all()


def test_eval_skip_leaves_a_failed_sample_out_and_never_delivers_one_twice(corrupt_path,
                                                                           dataset_path):
    # issue 27: a substitute in eval is a sample the epoch delivers anyway (counted twice)
    with pytest.warns(RuntimeWarning, match=rf"sample {BAD} \(shard \S+, local index \d+\)"
                      r".*left out of this eval pass"):
        batches, stats = run_eval(corrupt_path, order="sequential")
    ids = torch.cat([b[0] for b in batches]).tolist()
    assert sorted(ids) == [i for i in range(N) if i != BAD]  # every other sample, once
    assert [len(b[0]) for b in batches] == [7, 8, 8]  # the failed row is gone, not padded
    assert stats.decode_errors == 1 and stats.skipped == [BAD] and stats.samples == N - 1
    labels = torch.cat([b[1] for b in batches])
    assert torch.equal(labels, torch.tensor(ids) + 1000)  # rows moved up with every field
    # the delivered images are the clean dataset's (the same JPEGs apart from sample BAD)
    clean, _ = run_eval(dataset_path, order="sequential")
    want = {int(i): img for b in clean for i, img in zip(b[0], b[2], strict=True)}
    for b in batches:
        for i, img in zip(b[0], b[2], strict=True):
            assert torch.equal(img, want[int(i)])


def test_eval_batch_whose_every_sample_fails_arrives_empty(tmp_path):
    # every rank keeps the same number of batches (DDP eval loops must not diverge)
    path = write_dataset(tmp_path / "all_bad.chute", n=N, corrupt=tuple(range(8, 16)))
    with pytest.warns(RuntimeWarning, match="left out"):
        batches, stats = run_eval(path, order="sequential")
    assert [len(b[0]) for b in batches] == [8, 0, 8]
    assert batches[1][2].shape == (0, 3, 16, 16)
    assert stats.decode_errors == 8 and stats.skipped == list(range(8, 16))


def test_raise_names_the_sample_and_shard(corrupt_path):
    with pytest.raises(DecodeError, match=rf"sample {BAD} \(shard \S+, local index \d+\)"):
        run_eval(corrupt_path, on_error="raise")


def test_roi_decode_option_reaches_the_decoder(dataset_path, monkeypatch):
    seen = []

    def spy(*args, **kwargs):  # the cpu backend looks decode_batch up in chute.fallbacks
        seen.append(kwargs.get("roi_decode"))
        return decode_batch(*args, **kwargs)

    monkeypatch.setattr("chute.fallbacks.decode_batch", spy)
    images = {}
    for roi in (False, True):
        with make(dataset_path, dtype="uint8", layout="NHWC", seed=4,
                  backend_options={"threads": 1, "roi_decode": roi}) as pipe:
            images[roi] = torch.cat([b["image"].clone() for b in pipe])
    assert set(seen) == {False, True}
    diff = (images[True].int() - images[False].int()).abs()
    assert diff.max() <= 1 and (diff == 0).float().mean() > 0.999


def test_a_missing_turbojpeg_fails_at_construction(dataset_path, monkeypatch, tmp_path):
    from chute.errors import BackendUnavailableError
    from chute.pipelines.producers._candidates import cpu_candidates

    monkeypatch.setenv("CHUTE_TURBOJPEG", str(tmp_path / "missing" / "libturbojpeg.so.0"))
    with pytest.raises(BackendUnavailableError, match="CHUTE_TURBOJPEG"):
        make(dataset_path)  # not at the first next()
    assert cpu_candidates("cpu") == []  # "auto" does not offer what cannot run


def test_decoder_threads_default_to_torchruns_share(dataset_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with make(dataset_path, backend_options=None) as pipe:
        assert pipe.stats.threads == 1 and "OMP_NUM_THREADS" in pipe.stats.threads_reason
    with make(dataset_path, backend_options={"threads": 2}) as pipe:
        assert pipe.stats.threads == 2
