"""Decompression bombs (issue 11, defect 2): a few hundred bytes whose header claims 30000 x 30000
(or 65500 x 65500) pixels. The decoder must refuse them by the header -- decoded pixels are
bounded, and a header that disagrees with the dataset's height/width columns fails the sample --
before any large allocation: a counted substitute under on_error="skip", a DecodeError naming the
sample and shard under "raise", no MemoryError, no gigabytes left behind."""

import os
import struct
import warnings

import numpy as np
import pytest

from chute.errors import DecodeError
from chute.fallbacks import DecodeStatus, decode_batch
from chute.pipelines import ImageOptions, Pipeline
from tests._datasets import write_samples
from tests._media import encode, jpeg, smooth_image

FIELDS = {"image": "bytes", "label": "int64", "height": "int32", "width": "int32"}
N, BOMB = 12, 5


def bomb(height: int, width: int) -> bytes:
    """A small JPEG whose SOF0 header claims height x width (its scan covers 16 x 16)."""
    payload = bytearray(jpeg(16, 16, seed=1, quality=75))
    at = payload.find(b"\xff\xc0")
    assert at > 0
    payload[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(payload)


def write(path, claimed: tuple[int, int]):
    def samples():
        for i in range(N):
            if i == BOMB:
                yield {"image": bomb(30000, 30000), "label": i, "height": claimed[0],
                       "width": claimed[1]}
            else:
                yield {"image": jpeg(24, 32, seed=i), "label": i, "height": 24, "width": 32}

    return write_samples(path, FIELDS, samples())


def _fields(**image) -> dict:
    """The image (cpu backend, 16 x 16) and its label."""
    return {"image": ImageOptions(size=16, backend="cpu", **image), "label": None}


def _peak_rss_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the peak resident size
        return True
    except OSError:
        return False


def _rss(name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(name)


def test_bomb_payload_is_small():
    assert len(bomb(30000, 30000)) < 1024


@pytest.mark.parametrize("claimed", [(16, 16), (30000, 30000)], ids=["columns-small",
                                                                    "columns-agree"])
def test_a_bomb_is_a_counted_skip_without_memory(tmp_path, claimed):
    path = write(tmp_path / "ds.chute", claimed)
    measured = os.path.exists("/proc/self/status") and _peak_rss_reset()
    before = _rss("VmRSS") if measured else 0
    why = "more pixels than the bound"  # checked first: nothing of that size is allocated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        pipe = Pipeline(path, 4, fields=_fields(), device="cpu", augment="eval", rank=0,
                        world_size=1, on_error="skip")
        ids = [int(i) for b in pipe for i in b["index"]]
    assert any(f"sample {BOMB}" in str(w.message) and why in str(w.message) for w in caught)
    assert sorted(ids) == [i for i in range(N) if i != BOMB]  # eval leaves it out
    assert pipe.stats.decode_errors == 1 and pipe.stats.skipped == [BOMB]
    pipe.close()
    if measured:  # the header was refused before any allocation of its size
        assert _rss("VmHWM") - before < 512 * 2**20
        assert _rss("VmRSS") - before < 256 * 2**20


def test_a_bomb_raises_a_decode_error_naming_the_sample(tmp_path):
    path = write(tmp_path / "ds.chute", (16, 16))
    with Pipeline(path, 4, fields=_fields(), device="cpu", augment="eval", rank=0,
                  world_size=1, on_error="raise") as pipe:
        with pytest.raises(DecodeError, match=f"sample {BOMB}.*shard.*more pixels than the "
                                              "bound"):
            list(pipe)


def _decode(payload: bytes, sizes=None, **kw):
    data = np.frombuffer(payload, np.uint8)
    out = np.zeros((1, 3, 8, 8), np.float32)
    status = decode_batch(data, [0, data.size], [[0, 0, 16, 16]], [False], out, sizes=sizes,
                          **kw)
    return DecodeStatus(int(status[0]))


@pytest.mark.slow
def test_decode_batch_bounds_pixels_and_checks_the_header_size():
    assert _decode(bomb(30000, 30000)) == DecodeStatus.TOO_LARGE
    assert _decode(bomb(65500, 65500)) == DecodeStatus.TOO_LARGE
    assert _decode(bomb(100, 100), max_pixels=99 * 100) == DecodeStatus.TOO_LARGE
    assert _decode(bomb(3000, 3000), sizes=[[16, 16]]) == DecodeStatus.SIZE_MISMATCH
    good = jpeg(16, 16, seed=2)
    assert _decode(good, sizes=[[16, 16]]) == DecodeStatus.OK
    assert _decode(good, sizes=[[16, 17]]) == DecodeStatus.SIZE_MISMATCH
    png = encode(smooth_image(16, 16), "PNG")  # the PIL path checks the same
    assert _decode(png, sizes=[[16, 16]]) == DecodeStatus.OK
    assert _decode(png, sizes=[[20, 16]]) == DecodeStatus.SIZE_MISMATCH
    assert _decode(png, max_pixels=255) == DecodeStatus.TOO_LARGE


def test_the_pixel_bound_is_configurable(tmp_path, monkeypatch):
    from chute.fallbacks import max_image_pixels

    assert max_image_pixels() == 178_956_970
    monkeypatch.setenv("CHUTE_MAX_IMAGE_PIXELS", "1000")
    assert max_image_pixels() == 1000
    assert _decode(jpeg(16, 16, seed=2), sizes=None, max_pixels=None) == DecodeStatus.OK
    assert _decode(bomb(40, 40)) == DecodeStatus.TOO_LARGE  # 1600 > 1000 from the environment
    monkeypatch.setenv("CHUTE_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(ValueError, match="CHUTE_MAX_IMAGE_PIXELS"):
        max_image_pixels()
    monkeypatch.delenv("CHUTE_MAX_IMAGE_PIXELS")
    path = write(tmp_path / "ds.chute", (30000, 30000))
    options = dict(device="cpu", augment="eval", rank=0, world_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Pipeline(path, 4, fields=_fields(backend_options={"max_pixels": 24 * 32}),
                      **options) as pipe:
            list(pipe)
            assert pipe.stats.decode_errors == 1
        # train substitutes (eval would leave every sample out)
        with Pipeline(path, 4, fields=_fields(backend_options={"max_pixels": 24 * 32 - 1}),
                      **{**options, "augment": "train"}) as pipe:
            with pytest.raises(DecodeError, match="substitutes"):  # every image is too large
                list(pipe)
    with pytest.raises(ValueError, match="max_pixels"):
        Pipeline(path, 4, fields=_fields(backend_options={"max_pixels": 0}), **options)
