"""Video clips through the Pipeline: shapes, the frames each clip takes, determinism, resume
and substitution of a corrupt video."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch

pytest.importorskip("av")

from chute.pipelines import Buckets, Pipeline, VideoOptions  # noqa: E402
from chute.pipelines.producers.video._clips import ClipParams, clip_indices  # noqa: E402
from chute.readers import open_dataset  # noqa: E402
from tests._video_media import convert_videos, level, make_video  # noqa: E402

FRAMES = [30, 12, 45, 20, 8, 33, 27]  # video k has FRAMES[k] frames; video 4 is shorter
OPTS = VideoOptions(num_frames=4, frame_interval=2, size=None)


def write_videos(folder, frames=FRAMES, corrupt=()):
    return convert_videos(folder, [(f"v{k}.mp4", make_video(n=n, height=32, width=48, gop=6))
                                   for k, n in enumerate(frames)], corrupt)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return write_videos(tmp_path_factory.mktemp("vid"))


def _epoch(pipe):
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            for b in pipe]


def _frame_levels(clip: torch.Tensor) -> list[float]:
    # [3, T, H, W] uint8: the green channel of the bottom-right pixel encodes the frame number
    return [float(clip[1, t, -1, -1]) for t in range(clip.shape[1])]


def test_eval_clips_are_centred_and_take_every_interval_frame(videos):
    with Pipeline(videos, 3, augment="eval", device="cpu",
                  fields={"video": OPTS, "num_frames": None}) as pipe:
        batches = _epoch(pipe)
    seen = []
    for batch in batches:
        assert batch["video"].shape[1:] == (3, 4, 32, 48) and batch["video"].dtype == torch.uint8
        for k, i in enumerate(batch["index"].tolist()):
            n = FRAMES[i]
            start = max(n - 7, 0) // 2
            want = [level(int(f)) for f in clip_indices(start, 4, 2, n)]
            assert np.allclose(_frame_levels(batch["video"][k]), want, atol=3), i
            seen.append(i)
    assert sorted(seen) == list(range(len(FRAMES)))


def test_train_clips_are_a_pure_function_of_seed_epoch_and_id(videos):
    def run(seed, epoch):
        with Pipeline(videos, 2, augment="train", device="cpu", seed=seed,
                      fields={"video": OPTS}) as pipe:
            pipe.set_epoch(epoch)
            return {int(i): v for b in _epoch(pipe)
                    for i, v in zip(b["index"].tolist(), b["video"], strict=True)}

    a, b, c = run(1, 0), run(1, 0), run(1, 1)
    assert a.keys() == b.keys() and all(torch.equal(a[i], b[i]) for i in a)
    starts = ClipParams(4, 2, "train", np.array(FRAMES))(1, 0, np.arange(len(FRAMES)))
    for i, clip in a.items():
        want = [level(int(f)) for f in clip_indices(int(starts["clip_start"][i]), 4, 2,
                                                     FRAMES[i])]
        assert np.allclose(_frame_levels(clip), want, atol=3)
    assert any(not torch.equal(a[i], c[i]) for i in a.keys() & c.keys())


def test_ar_is_the_stored_ratio_without_buckets(videos):
    with Pipeline(videos, 3, augment="eval", device="cpu",
                  fields={"video": dataclasses.replace(OPTS, size=(16, 16)),
                          "height": None}) as pipe:
        batch = next(iter(pipe))
    assert batch["ar"].dtype == torch.float32 and batch["ar"].shape == (3,)
    assert torch.allclose(batch["ar"], torch.full((3,), 32 / 48))  # stored 32x48, not 16x16


def test_resized_float_clips_in_minus_one_to_one(videos):
    opts = dataclasses.replace(OPTS, size=(16, 16), dtype="float32", layout="TCHW")
    with Pipeline(videos, 4, augment="eval", device="cpu", fields={"video": opts}) as pipe:
        batch = next(iter(pipe))
    assert batch["video"].shape == (4, 4, 3, 16, 16) and batch["video"].dtype == torch.float32
    assert -1.0 <= batch["video"].min() and batch["video"].max() <= 1.0


def test_a_corrupt_video_is_substituted_whole(tmp_path):
    path = write_videos(tmp_path, frames=[20, 20, 20, 20], corrupt=(2,))
    with pytest.warns(RuntimeWarning, match="sample 2 "):
        with Pipeline(path, 4, augment="eval", device="cpu",
                      fields={"video": OPTS, "num_frames": None}) as pipe:
            batch = next(iter(pipe))
            assert pipe.stats.decode_errors == 1
    assert 2 not in batch["index"].tolist()


def test_a_size_column_that_disagrees_with_the_stream_fails_its_sample(tmp_path):
    # size=None keeps stored sizes: a corrupt height column must not resize the clip to it
    from chute.errors import FormatError

    path = write_videos(tmp_path, frames=[20, 20, 20])
    column = next(path.rglob("height.npy"))
    heights = np.load(column)
    heights[1] = 33
    np.save(column, heights)
    with pytest.warns(RuntimeWarning, match="sample 1 "):
        with Pipeline(path, 1, augment="eval", device="cpu", fields={"video": OPTS}) as pipe:
            delivered = [int(i) for b in pipe for i in b["index"]]
            assert pipe.stats.decode_errors == 1
    # eval leaves it out (never resized to 33 rows)
    assert sorted(delivered) == [0, 2] and pipe.stats.skipped == [1]
    with pytest.raises(FormatError, match="mixes"):  # one batch, two stored sizes
        list(Pipeline(path, 3, augment="eval", device="cpu", fields={"video": OPTS}))


def test_missing_columns_and_bad_options_are_explained(videos, tmp_path):
    # the round-2 field_options= keyword's own checks (raised before its DeprecationWarning);
    # they go away with that keyword
    with pytest.raises(ValueError, match="no_such"):
        Pipeline(videos, 2, device="cpu", fields=("video",),
                 field_options={"video": {"no_such": 1}})
    with pytest.raises(ValueError, match="not requested"):
        Pipeline(videos, 2, device="cpu", fields=("num_frames",),
                 field_options={"video": {"num_frames": 4, "frame_interval": 2, "size": None}})


@pytest.mark.parametrize("size", ["64x48", (64, 48, 3), (0, 64), "big"])
def test_a_size_that_is_not_h_w_or_an_int_is_one_line(videos, size):
    # "64x48" (as ImageOptions takes it) raised int()'s own "invalid literal" error
    with pytest.raises(ValueError, match=r"video option size must be \(H, W\) >= 1 or an int"):
        Pipeline(videos, 2, device="cpu", fields={"video": VideoOptions(size=size)})


def test_reference_decode_matches_at_native_size(videos):
    import av

    ds = open_dataset(videos)
    with Pipeline(videos, 1, augment="eval", device="cpu", fields={"video": OPTS}) as pipe:
        for batch in pipe:
            i = int(batch["index"][0])
            with av.open(io.BytesIO(ds[i]["video"].tobytes())) as c:
                frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
            n = FRAMES[i]
            want = np.stack([frames[f] for f in clip_indices(max(n - 7, 0) // 2, 4, 2, n)])
            got = batch["video"][0].permute(1, 2, 3, 0).numpy()
            assert np.abs(got.astype(int) - want.astype(int)).mean() <= 2


def test_bucketed_batches_match_their_bucket_on_both_ranks_and_resume(videos):
    config = {"16x16": {2: (1.0, 2)}, "32x32": {4: (1.0, 1)}}
    opts = VideoOptions(frame_interval=2, dtype="uint8")

    def pipes(**kw):
        return [Pipeline(videos, None, batching=Buckets(config), fields={"video": opts},
                         device="cpu", rank=r, world_size=2, seed=5, **kw)
                for r in range(2)]

    ranks = pipes()
    assert len(ranks[0]) == len(ranks[1]) > 2
    table = ranks[0].batching.table
    steps = [[{k: v.clone() for k, v in b.items()} for b in p] for p in ranks]
    for a, b in zip(*steps, strict=True):
        assert a["video"].shape[1:] == b["video"].shape[1:]  # one bucket per step
        assert set(a["index"].tolist()).isdisjoint(b["index"].tolist())
        t, h, w = a["video"].shape[2:]
        assert any((bk.num_frames, *bk.size) == (t, h, w) for bk in table.buckets)
        for batch in (a, b):  # ar: H / W of the delivered clips
            assert torch.equal(batch["ar"], torch.full((len(batch["index"]),), h / w))
    resumed = pipes()
    for p, q in zip(ranks, resumed, strict=True):
        q.load_state_dict({**p.state_dict(), "epoch": 0, "position": 0})
    k = 2
    state = None
    for p in resumed:
        it = iter(p)
        for _ in range(k):
            next(it)
        state = p.state_dict()
    again = pipes()
    for r, p in enumerate(again):
        p.load_state_dict(state)
        rest = [b["index"].tolist() for b in p]
        assert rest == [s["index"].tolist() for s in steps[r][k:]]


def test_a_substitute_at_stored_size_is_delivered_at_its_own_size(tmp_path):
    # size=None keeps each video's size; a smaller substitute for a failed larger video was
    # zero-padded into the failed video's shape, its frames in a corner of black.
    from tests._video_media import full_decode

    small = make_video(n=12, height=32, width=48)
    ds = convert_videos(tmp_path, [("small.mp4", small),
                                   ("big.mp4", make_video(n=12, height=64, width=96))],
                        corrupt=(1,))
    # train substitutes (eval leaves a failed sample out); its clip starts anywhere
    with pytest.warns(RuntimeWarning, match="replaced by sample 0"), \
            Pipeline(ds, 1, augment="train", device="cpu",
                     fields={"video": dataclasses.replace(OPTS, layout="TCHW")}) as pipe:
        batches = _epoch(pipe)
    reference = full_decode(small)
    assert len(batches) == 2
    for batch in batches:
        assert int(batch["index"][0]) == 0
        clip = batch["video"][0].permute(0, 2, 3, 1).numpy()
        assert clip.shape == (4, 32, 48, 3)
        assert any(all(np.array_equal(clip[k], reference[i])
                       for k, i in enumerate(clip_indices(start, 4, 2, 12)))
                   for start in range(12 - 6))


def _asp_and_other_codecs():
    # (name, bytes): MPEG-4 ASP AVIs as Xvid/DivX write them (packed B-frames too) and the other
    # codecs and containers real datasets ship, of lengths that put the clips at other frames
    from tests._video_media import make_asp_avi

    return [("asp.avi", make_asp_avi(70, 48, 64, gop=12)),
            ("packed.avi", make_asp_avi(64, 48, 64, gop=12, packed=True)),
            ("packed3.avi", make_asp_avi(83, 48, 64, gop=12, bframes=3, packed=True)),
            ("h264.mp4", make_video(50, 48, 64, gop=12, bframes=2, natural=True)),
            ("h264.mkv", make_video(41, 48, 64, container="matroska", gop=12, bframes=3,
                                    natural=True)),
            ("h264.avi", make_video(57, 48, 64, container="avi", gop=12, bframes=2,
                                    natural=True)),
            ("mpeg4.mp4", make_video(45, 48, 64, codec="mpeg4", gop=12, bframes=2,
                                     natural=True)),
            ("mjpeg.avi", make_video(30, 48, 64, codec="mjpeg", container="avi",
                                     natural=True))]


@pytest.mark.parametrize("augment", ["eval", "train"])
def test_16_frame_clips_of_each_codec_equal_a_full_decode(tmp_path, augment):
    # A packed MPEG-4 ASP AVI's eval clips failed ("its clip does not decode") or took other
    # frames; on_error="raise": a clip that does not decode fails the test.
    from tests._video_media import full_decode

    videos = _asp_and_other_codecs()
    ds = convert_videos(tmp_path, videos, shard_size="1MB")
    reference = [full_decode(data) for _, data in videos]
    opts = VideoOptions(num_frames=16, size=None, layout="TCHW")
    seen = []
    for epoch in range(1 if augment == "eval" else 3):
        with Pipeline(ds, 1, augment=augment, device="cpu", on_error="raise", seed=3,
                      fields={"video": opts}) as pipe:
            pipe.set_epoch(epoch)
            starts = ClipParams(16, 1, augment, open_dataset(ds).column("num_frames"))(
                3, epoch, np.arange(len(videos)))["clip_start"]
            for batch in pipe:
                i = int(batch["index"][0])
                frames = reference[i]
                clip = batch["video"][0].permute(0, 2, 3, 1).numpy()
                for k, f in enumerate(clip_indices(int(starts[i]), 16, 1, len(frames))):
                    np.testing.assert_array_equal(clip[k], frames[f],
                                                  err_msg=f"{videos[i][0]} frame {f}")
                seen.append(i)
    assert sorted(set(seen)) == list(range(len(videos)))


def test_conditioning_values_are_the_delivered_clips(videos, tmp_path):
    # Open-Sora conditions on the delivered clip's num_frames, height, width and
    # fps / frame_interval; the stored columns are the file's (30 frames, 32x48, 25 fps).
    opts = dataclasses.replace(OPTS, size=(16, 24))
    with Pipeline(videos, 7, augment="eval", device="cpu", fields={"video": opts}) as pipe:
        batch = next(iter(pipe))
    assert batch["clip_num_frames"].tolist() == [4] * 7
    assert batch["clip_height"].tolist() == [16] * 7 and batch["clip_width"].tolist() == [24] * 7
    assert torch.allclose(batch["clip_fps"], torch.full((7,), 25 / 2))
    # a clip spans 7 frames: video 4 (8 frames) holds it whole, no video is shorter
    assert batch["clip_valid_frames"].tolist() == [4] * 7
    short = write_videos(tmp_path, frames=[3, 5, 30])
    with Pipeline(short, 3, augment="eval", device="cpu", fields={"video": opts}) as pipe:
        batch = next(iter(pipe))
    valid = dict(zip(batch["index"].tolist(), batch["clip_valid_frames"].tolist(), strict=True))
    assert valid == {0: 2, 1: 3, 2: 4}  # frames 0, 2 of 3; 0, 2, 4 of 5; all of 30


def test_bucket_slots_hold_the_largest_bucket_batch_not_the_largest_of_each(videos,
                                                                             monkeypatch):
    # 4 one-frame 16x16 clips or 1 sixteen-frame 32x48 clip: a slot needs 3 x 24576 bytes,
    # not 4 x 3 x 16 x 32 x 48 (the largest batch size with the largest clip); 4 slots of the
    # latter do not fit in 1 MB
    monkeypatch.setattr("chute.pipelines._common._options._physical_memory", lambda: 1_000_000)
    config = {"32x48": {16: {"3:2": (1.0, 1)}, 1: {"3:2": (1.0, 4)}}, "16x16": {1: (1.0, 4)}}
    with Pipeline(videos, None, batching=Buckets(config), device="cpu", seed=3,
                  fields={"video": VideoOptions(frame_interval=2)}) as pipe:
        shapes = {tuple(b["video"].shape) for b in pipe}
    assert (1, 3, 16, 32, 48) in shapes and (4, 3, 1, 32, 48) in shapes


def test_conditioning_under_buckets_is_the_buckets(videos):
    config = {"16x16": {2: (1.0, 2)}, "32x32": {4: (1.0, 1)}}
    with Pipeline(videos, None, batching=Buckets(config), device="cpu",
                  fields={"video": VideoOptions(frame_interval=2)}) as pipe:
        for batch in pipe:
            t, h, w = batch["video"].shape[2:]
            n = len(batch["index"])
            assert batch["clip_num_frames"].tolist() == [t] * n
            assert batch["clip_height"].tolist() == [h] * n
            assert batch["clip_width"].tolist() == [w] * n


def test_samples_in_no_bucket_are_counted_and_warned_about(videos):
    config = {"32x48": {16: (1.0, 1)}}  # span 31 at interval 2: only 45 and 33 frames fit
    with pytest.warns(RuntimeWarning, match="leaves 5 of 7 samples"):
        pipe = Pipeline(videos, None, batching=Buckets(config), device="cpu", seed=11,
                        fields={"video": VideoOptions(frame_interval=2)})
    with pipe:
        delivered = sorted(int(i) for b in pipe for i in b["index"])
        summary = pipe.batching.summary(pipe.dataset, seed=11)
    assert delivered == [2, 5]
    assert sum(summary["buckets"].values()) == 2
    assert list(summary["excluded"].values()) == [5]
    assert summary["examples"] == {next(iter(summary["excluded"])): [0, 1, 3]}


def test_no_sample_in_any_bucket_names_the_buckets(videos):
    # was "batch_size=1 on 1 rank(s) gives no full batch", naming no bucket
    with pytest.raises(ValueError, match="no sample fits any bucket.*smaller than every"):
        Pipeline(videos, None, batching=Buckets({240: {4: (1.0, 1)}}), device="cpu",
                 fields={"video": VideoOptions(frame_interval=2)})
    with pytest.raises(ValueError, match=r"too few for one batch.*'32x48/4f"):
        Pipeline(videos, None, batching=Buckets({"32x48": {4: {"3:2": (1.0, 8)}}}),
                 device="cpu", fields={"video": VideoOptions(frame_interval=2)})


def test_uniform_sampling_spreads_the_clip_over_the_whole_video(videos):
    opts = dataclasses.replace(OPTS, sampling="uniform")
    with Pipeline(videos, 7, augment="eval", device="cpu", fields={"video": opts}) as pipe:
        batch = next(iter(pipe))
    for k, i in enumerate(batch["index"].tolist()):
        n = FRAMES[i]
        want = [level(int(np.floor((j + 0.5) * n / 4))) for j in range(4)]  # segment middles
        assert np.allclose(_frame_levels(batch["video"][k]), want, atol=3), i
        assert float(batch["clip_fps"][k]) == pytest.approx(25 * 4 / n)

    def train(epoch):
        with Pipeline(videos, 7, augment="train", device="cpu", seed=2,
                      fields={"video": opts}) as pipe:
            pipe.set_epoch(epoch)
            return {int(i): _frame_levels(v) for b in pipe
                    for i, v in zip(b["index"].tolist(), b["video"], strict=True)}

    a, b = train(0), train(1)
    assert a == train(0) and a != b  # keyed by (seed, epoch, id)
    for levels in a.values():  # 4 frames, one per quarter of the video
        assert len(set(levels)) == 4


def test_short_error_refuses_videos_shorter_than_the_clip(videos):
    from chute.errors import FormatError

    with pytest.raises(FormatError, match="1 videos have fewer frames than a clip's span of 9 "
                                          r"\(first: sample 4, 8 frames\)"):
        Pipeline(videos, 2, device="cpu",
                 fields={"video": VideoOptions(num_frames=5, frame_interval=2, size=None,
                                               short="error")})
    with Pipeline(videos, 7, device="cpu", augment="eval",  # span 7: every video holds it
                  fields={"video": dataclasses.replace(OPTS, short="error")}) as pipe:
        assert next(iter(pipe))["clip_valid_frames"].tolist() == [4] * 7


def test_the_caption_column_is_a_list_of_str(videos):
    with Pipeline(videos, 3, augment="eval", device="cpu",
                  fields={"video": OPTS, "text": None}) as pipe:
        batch = next(iter(pipe))
    assert batch["text"] == [f"clip {i}" for i in batch["index"].tolist()]
