"""chute.mix (issue 25 item 2): several datasets as one Pipeline source, interleaved by weight as
a pure function of (seed, epoch), with the Pipeline's DDP partition and exact resume."""

import itertools

import numpy as np
import pytest
import torch

import chute
from chute import ImageOptions, Pipeline
from chute.pipelines import MixSampler
from tests.pipelines._pipeline_data import latent_of, write_dataset

NA, NB = 300, 120


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    a = write_dataset(root / "a.chute", n=NA, sizes=(20, 30), label=lambda i: i)
    b = write_dataset(root / "b.chute", n=NB, sizes=(40, 60), label=lambda i: 10_000 + i,
                      meta=False)
    return a, b


def labels_pipe(source, batch_size=16, **kw):
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 3, **kw}
    return Pipeline(source, batch_size, fields=("label",), **kw)


def run(pipe, limit=None):
    return [{k: v.clone() for k, v in batch.items()} for batch in itertools.islice(pipe, limit)]


def test_a_list_of_datasets_points_to_mix(paths):
    with pytest.raises(TypeError, match=r"chute\.mix\("):
        Pipeline(list(paths), 8, device="cpu")


def test_batches_carry_the_source_of_every_sample(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    with labels_pipe(mixed) as pipe:
        for batch in run(pipe):
            assert set(batch) == {"index", "label", "source"}
            from_b = batch["label"] >= 10_000
            assert torch.equal(batch["source"], from_b.long())
            # the index is the mix's row: a's rows, then b's
            assert torch.equal(batch["label"], torch.where(from_b, batch["index"] - NA + 10_000,
                                                           batch["index"]))


@pytest.mark.parametrize("replacement", [False, True])
def test_weights_0_7_0_3_hold_within_two_points(paths, replacement):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3},
                      epoch_samples=2000, replacement=replacement)
    with labels_pipe(mixed, batch_size=32) as pipe:
        assert len(pipe) == 2000 // 32
        sources = torch.cat([b["source"] for b in run(pipe)])
        # the first 40 batches already, and the whole epoch (its quotas: 1400 / 600)
        assert abs(float(sources[:1280].float().mean()) - 0.3) < 0.02
        assert abs(float(sources.float().mean()) - 0.3) < 0.02
        pipe.set_epoch(5)
        assert abs(float(torch.cat([b["source"] for b in run(pipe)]).float().mean())
                   - 0.3) < 0.02


def test_without_replacement_every_row_comes_once_before_any_again(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.5, "b": 0.5},
                      epoch_samples=200)  # b's 100 per epoch: 120 rows span two epochs
    order = [mixed.sampler.order(3, e) for e in range(3)]
    rows = [o(np.arange(200)) for o in order]
    b_rows = np.concatenate([r[r >= NA] for r in rows])
    assert len(b_rows) == 300
    assert len(set(b_rows[:100])) == 100  # epoch 0: no row twice
    # 300 draws are 2.5 passes over b's 120 rows: every row 2 or 3 times, none more
    counts = np.bincount(b_rows - NA, minlength=NB)
    assert set(counts.tolist()) == {2, 3}
    # epochs 0 and 1 hold the first pass (draws 0-119) whole
    assert set(np.concatenate(b_rows[:200].reshape(1, -1)).tolist()) == set(range(NA, NA + NB))
    assert sorted(rows[0][rows[0] < NA]) != sorted(rows[1][rows[1] < NA])  # a moves on


