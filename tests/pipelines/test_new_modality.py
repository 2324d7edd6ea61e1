"""The success test of the modality-free core (docs/design.md, "Fields, families and
batching"): a new modality -- one folder with its options, family, producers, sample unit,
auto hook and on-device output (tests/pipelines/_text_family/) plus one FAMILIES entry -- is
delivered by the Pipeline with every guarantee (order, DDP partition, resume, substitution,
batching, backend="auto"), with no change to any file outside that folder."""

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
    fields = {"caption": {"kind": "bytes", "media": "text"}, "label": "int64"}
    samples = ({"caption": t.encode(), "label": i} for i, t in enumerate(TEXTS))
    return write_samples(tmp_path / "text.chute", fields, samples, shard_size="200B")


def _decode(batch, k: int) -> str:
    n = int(batch["caption_lengths"][k])
    return bytes(batch["caption"][k, :n].tolist()).decode()


def test_a_new_modality_is_delivered_with_its_options(text_dataset):
    with Pipeline(text_dataset, 4, fields={"caption": TextOptions(max_len=20, upper=True),
                                           "label": None}, device="cpu", augment="train",
                  order="sequential") as pipe, pytest.warns(RuntimeWarning, match="replaced"):
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
    _check_resume(text_dataset, fields, batch_size=3, seed=1, taken=2)


def _check_resume(dataset, fields, batch_size: int, seed: int, taken: int) -> None:
    """`taken` batches, then a new Pipeline from the state, deliver the whole epoch."""
    def pipe():
        return Pipeline(dataset, batch_size, fields=fields, device="cpu", seed=seed)

    first = pipe()
    it = iter(first)
    head = [i for _ in range(taken) for i in next(it)["index"].tolist()]
    again = pipe()
    again.load_state_dict(first.state_dict())
    assert head + [i for b in again for i in b["index"].tolist()] == \
        [i for b in pipe() for i in b["index"].tolist()]


def _rows(pipe) -> list[tuple[int, str, int]]:
    return [(int(b["index"][k]), _decode(b, k), int(b["label"][k]))
            for b in pipe for k in range(len(b["index"]))]


def test_its_own_sample_unit_makes_each_word_a_sample(text_dataset):
    """The family's unit hook: with unit="word" the samples are the words of every row (the
    label read per row through the unit's view), in order, and resume holds over them."""
    words = [(w.decode(), row) for row, t in enumerate(TEXTS) for w in t.encode().split()]
    fields = {"caption": TextOptions(max_len=20, unit="word"), "label": None}
    with pytest.warns(RuntimeWarning, match=r"word 0 of row 7, shard"):
        with Pipeline(text_dataset, 5, fields=fields, device="cpu", augment="eval",
                      order="sequential") as pipe:
            got = _rows(pipe)
    assert pipe.stats.skipped == [words.index(("x" * 40, 7))]  # longer than max_len
    assert got == [(i, w, row) for i, (w, row) in enumerate(words) if row != 7]
    assert len(Pipeline(text_dataset, 4, fields=fields, device="cpu")) * 4 > len(TEXTS)
    with pytest.warns(RuntimeWarning, match="word 0 of row 7"):  # each Pipeline warns once
        _check_resume(text_dataset, fields, batch_size=4, seed=3, taken=3)


def test_its_on_device_output_is_written_by_the_producer(text_dataset):
    """An Output with on_device=True: the producer writes the device tensor itself."""
    def run(backend):
        with Pipeline(text_dataset, 4, fields={"caption": TextOptions(max_len=40,
                                                                      backend=backend),
                                               "label": None},
                      device="cpu", augment="eval", order="sequential") as pipe:
            assert pipe._assembly.outputs["caption"].on_device == (backend != "test-text")
            return _rows(pipe)

    assert run("test-text-device") == run("test-text") == \
        [(i, t, i) for i, t in enumerate(TEXTS)]


def test_its_auto_hook_measures_its_producers(text_dataset):
    """backend="auto": the family's own hook measures both producers through real Pipelines
    with the autotune library and builds the faster; the Pipeline reports the decision."""
    with Pipeline(text_dataset, 4, fields={"caption": TextOptions(max_len=40, backend="auto")},
                  device="cpu", augment="eval") as pipe:
        decision = pipe.stats.field_backends["caption"]
        assert decision["backend"] in ("test-text", "test-text-device")
        assert pipe._assembly.producers[0].name == decision["backend"]
        assert "text on the host" in decision["reason"] or "text on the device" in \
            decision["reason"]
        assert len([i for b in pipe for i in b["index"].tolist()]) == 20


def test_the_modality_is_one_folder_and_one_registry_entry(text_dataset):
    """Nothing outside tests/pipelines/_text_family/ knows the modality: chute's sources never
    name it, and registering it took exactly one FAMILIES entry (the fixture's)."""
    from pathlib import Path

    import tests.pipelines._text_family as folder

    root = Path(registry.__file__).resolve().parents[2]  # chute/
    mentions = [p for p in root.rglob("*.py")
                if "_text_family" in p.read_text() or "test-text" in p.read_text()]
    assert mentions == []
    assert {k for k, v in registry.FAMILIES.items() if "_text_family" in v} == {"text"}
    assert not any("_text_family" in v for v in registry.PRODUCERS.values())
    files = sorted(p.name for p in Path(folder.__file__).parent.glob("*.py"))
    assert files == ["__init__.py", "_auto.py", "_family.py", "_options.py", "_producer.py",
                     "_units.py"]
