"""How a Pipeline is left: a script that stops after a few batches without close() exits
promptly and silently (docs/design.md, "Processes and threads"); a pass abandoned part-way is
taken again from its start by the next iter() (docs/design.md, "Epoch boundaries and
iteration"); misuses get a message saying what to do."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from chute import ImageOptions, Pipeline
from tests.pipelines._pipeline_data import write_dataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("img") / "ds", n=48, sizes=(40, 72))


_LEAVE_OPEN = textwrap.dedent("""
    import sys
    from chute import ImageOptions, Pipeline
    pipe = Pipeline(sys.argv[1], 16, fields={"image": ImageOptions(size=224, backend="cpu")},
                    device="cpu", prefetch=2)
    it = iter(pipe)
    for _ in range(3):
        next(it)
    # exits here: no close(), the prefetch thread still decoding ahead
""")


@pytest.mark.slow
def test_a_script_that_never_closes_its_pipeline_exits_promptly_and_silently(tmp_path):
    # photo-sized images: at exit the prefetch thread is inside a decode (it hung 8 of 8 runs
    # before the atexit close)
    big = write_dataset(tmp_path / "big", n=64, sizes=(400, 700), shard_size="1MiB")

    def run(timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _LEAVE_OPEN, str(big)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)

    first = run(600)  # may compile the CPU decoder once (cached for the runs below)
    assert first.returncode == 0, first.stderr
    for _ in range(8):
        done = run(20)  # a hang raises TimeoutExpired
        assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize("augment", ["eval", "train"])
def test_an_abandoned_pass_is_taken_again_from_its_start(images, augment):
    options = {"image": ImageOptions(size=16, backend="cpu"), "label": None}
    with Pipeline(images, 5, fields=options, device="cpu", augment=augment, seed=2) as pipe:
        whole = [i for b in pipe for i in b["index"].tolist()]
        pipe.set_epoch(0)
        it = iter(pipe)
        sanity = [next(it)["index"].tolist() for _ in range(2)]  # Lightning's sanity check
        del it
        again = [i for b in pipe for i in b["index"].tolist()]
        assert again == whole and sanity[0] == whole[:5]
        if augment == "eval":
            assert sorted(again) == list(range(48))  # eval never loses a sample
        # an iterator dropped while still referenced is abandoned too
        pipe.set_epoch(1)
        kept = iter(pipe)
        next(kept)
        epoch1 = [i for b in pipe for i in b["index"].tolist()]
        assert len(epoch1) == len(whole) and pipe.state_dict()["epoch"] == 2


def test_a_loaded_state_is_not_undone_by_the_restart(images):
    options = {"image": ImageOptions(size=16, backend="cpu")}
    with Pipeline(images, 4, fields=options, device="cpu", seed=2) as pipe:
        it = iter(pipe)
        head = [next(it)["index"].tolist() for _ in range(3)]
        state = pipe.state_dict()
        whole = [i for b in Pipeline(images, 4, fields=options, device="cpu", seed=2)
                 for i in b["index"].tolist()]
        pipe.load_state_dict(state)  # resume: continue after the 3 batches, not from 0
        rest = [i for b in pipe for i in b["index"].tolist()]
    assert sum(head, []) + rest == whole


def test_misuses_say_what_to_do(images):
    with pytest.raises(TypeError, match=r"got a list of 2; mix datasets with chute\.mix\("):
        Pipeline([images, images], 8)
    with pytest.raises(TypeError, match=r"num_workers.*threads"):
        Pipeline(images, 8, fields=("label",), num_workers=4)
    with Pipeline(images, 4, fields=("label",), transform=lambda b: None) as pipe, \
            pytest.raises(TypeError, match="returned NoneType, not the batch dict"):
        next(iter(pipe))
    with Pipeline(images, 4, fields=("label",)) as pipe:
        with pytest.raises(TypeError, match=r"pass pipe.as_dataloader\(\)"):
            next(iter(torch.utils.data.DataLoader(pipe)))
        assert len(list(pipe.as_dataloader())) == len(pipe)