def test_default_epoch_repeats_no_row(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    # min(300 / 0.7, 120 / 0.3) = 400 samples: 280 of a, 120 of b (each row once)
    assert mixed.sampler == MixSampler((NA, NB), (280, 120), (False, False))
    rows = mixed.sampler.order(3, 0)(np.arange(400))
    assert len(set(rows.tolist())) == 400
    plain = chute.mix({"a": paths[0], "b": paths[1]})  # no weights: every row once
    assert plain.sampler.quotas == (NA, NB)


def test_two_runs_agree_and_seeds_differ(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    with labels_pipe(mixed) as pipe:
        first = run(pipe)
    with labels_pipe(mixed) as pipe:
        second = run(pipe)
    with labels_pipe(mixed, seed=4) as pipe:
        other = run(pipe)
    assert all(torch.equal(x["index"], y["index"]) for x, y in zip(first, second, strict=True))
    assert not all(torch.equal(x["index"], y["index"])
                   for x, y in zip(first, other, strict=True))


def test_ranks_are_disjoint_with_equal_steps(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    ranks = []
    for rank in range(3):
        with labels_pipe(mixed, batch_size=8, rank=rank, world_size=3) as pipe:
            ranks.append(torch.cat([b["index"] for b in run(pipe)]).tolist())
    assert len({len(r) for r in ranks}) == 1 and len(ranks[0]) == 400 // 24 * 8
    for x, y in itertools.combinations(ranks, 2):
        assert not set(x) & set(y)
    with labels_pipe(mixed, batch_size=8) as pipe:
        single = torch.cat([b["index"] for b in run(pipe)]).tolist()
    # rank r holds positions r, r + 3, ... of the one-process order
    assert ranks[1] == single[1::3][:len(ranks[1])]


@pytest.mark.parametrize("k", [1, 7])
def test_resume_continues_exactly(paths, k):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3},
                      epoch_samples=600, replacement={"b": True})
    with labels_pipe(mixed) as pipe:
        pipe.set_epoch(2)
        full = run(pipe)
    with labels_pipe(mixed) as pipe:
        pipe.set_epoch(2)
        head = run(pipe, k)
        state = pipe.state_dict()
    with labels_pipe(mixed) as pipe:
        pipe.load_state_dict(state)
        tail = run(pipe)
    assert len(head + tail) == len(full)
    for x, y in zip(head + tail, full, strict=True):
        assert all(torch.equal(x[key], y[key]) for key in ("index", "source", "label"))


def test_elastic_resume_delivers_the_rest_of_the_epoch_once(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    with labels_pipe(mixed, batch_size=8) as pipe:
        everything = torch.cat([b["index"] for b in run(pipe)]).tolist()
    seen, state = [], None
    for rank in range(2):
        with labels_pipe(mixed, batch_size=8, rank=rank, world_size=2) as pipe:
            seen += torch.cat([b["index"] for b in run(pipe, 5)]).tolist()
            state = pipe.state_dict()
    with labels_pipe(mixed, batch_size=8) as pipe:  # one rank continues
        pipe.load_state_dict(state)
        seen += torch.cat([b["index"] for b in run(pipe)]).tolist()
    assert sorted(seen) == sorted(everything)


def test_a_state_of_another_mix_is_refused(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    other = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.6, "b": 0.4})
    with labels_pipe(mixed) as pipe:
        run(pipe, 2)
        state = pipe.state_dict()
    with labels_pipe(other) as pipe, pytest.raises(ValueError, match="another dataset"):
        pipe.load_state_dict(state)


def test_images_of_different_sizes_mix(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.5, "b": 0.5})
    image = ImageOptions(size=16, backend="cpu", backend_options={"threads": 1})
    with Pipeline(mixed, 8, fields={"image": image, "label": None}, device="cpu", rank=0,
                  world_size=1, augment="eval", order="sequential") as pipe:
        batches = run(pipe)
    with Pipeline(paths[1], 8, fields={"image": image}, device="cpu", rank=0,
                  world_size=1, augment="eval", order="sequential") as alone:
        b_images = torch.cat([b["image"] for b in run(alone)])
    # the payload views the nvimgcodec backend reads are the sources' own
    ids = np.array([NA + 3, 1, NA])
    data, offsets = mixed.gather(ids)
    assert [bytes(v) for v in mixed.views(ids)] == [
        bytes(data[offsets[k]:offsets[k + 1]]) for k in range(3)]
    assert bytes(mixed.views([NA + 3])[0]) == bytes(mixed.sources[1].views([3])[0])
    images = torch.cat([b["image"] for b in batches])
    index = torch.cat([b["index"] for b in batches])
    assert images.shape[1:] == (3, 16, 16)
    from_b = torch.nonzero(index >= NA)[:, 0]
    assert len(from_b) > 0
    # eval crops do not depend on the row's id: b's samples in the mix are b's own pixels
    assert torch.equal(images[from_b], b_images[index[from_b] - NA])


