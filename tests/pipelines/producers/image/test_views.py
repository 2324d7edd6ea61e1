"""Multi-crop views (issue 25 item 1): one decode per sample, every view cropped, resized,
flipped and normalised from it on the cpu backend, each view's crop a pure function of
(seed, epoch, sample, view)."""

import itertools
import warnings

import numpy as np
import pytest
import torch

from chute import CropConfig, ImageOptions, Pipeline, View
from chute.errors import DecodeError
from chute.pipelines import view_seed
from tests.pipelines._pipeline_data import write_dataset

pytest.importorskip("chute.fallbacks._decode")
from chute.fallbacks import decode_batch, decode_views  # noqa: E402

N = 24
B = 4
DINO = [View(32, scale=(0.32, 1.0), count=2), View(16, scale=(0.05, 0.32), count=6)]
CPU = {"threads": 1, "dct_scaling": False}


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("views") / "ds.chute", n=N, sizes=(60, 120))


@pytest.fixture(scope="module")
def corrupt_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("views-bad") / "bad.chute", n=N,
                         sizes=(60, 120), corrupt=(5,))


def views_pipe(path, views=DINO, backend_options=CPU, **kw):
    image = ImageOptions(views=views, backend="cpu", backend_options=backend_options,
                         **{k: kw.pop(k) for k in ("dtype", "layout", "memory_format")
                            if k in kw})
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 7, **kw}
    return Pipeline(path, B, fields={"image": image, "label": None}, **kw)


def collect(pipe, limit=None):
    out = []
    for batch in itertools.islice(pipe, limit):
        out.append((batch["index"].clone(), [v.clone() for v in batch["image"]]))
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(ia, ib) and len(va) == len(vb)
        and all(torch.equal(x, y) for x, y in zip(va, vb, strict=True))
        for (ia, va), (ib, vb) in zip(a, b, strict=True))


def test_batch_holds_a_list_of_views_in_order(dataset_path):
    with views_pipe(dataset_path) as pipe:
        batch = next(iter(pipe))
        shapes = [tuple(v.shape) for v in batch["image"]]
        assert shapes == [(B, 3, 32, 32)] * 2 + [(B, 3, 16, 16)] * 6
        assert all(v.dtype == torch.float16 for v in batch["image"])
        assert batch["label"].shape == (B,)


def test_the_eight_views_of_a_sample_differ_in_crop_box(dataset_path):
    with views_pipe(dataset_path) as pipe:
        plan = pipe.plan()
        for k in range(len(plan)):
            boxes = plan.request(k).params["image.view_boxes"]
            assert boxes.shape == (B, 8, 4)
            for sample in boxes:
                assert len({tuple(box) for box in sample}) == 8
        # and the pixels differ too (each view of its own size compared with its kind)
        batch = next(iter(pipe))
        for a, b in itertools.combinations(range(8), 2):
            if batch["image"][a].shape == batch["image"][b].shape:
                assert not torch.equal(batch["image"][a], batch["image"][b])


@pytest.mark.parametrize("roi_decode", [None, False])
def test_each_view_equals_the_single_view_pipeline_with_its_crop(dataset_path, roi_decode):
    options = {**CPU, "roi_decode": roi_decode}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no ROI decoder here: full frames
        with views_pipe(dataset_path, backend_options=options, order="sequential") as pipe:
            multi = collect(pipe)
        expanded = [v for v in DINO for _ in range(v.count)]
        for v, view in enumerate(expanded):
            crop = CropConfig(scale=view.scale, ratio=view.ratio, flip_p=view.flip_p)
            image = ImageOptions(size=view.size, crop=crop, backend="cpu",
                                 backend_options=options)
            with Pipeline(dataset_path, B, fields={"image": image}, device="cpu", rank=0,
                          world_size=1, seed=view_seed(7, v), order="sequential") as single:
                for (ids, views), batch in zip(multi, single, strict=True):
                    assert torch.equal(ids, batch["index"])
                    assert torch.equal(views[v], batch["image"]), f"view {v}"


def test_two_runs_with_one_seed_are_identical_and_another_seed_differs(dataset_path):
    with views_pipe(dataset_path) as pipe:
        first = collect(pipe)
    with views_pipe(dataset_path) as pipe:
        second = collect(pipe)
    with views_pipe(dataset_path, seed=8) as pipe:
        other = collect(pipe)
    assert len(first) == N // B
    assert same(first, second)
    assert not same(first, other)


@pytest.mark.parametrize("k", [1, 3])
def test_resume_after_k_batches_continues_exactly(dataset_path, k):
    with views_pipe(dataset_path) as pipe:
        pipe.set_epoch(1)
        full = collect(pipe)
    with views_pipe(dataset_path) as pipe:
        pipe.set_epoch(1)
        head = collect(pipe, k)
        state = pipe.state_dict()
    with views_pipe(dataset_path) as pipe:
        pipe.load_state_dict(state)
        pipe.set_epoch(1)
        tail = collect(pipe)
    assert same(head + tail, full)


def test_views_change_with_the_epoch(dataset_path):
    with views_pipe(dataset_path, order="sequential") as pipe:
        epoch0 = collect(pipe)
        pipe.set_epoch(1)
        epoch1 = collect(pipe)
    assert torch.equal(epoch0[0][0], epoch1[0][0])  # same samples (unshuffled)
    assert not torch.equal(epoch0[0][1][0], epoch1[0][1][0])  # other crops


