"""Silent traps of the Pipeline (each fails on the code before its fix): epochs that end early,
states that resume into nothing, units, empty passes, kept batches, misuse from threads."""

import dataclasses
import threading

import numpy as np
import pytest
import torch

from chute.pipelines import CropParams, ImageOptions, Pipeline
from tests._datasets import write_samples
from tests.pipelines._pipeline_data import write_dataset

N = 30


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("traps") / "ds.chute", n=N)


@pytest.fixture(scope="module")
def other_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("other") / "other.chute", n=N, seed=1)


pytestmark = pytest.mark.usefixtures("ids_backend")


_IMAGE_OPTIONS = {f.name for f in dataclasses.fields(ImageOptions)}


def make(path, batch_size=4, fields=("image", "label"), **kw):
    """A Pipeline of `fields`; ImageOptions keywords (size=, dtype=, crop=, ...) given here go
    to the image field's options (default: the test-ids backend, float32, size 8)."""
    image = {"backend": "test-ids", "dtype": "float32", "size": 8,
             **{k: kw.pop(k) for k in list(kw) if k in _IMAGE_OPTIONS}}
    kw = {"device": "cpu", "rank": 0, "world_size": 1, **kw}
    return Pipeline(path, batch_size, fields={f: ImageOptions(**image) if f == "image" else None
                                              for f in fields}, **kw)


def test_stopping_after_len_batches_loses_no_epoch(dataset_path):
    # Lightning's pattern: take len(pipe) batches, then iter() again for the next epoch
    with make(dataset_path) as pipe:
        counts, orders = [], []
        for _ in range(4):
            ids = [b["index"].clone() for _, b in zip(range(len(pipe)), pipe, strict=False)]
            counts.append(len(ids))
            orders.append(torch.cat(ids).tolist())
        assert counts == [N // 4] * 4
        assert pipe.epoch == 3
        assert len({tuple(o) for o in orders}) == 4  # four different epochs, none repeated


def test_set_epoch_after_a_finished_epoch_runs_that_epoch(dataset_path):
    with make(dataset_path) as pipe:
        pipe.set_epoch(0)
        first = [b["index"].clone() for _, b in zip(range(len(pipe)), pipe, strict=False)]
        pipe.set_epoch(0)
        again = [b["index"].clone() for b in pipe]
    assert torch.equal(torch.cat(first), torch.cat(again))


def test_an_end_of_epoch_state_resumes_with_the_next_epoch(dataset_path):
    with make(dataset_path) as pipe:
        list(zip(range(len(pipe)), pipe, strict=False))
        state = pipe.state_dict()
        expected = [b["index"].clone() for b in pipe]  # epoch 1
    assert (state["epoch"], state["position"]) == (1, 0)
    for saved in (state, {"seed": 0, "epoch": 0, "position": N}):  # also the old N form
        with make(dataset_path) as pipe:
            pipe.load_state_dict(saved)
            pipe.set_epoch(1)  # the resume recipe: restart the loop at state["epoch"]
            got = [b["index"].clone() for b in pipe]
        assert len(got) == N // 4 and torch.equal(torch.cat(got), torch.cat(expected))


def test_bad_states_are_refused_clearly(dataset_path, other_path):
    with make(other_path) as other:
        foreign = other.state_dict()
    with make(dataset_path) as pipe:
        for bad in (None, {}, {"seed": 0}, {"seed": 0, "epoch": "x", "position": 0}):
            with pytest.raises(ValueError, match="load_state_dict"):
                pipe.load_state_dict(bad)
        with pytest.raises(ValueError, match="another dataset"):
            pipe.load_state_dict(foreign)
        pipe.load_state_dict({"seed": 0, "epoch": 2, "position": 8})  # saved before fingerprints
        assert pipe.state_dict()["position"] == 8


def test_empty_dataset_and_oversized_batches_raise(tmp_path, dataset_path):
    empty = write_samples(tmp_path / "empty.chute", {"label": "int64"}, [])
    with pytest.raises(ValueError, match="no samples"):
        make(empty, fields=("label",))
    with pytest.raises(ValueError, match="no full batch"):
        make(dataset_path, batch_size=N + 1)
    with pytest.raises(ValueError, match="no full batch"):
        make(dataset_path, batch_size=8, rank=1, world_size=4)
    with make(dataset_path, batch_size=N + 1, augment="eval") as pipe:  # eval keeps the tail
        assert len(list(pipe)) == 1


def test_kept_batches_are_overwritten_unless_copied(dataset_path):
    assert "clone()" in Pipeline.__doc__.split("\n\n")[1]  # said at the top of the docstring
    with make(dataset_path, augment="eval") as pipe:
        shared = [b["index"] for b in pipe]
    assert len({tuple(t.tolist()) for t in shared}) < len(shared)  # the trap itself
    with make(dataset_path, augment="eval", copy=True) as pipe:
        kept = list(pipe)
    ids = torch.cat([b["index"] for b in kept])
    assert sorted(ids.tolist()) == list(range(N))
    for b in kept:
        assert torch.equal(b["image"].amax(dim=(1, 2, 3)), b["index"].float())


def test_mean_std_in_0_255_units_are_recognised(dataset_path):
    with make(dataset_path, mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375)) as p:
        np.testing.assert_allclose(p.backend.spec.mean, (0.485, 0.456, 0.406))
        np.testing.assert_allclose(p.backend.spec.std, (0.229, 0.224, 0.225))
    with pytest.raises(ValueError, match="mix units"):
        make(dataset_path, mean=(123.675, 116.28, 103.53), std=(0.229, 0.224, 0.225))