def test_a_field_missing_from_a_source_needs_optional(paths):
    mixed = chute.mix({"a": paths[0], "b": paths[1]})
    with pytest.raises(ValueError, match=r"missing from source\(s\) \['b'\].*optional"):
        Pipeline(mixed, 8, fields=("label", "meta"), device="cpu")
    lenient = chute.mix({"a": paths[0], "b": paths[1]}, optional=["meta"])
    with Pipeline(lenient, 8, fields=("label", "meta"), device="cpu", rank=0,
                  world_size=1) as pipe:
        for batch in itertools.islice(pipe, 6):
            for source, meta, index in zip(batch["source"], batch["meta"], batch["index"],
                                           strict=True):
                assert meta == (None if source else {"id": int(index)})
    latents = write_dataset(paths[0].parent / "c.chute", n=4, images=False, meta=False,
                            latent_shape=(2,))
    with pytest.raises(ValueError, match="only json and bytes fields may be optional"):
        chute.mix({"a": paths[0], "c": latents}, optional=["height"])
    # a field that is decoded (images) cannot be optional: it failed mid-epoch with a KeyError
    with pytest.raises(ValueError, match="decoded as image.*cannot be mixed"):
        chute.mix({"a": paths[0], "c": latents}, optional=["image"])
    # asking for a field that cannot be optional does not suggest optional= (issue 38 item 10)
    with pytest.raises(ValueError, match=r"'height' \(scalar\) is missing .*cannot be "
                       r"optional.*one Pipeline per dataset") as err:
        Pipeline(chute.mix({"a": paths[0], "c": latents}), 8, fields=("height",), device="cpu")
    assert "optional=[" not in str(err.value)


@pytest.mark.parametrize("weights,match", [
    ({"a": 1.0}, "weights must name every source"),
    ({"a": 1.0, "b": 0.0}, "weights must be positive"),
])
def test_mix_checks_its_arguments(paths, weights, match):
    with pytest.raises(ValueError, match=match):
        chute.mix({"a": paths[0], "b": paths[1]}, weights=weights)


@pytest.mark.parametrize(("kwargs", "message"), [
    # issue 37: OverflowError, int()'s "cannot convert float NaN", or 1.5 taken as 1
    ({"weights": {"a": 10**400, "b": 1}},
     "weights must be positive finite numbers, got a=1000000000"),
    ({"weights": {"a": "x", "b": 1}}, "weights must be positive finite numbers, got a='x'"),
    ({"epoch_samples": float("nan")}, "epoch_samples must be a whole number from 1 to 2**53, "
                                      "got nan"),
    ({"epoch_samples": 1.5}, "epoch_samples must be a whole number from 1 to 2**53, got 1.5"),
    ({"epoch_samples": 10**400}, "epoch_samples must be a whole number from 1 to 2**53"),
])
def test_mix_refuses_weights_and_epoch_samples_in_one_line(paths, kwargs, message):
    with pytest.raises(ValueError) as exc:
        chute.mix({"a": paths[0], "b": paths[1]}, **kwargs)
    assert str(exc.value).startswith(f"chute.mix: {message}") and len(str(exc.value)) < 200


def test_weights_as_large_as_floats_go_mix_by_their_ratio(paths):
    """Two weights of 1e308 summed to inf (OverflowError); their ratio is what counts."""
    huge = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 1e308, "b": 1e308})
    plain = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 1, "b": 1})
    assert huge.sampler.quotas == plain.sampler.quotas
    assert chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 2, "b": 2},
                     epoch_samples=np.int64(10)).sampler.quotas == (5, 5)  # any integer type


def test_latents_mix(tmp_path):
    a = write_dataset(tmp_path / "la.chute", n=30, images=False, latent_shape=(4, 8, 8))
    b = write_dataset(tmp_path / "lb.chute", n=10, images=False, latent_shape=(4, 8, 8),
                      label=lambda i: 5000 + i)
    mixed = chute.mix({"a": a, "b": b}, weights={"a": 0.5, "b": 0.5}, epoch_samples=40,
                      replacement=True)
    with Pipeline(mixed, 8, fields=("latent", "label"), device="cpu", rank=0,
                  world_size=1) as pipe:
        for batch in run(pipe):
            for latent, source, index in zip(batch["latent"], batch["source"], batch["index"],
                                             strict=True):
                local = int(index) - (30 if source else 0)
                assert np.array_equal(latent.numpy(), latent_of(local))