def test_decode_at_the_dct_scale_every_view_allows():
    from chute._sample_images import synthetic_jpeg

    rng = np.random.default_rng(0)
    payloads = [synthetic_jpeg(rng, 160, 160) for _ in range(2)]
    data = np.frombuffer(b"".join(payloads), np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in payloads])
    # view 0 alone would be decoded at 1/4 scale (128 >= 4 * 32); view 1 allows none
    boxes = np.array([[[8, 8, 128, 128], [20, 30, 20, 20]]] * 2, np.float64)
    flips = np.array([[False, True], [True, False]])
    outs = [np.zeros((2, 3, 32, 32), np.float32), np.zeros((2, 3, 16, 16), np.float32)]
    status = decode_views(data, offsets, boxes, flips, outs, dct_scaling=True, threads=1)
    assert not status.any()
    for v, out in enumerate(outs):
        alone = np.zeros_like(out)
        assert not decode_batch(data, offsets, boxes[:, v], flips[:, v], alone,
                                dct_scaling=False, threads=1).any()
        assert np.array_equal(out, alone)
    scaled = np.zeros_like(outs[0])
    decode_batch(data, offsets, boxes[:, 0], flips[:, 0], scaled, dct_scaling=True, threads=1)
    assert not np.array_equal(scaled, outs[0])  # alone, view 0 would have been DCT-scaled


def test_a_view_outside_its_image_fails_the_sample():
    from chute._sample_images import synthetic_jpeg

    payload = synthetic_jpeg(np.random.default_rng(1), 40, 40)
    data = np.frombuffer(payload, np.uint8)
    boxes = np.array([[[0, 0, 20, 20], [30, 30, 20, 20]]], np.float64)
    outs = [np.ones((1, 3, 8, 8), np.float32), np.ones((1, 3, 8, 8), np.float32)]
    status = decode_views(data, [0, len(data)], boxes, np.zeros((1, 2), bool), outs)
    assert status[0] != 0
    assert not any(out.any() for out in outs)


def test_a_failed_sample_is_replaced_in_every_view(corrupt_path):
    with pytest.warns(RuntimeWarning, match="sample 5"):
        # train substitutes (eval leaves a failed sample out)
        with views_pipe(corrupt_path, augment="train", order="sequential") as pipe:
            batches = collect(pipe)
    ids = torch.cat([i for i, _ in batches])
    assert 5 not in ids.tolist() and len(ids) == N
    row = 5 % B
    views = batches[5 // B][1]
    substitute = int(batches[5 // B][0][row])
    # the substitute's views are those it has in its own batch
    where = int(torch.nonzero(ids == substitute)[0, 0])
    own = batches[where // B][1]
    for v in range(8):
        assert torch.equal(views[v][row], own[v][where % B])
    with pytest.raises(DecodeError, match="sample 5"):
        with views_pipe(corrupt_path, augment="eval", on_error="raise") as pipe:
            collect(pipe)


def test_each_view_gets_its_own_transform_and_the_field_options(dataset_path):
    ones = [View(32, count=1, transform=lambda x: torch.ones_like(x)),
            View(16, count=2)]
    with views_pipe(dataset_path, views=ones, dtype="bfloat16",
                    memory_format=torch.channels_last, copy=True) as pipe:
        batch = next(iter(pipe))
    first, *rest = batch["image"]
    assert torch.equal(first, torch.ones_like(first))
    for image in rest:
        assert image.dtype == torch.bfloat16 and image.shape == (B, 3, 16, 16)
        assert image.is_contiguous(memory_format=torch.channels_last)
        assert image.float().abs().sum() > 0


def test_uint8_nhwc_views_equal_the_float_views_rounded(dataset_path):
    with views_pipe(dataset_path, dtype="uint8", layout="NHWC") as pipe:
        batch = next(iter(pipe))
    assert [tuple(v.shape) for v in batch["image"]] == [(B, 32, 32, 3)] * 2 + [(B, 16, 16, 3)] * 6
    assert all(v.dtype == torch.uint8 for v in batch["image"])


@pytest.mark.parametrize("options,match", [
    (dict(views=DINO, size=32), r"leave \['size'\] unset"),
    (dict(views=DINO, backend="dali-native"), r"backend='dali-native' does not decode views"),
    (dict(views=[]), "non-empty list of chute.View"),
    (dict(views=[CropConfig()]), r"chute.View\(...\) items"),
])
def test_views_refuse_what_they_cannot_do(dataset_path, options, match):
    with pytest.raises(ValueError, match=match):
        Pipeline(dataset_path, B, fields={"image": ImageOptions(**options)}, device="cpu")


def test_view_checks_its_arguments():
    with pytest.raises(ValueError, match="count"):
        View(32, count=0)
    with pytest.raises(ValueError, match="scale"):
        View(32, scale=(0.5, 2.0))
    with pytest.raises(TypeError, match="transform"):
        View(32, transform=3)


def test_views_beyond_the_limit_are_one_line(dataset_path):
    """count=300 or 1,000 kinds of view reached numba's parallel loop: a raw
    UnsupportedParforsError; attempts=10**9 a MemoryError (issue 37)."""
    with pytest.raises(ValueError, match=r"View.count must be an integer from 1 to 64"):
        View(16, count=300)
    with pytest.raises(ValueError, match=r"1000 views per sample \(count expanded\); at most 64"):
        ImageOptions(views=[View(16 + k % 5) for k in range(1000)], backend="cpu")
    with pytest.raises(ValueError, match=r"65 views per sample"):
        ImageOptions(views=[View(16, count=64), View(12)])
    with pytest.raises(ValueError, match=r"attempts must be an integer from 0 to 100"):
        View(16, attempts=10**9)
    with views_pipe(dataset_path, views=[View(16, count=40), View(12, count=24)]) as pipe:
        assert len(next(iter(pipe))["image"]) == 64  # the most is decoded
