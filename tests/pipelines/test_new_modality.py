"""The success test of the modality-free core (docs/design.md, "Fields, families and
batching"): a new modality -- a folder with its options, family and producer
(tests/pipelines/_text_family/) plus one FAMILIES and one PRODUCERS entry -- is delivered by the
Pipeline with every guarantee (order, DDP partition, resume, substitution, batching), with no
change to the Pipeline, its run loop or sampling."""

from __future__ import annotations

import pytest

import chute.pipelines.producers._registry as registry
from chute import Pipeline
from tests._datasets import write_samples
from tests.pipelines._text_family._options import TextOptions

TEXTS = [f"sample number {i}" if i != 7 else "x" * 40 for i in range(20)]  # 7 is too long


@pytest.fixture
def text_dataset(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.FAMILIES, "text", "tests.pipelines._text_family._family")
    monkeypatch.setitem(registry.PRODUCERS, "test-text", "tests.pipelines._text_family._producer")
    fields = {"caption": {"kind": "bytes", "media": "text"}, "label": "int64"}
    samples = ({"caption": t.encode(), "label": i} for i, t in enumerate(TEXTS))
    return write_samples(tmp_path / "text.chute", fields, samples, shard_size="200B")


def _decode(batch, k: int) -> str:
    n = int(batch["caption_lengths"][k])
    return bytes(batch["caption"][k, :n].tolist()).decode()


def test_a_new_modality_is_delivered_with_its_options(text_dataset):
    with Pipeline(text_dataset, 4, fields={"caption": TextOptions(max_len=20, upper=True),
                                           "label": None}, device="cpu", augment="train",
                  shuffle=False) as pipe, pytest.warns(RuntimeWarning, match="replaced"):
        batches = [{k: v.clone() for k, v in b.items()} for b in pipe]
    seen = [(int(b["index"][k]), _decode(b, k)) for b in batches for k in range(len(b["index"]))]
    assert len(seen) == 20 and pipe.stats.decode_errors == 1
    for i, text in seen:
        assert text == TEXTS[i].upper()  # sample 7 failed: its row holds a substitute, whole
    assert 7 not in [i for i, _ in seen]


def test_its_options_are_checked_like_any_family(text_dataset):
    from chute import ImageOptions

    with pytest.raises(ValueError, match="'caption' .* is a text field: ImageOptions does not "
                                         "apply to it; give TextOptions"):
        Pipeline(text_dataset, 4, fields={"caption": ImageOptions()}, device="cpu")
    # defaults when given by name; the field is delivered without fields= too
    with Pipeline(text_dataset, 4, device="cpu", augment="eval") as pipe:
        assert set(next(iter(pipe))) == {"caption", "caption_lengths", "label", "index"}


def test_ranks_and_resume_hold_for_it(text_dataset):
    fields = {"caption": TextOptions(max_len=40)}
    ranks = [Pipeline(text_dataset, 3, fields=fields, device="cpu", rank=r, world_size=2,
                      seed=1) for r in range(2)]
    ids = [[i for b in p for i in b["index"].tolist()] for p in ranks]
    assert len(ids[0]) == len(ids[1]) and not set(ids[0]) & set(ids[1])
    first = Pipeline(text_dataset, 3, fields=fields, device="cpu", seed=1)
    it = iter(first)
    head = [i for _ in range(2) for i in next(it)["index"].tolist()]
    again = Pipeline(text_dataset, 3, fields=fields, device="cpu", seed=1)
    again.load_state_dict(first.state_dict())
    whole = Pipeline(text_dataset, 3, fields=fields, device="cpu", seed=1)
    assert head + [i for b in again for i in b["index"].tolist()] == \
        [i for b in whole for i in b["index"].tolist()]
