"""The GPU readers (dali / dali-native, nvimgcodec) check each header before their decoder sees
it, as the CPU decoder does (docs/design.md, "Decompression bombs"). Run on their CPU twins:
before the check, a header larger than its height/width columns was decoded and delivered as a
wrong crop with status 0, and a 700-byte bomb made the process grow by 3-5 GB."""

import warnings

import pytest

from chute.errors import DecodeError
from chute.pipelines import ImageOptions, Pipeline
from tests._datasets import write_samples
from tests._media import jpeg
from tests.pipelines.producers.image.test_decompression_bombs import (
    BOMB,
    FIELDS,
    N,
    _peak_rss_reset,
    _rss,
    write,
)

MODULES = {"dali-native": "nvidia.dali", "nvimgcodec": "nvidia.nvimgcodec"}


@pytest.fixture(params=sorted(MODULES))
def backend(request):
    pytest.importorskip(MODULES[request.param])
    return request.param


def _options(backend, on_error="skip", **image):
    """Pipeline arguments; `image`: more of the image field's options (backend_options=)."""
    fields = {"image": ImageOptions(size=16, backend=backend, **image), "label": None}
    return dict(fields=fields, device="cpu", augment="eval", rank=0, world_size=1,
                on_error=on_error)


def _read(path, backend, **extra):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Pipeline(path, 4, **_options(backend, **extra)) as pipe:
            ids = [int(i) for b in pipe for i in b["index"]]
            errors = pipe.stats.decode_errors
    return ids, errors, [str(w.message) for w in caught]


def test_a_header_larger_than_its_columns_is_not_delivered(tmp_path, backend):
    def samples():
        for i in range(N):
            big = i == BOMB  # a real 48 x 64 image stored under 24 x 32 columns
            yield {"image": jpeg(48 if big else 24, 64 if big else 32, seed=i), "label": i,
                   "height": 24, "width": 32}

    path = write_samples(tmp_path / "ds.chute", FIELDS, samples())
    ids, errors, messages = _read(path, backend)
    assert sorted(ids) == [i for i in range(N) if i != BOMB] and errors == 1  # left out
    assert any(f"sample {BOMB}" in m and "disagrees with the dataset's height/width" in m
               for m in messages)


@pytest.mark.parametrize("claimed", [(16, 16), (30000, 30000)], ids=["columns-small",
                                                                    "columns-agree"])
def test_a_bomb_never_reaches_the_decoder(tmp_path, backend, claimed):
    path = write(tmp_path / "ds.chute", claimed)
    measured = _peak_rss_reset()
    before = _rss("VmRSS") if measured else 0
    ids, errors, messages = _read(path, backend)
    assert sorted(ids) == [i for i in range(N) if i != BOMB] and errors == 1  # left out
    assert any(f"sample {BOMB}" in m and "more pixels than the bound" in m for m in messages)
    if measured:  # the decoders allocated 3-5 GB for it before the check
        assert _rss("VmHWM") - before < 1024 * 2**20


def test_the_bound_is_a_backend_option_and_raise_names_the_sample(tmp_path, backend):
    path = write(tmp_path / "ds.chute", (16, 16))
    with Pipeline(path, 4, **_options(backend, on_error="raise")) as pipe:
        with pytest.raises(DecodeError, match=f"sample {BOMB}.*shard.*more pixels than the bound"):
            list(pipe)
    clean = write_samples(tmp_path / "clean.chute", FIELDS, (
        {"image": jpeg(24, 32, seed=i), "label": i, "height": 24, "width": 32} for i in range(8)))
    with Pipeline(clean, 4, **_options(backend, backend_options={"max_pixels": 24 * 32 - 1},
                                       on_error="raise")) as pipe:
        with pytest.raises(DecodeError, match="more pixels than the bound"):
            next(iter(pipe))
    ids, errors, _ = _read(clean, backend, backend_options={"max_pixels": 24 * 32})
    assert sorted(ids) == list(range(8)) and errors == 0