def test_thread_count_follows_torchrun(dataset_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    from chute.pipelines._common._distributed import default_threads

    assert default_threads()[0] == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert default_threads()[0] == 1


def test_default_threads_count_physical_cores_not_smt_siblings(monkeypatch, tmp_path):
    import chute.pipelines._common._distributed as distributed

    # 4 logical CPUs: two cores with two SMT siblings each
    for cpu, core in enumerate([0, 1, 0, 1]):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "core_id").write_text(f"{core}\n")
        (topology / "physical_package_id").write_text("0\n")
    monkeypatch.setattr(distributed, "_SYS_CPU", str(tmp_path))
    monkeypatch.setattr(distributed.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert distributed.default_threads() == (2, "2 physical cores (4 logical) / 1 local rank(s)")
    assert distributed.physical_cores([0, 2]) == 1  # siblings
    assert distributed.physical_cores([0, 7]) == 2  # cpu7 has no topology: counted as is


def test_a_second_thread_cannot_iterate_a_running_pipeline(dataset_path):
    with make(dataset_path, augment="eval") as pipe:
        it = iter(pipe)
        next(it)
        errors = []

        def other():
            try:
                next(iter(pipe))
            except RuntimeError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert errors and "already being iterated" in errors[0]
        rest = [b["index"].clone() for b in it]  # the first loop is untouched
        assert len(rest) == len(pipe) - 1


def test_close_inside_the_loop_ends_it_quietly(dataset_path):
    pipe = make(dataset_path)
    seen = 0
    for _ in pipe:
        seen += 1
        pipe.close()
    assert seen == 1


@pytest.mark.parametrize("text, flag", [("no", False), ("false", False), ("0", False),
                                         ("Off", False), (" FALSE ", False), ("yes", True),
                                         ("true", True), ("1", True), ("on", True)])
def test_string_flags_are_parsed_strictly(dataset_path, text, flag):
    with make(dataset_path, backend="cpu", backend_options={"dct_scaling": text,
                                                            "roi_decode": text}) as pipe:
        assert pipe.backend.dct_scaling is flag and pipe.backend.roi_decode is flag
        assert pipe.stats.backend_options["dct_scaling"] is flag


@pytest.mark.parametrize("value", ["maybe", "nein", "", 2, 0.5, [True]])
def test_unknown_flag_values_are_refused(dataset_path, value):
    with pytest.raises(ValueError, match="dct_scaling"):
        make(dataset_path, backend="cpu", backend_options={"dct_scaling": value})


def test_string_flags_and_huge_sizes_are_refused(dataset_path):
    with pytest.raises(TypeError, match="string"):
        make(dataset_path, backend_options={"threads": "no"})
    with pytest.raises(ValueError, match="GiB"):
        make(dataset_path, batch_size=20, size=200_000, augment="eval")


def test_a_seed_or_device_of_the_wrong_kind_is_one_line(dataset_path):
    # seed="a" raised int()'s "invalid literal"; device="tpu" torch's list of 20 device types
    with pytest.raises(TypeError, match="seed must be an integer, got 'a'"):
        make(dataset_path, seed="a")
    with pytest.raises(ValueError, match=r"device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'"):
        make(dataset_path, device="tpu")
    assert make(dataset_path, seed=np.int64(7)).seed == 7  # any integer type still works


@pytest.mark.parametrize("value", ["yes", "no", 1, None])
def test_shuffle_of_the_wrong_kind_is_refused(dataset_path, value):
    """Issue 38 item 12: shuffle="yes" (and "no", which bool() made True) were accepted; the
    round-3 spelling still refuses them, and order= takes only its own values."""
    with pytest.raises(TypeError, match=r"shuffle must be True, False or ShardWindows\(\.\.\.\), "
                                        f"got {value!r}"):
        make(dataset_path, shuffle=value)
    if value is not None:  # order=None is the default
        with pytest.raises(TypeError, match=r"order must be 'shuffle', 'sequential' or "
                                            rf"ShardWindows\(shards=k\), got {value!r}"):
            make(dataset_path, order=value)
    with pytest.warns(DeprecationWarning, match="write order='sequential'"):
        assert make(dataset_path, shuffle=np.bool_(False)).shuffle is False


def test_an_allocation_that_fails_says_how_much_memory_it_wanted(dataset_path, monkeypatch):
    # the machine's size unknown: the ring passes the early check, then cannot be allocated
    monkeypatch.setattr("chute.pipelines._common._options._physical_memory", lambda: None)
    with make(dataset_path, batch_size=4, size=400_000, augment="eval") as pipe:
        # (it named image_size, a round-2 keyword that warns now: the options' size= instead)
        with pytest.raises(ValueError, match=r"GiB.*lower batch_size, the fields' output size "
                                             r"\(ImageOptions or VideoOptions size=, the "
                                             r"Buckets\) or prefetch"):
            next(iter(pipe))


def test_output_options(dataset_path):
    from chute import CropConfig

    seen = []

    def transform(batch):
        seen.append(batch["image"].dtype)
        batch["image"] = batch["image"] + 1
        return batch

    with make(dataset_path, size="6x10", dtype="bfloat16", augment="eval",
              memory_format=torch.channels_last, transform=transform) as pipe:
        batch = next(iter(pipe))
        image = batch["image"]
        assert image.shape == (4, 3, 6, 10) and image.dtype == torch.bfloat16
        assert image.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(image.amax(dim=(1, 2, 3)), (batch["index"] + 1).to(torch.bfloat16))
    assert seen == [torch.bfloat16]
    crop = CropConfig(scale=(0.35, 1), ratio=(3 / 4, 4 / 3), flip_p=0.0)
    with make(dataset_path, crop=crop, size=(6, 10)) as pipe:
        (params,) = [s for s in pipe._assembly.params if isinstance(s, CropParams)]
        assert params.config.size == (6, 10) and params.config.scale == (0.35, 1)
        boxes = pipe.plan().request(0).params["boxes"]
        assert not pipe.plan().request(0).params["flips"].any()
        assert boxes.shape == (4, 4)
    with pytest.raises(ValueError, match="disagree"):
        make(dataset_path, crop=CropConfig(size=(6, 6)), size=8)


def _mapped(path):
    import os

    root = str(path)
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed meanwhile
            pass
    with open("/proc/self/maps") as f:
        maps = [line for line in f if root in line]
    return [fd for fd in fds if fd.startswith(root)], maps


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc")
def test_close_releases_files_and_maps_at_once(dataset_path):
    import gc

    gc.collect()
    gc.disable()  # prompt release, not garbage collection
    try:
        pipe = make(dataset_path, fields=("image", "label", "meta"))
        for _ in pipe:
            break
        assert _mapped(dataset_path) != ([], [])
        pipe.close()
        assert _mapped(dataset_path) == ([], [])
        assert pipe.dataset[3]["label"] == 1003  # a later read maps the files again
    finally:
        gc.enable()


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc")
def test_close_releases_files_and_maps_while_an_iterator_is_open(tmp_path, dataset_path):
    """A loop left unfinished (its generator still alive) must not keep the shards mapped."""
    import gc

    latents = write_dataset(tmp_path / "latents.chute", n=12, latent_shape=(2, 3),
                            images=False)
    gc.collect()
    gc.disable()
    try:
        for path, fields in ((dataset_path, ("image", "label", "meta")),
                             (latents, ("latent", "label"))):
            pipe = make(path, fields=fields)
            it = iter(pipe)
            next(it)
            assert _mapped(path) != ([], [])
            pipe.close()
            assert _mapped(path) == ([], []), path
            assert next(it, None) is None  # the closed loop ends quietly
    finally:
        gc.enable()


def test_an_iterator_stopped_by_a_newer_pass_says_so(dataset_path):
    with make(dataset_path) as pipe:
        old = iter(pipe)
        next(old)
        pipe.set_epoch(3)
        with pytest.raises(RuntimeError, match="stopped by a newer pass"):
            next(old)
        assert len(list(pipe)) == len(pipe)  # the new pass is whole


def test_auto_is_asked_for_the_dtype_the_user_named(dataset_path, monkeypatch):
    from chute.pipelines.producers.image import _auto

    asked = []

    def resolver(**request):
        asked.append(request)
        return "test-ids", {}, "test"

    monkeypatch.setattr(_auto, "decide", resolver)
    with make(dataset_path, backend="auto", dtype=torch.bfloat16):
        pass
    assert asked[0]["dtype"] == "bfloat16" and asked[0]["image_size"] == (8, 8)


def test_an_object_that_is_not_a_dataset_is_refused_in_one_line(dataset_path):
    """Optional dataset capabilities are read as attributes: an object lacking them must be
    refused when the Pipeline is built, not fail with an AttributeError mid-epoch."""
    from chute.readers import open_dataset

    class Foreign:  # the required members of a dataset, none of the optional ones
        def __init__(self, inner):
            self._inner = inner
            self.path, self.fingerprint = inner.path, inner.fingerprint
            self.fields, self.specs = inner.fields, inner.specs

        def __len__(self):
            return len(self._inner)

    ds = open_dataset(dataset_path)
    with pytest.raises(TypeError) as err:
        Pipeline(Foreign(ds), batch_size=4, fields=["image"])
    ds.close()
    assert "not a chute dataset" in str(err.value) and "DatasetProtocol" in str(err.value)
    assert "\n" not in str(err.value)


def test_close_during_an_epoch_keeps_its_position(dataset_path):
    """A loop that closes the Pipeline mid-epoch (a preemption handler) and then saves the
    state resumes where it stopped: close() used to leave the epoch marked finished."""
    pipe = make(dataset_path, 4, fields=("label",))
    for k, _ in enumerate(pipe):
        if k == 2:
            pipe.close()
    state = pipe.state_dict()
    assert (state["epoch"], state["position"]) == (0, 12)


def test_a_failure_after_the_producers_are_built_closes_them(dataset_path, monkeypatch):
    from chute.pipelines.producers.stored import _scalar

    closed = []
    monkeypatch.setattr(_scalar.ScalarProducer, "param_sources",
                        lambda self: (_ for _ in ()).throw(RuntimeError("boom")))
    monkeypatch.setattr(_scalar.ScalarProducer, "close", lambda self: closed.append(self.field))
    with pytest.raises(RuntimeError, match="boom"):
        make(dataset_path, 4, fields=("label",))
    assert closed == ["label"]