def test_latents_from_two_zarr_stores_mix(tmp_path):
    pytest.importorskip("zarr")
    from tests.readers._zarr_stores import latents_values, open_latents, write_store

    values = [latents_values(12, 3, seed=0), latents_values(6, 2, seed=1)]
    stores = [open_latents(write_store(tmp_path / f"{n}.zarr", v))
              for n, v in zip("ab", values, strict=True)]
    mixed = chute.mix({"a": stores[0], "b": stores[1]}, weights={"a": 0.5, "b": 0.5})
    with Pipeline(mixed, 4, fields=("base_frames",), device="cpu", rank=0,
                  world_size=1) as pipe:
        batches = run(pipe)
    assert len(batches) == 12 // 4  # min(12 / 0.5, 6 / 0.5) = 12 samples
    for batch in batches:
        for frames, source, index in zip(batch["base_frames"], batch["source"],
                                         batch["index"], strict=True):
            local = int(index) - (12 if source else 0)
            assert np.array_equal(frames.numpy(), values[int(source)]["base_frames"][local])


def test_a_mix_reopens_in_dali_workers_as_the_same_mix(paths):
    """The DALI backends reopen their source by reference in worker processes: a mix names
    itself by its sources' references (MixRef) and DALI (CPU mode) delivers what cpu does."""
    pytest.importorskip("nvidia.dali")
    mixed = chute.mix({"a": paths[0], "b": paths[1]}, weights={"a": 0.7, "b": 0.3})
    ref = mixed.ref()
    assert ref.open().fingerprint == mixed.fingerprint
    kw = {"device": "cpu", "rank": 0, "world_size": 1, "seed": 5, "augment": "eval"}
    got = {}
    for backend in ("cpu", "dali-native"):
        image = ImageOptions(size=16, backend=backend, dtype="float32")
        with Pipeline(mixed, 8, fields={"image": image, "label": None}, **kw) as pipe:
            got[backend] = run(pipe, 4)
    for cpu, dali in zip(got["cpu"], got["dali-native"], strict=True):
        for key in ("index", "source", "label"):
            assert torch.equal(cpu[key], dali[key])
        assert (cpu["image"] - dali["image"]).abs().mean() < 0.05  # two JPEG decoders


def test_a_changed_source_is_refused_when_a_mix_reopens(paths, tmp_path):
    import shutil

    copy = shutil.copytree(paths[1], tmp_path / "b.chute")
    mixed = chute.mix({"a": paths[0], "b": copy})
    ref = mixed.ref()
    write_dataset(tmp_path / "b2.chute", n=NB, sizes=(40, 60), label=lambda i: i, meta=False)
    shutil.rmtree(copy)
    shutil.copytree(tmp_path / "b2.chute", copy)
    with pytest.raises(chute.errors.FormatError, match="changed"):
        ref.open()


def test_a_video_dataset_and_an_image_dataset_are_refused_in_one_true_sentence(paths, tmp_path):
    """Issue 38 item 10: mixing a converted video dataset with an image dataset suggested
    optional=["image"], then said the video dataset "lacks num_frames ... convert it with
    `chute convert video`" though it came from there. Both errors now say why: a source of
    the mix lacks the column, and modalities cannot be mixed."""
    pytest.importorskip("av")
    import csv

    from chute import VideoOptions
    from chute.convert._convert_video import convert_video_csv
    from tests._video_media import make_video

    rows = [["path", "text"]]
    for k in range(2):
        (tmp_path / f"v{k}.mp4").write_bytes(make_video(8, 32, 48))
        rows.append([f"v{k}.mp4", f"clip {k}"])
    with open(tmp_path / "videos.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    convert_video_csv(tmp_path / "videos.csv", tmp_path / "videos.chute", progress=False)
    sources = {"images": paths[0], "videos": tmp_path / "videos.chute"}
    with pytest.raises(ValueError, match="decoded as image.*cannot be mixed"):
        chute.mix(sources, optional=["image"])  # before: a KeyError mid-epoch
    with pytest.raises(ValueError, match="decoded as video.*cannot be mixed"):
        chute.mix(sources, optional=["video"])
    for fields in ({"video": VideoOptions(num_frames=4, size=16)},
                   {"image": ImageOptions(size=16)}):
        with pytest.raises(ValueError) as err:
            Pipeline(chute.mix(sources), 2, fields=fields, device="cpu")
        message = str(err.value)
        assert "missing from source(s)" in message and "\n" not in message, message
        assert "cannot be mixed" in message and "optional=[" not in message, message
        assert "chute convert" not in message, message
