"""augment="eval" reproduces torchvision's evaluation transform (Resize(round(S / 0.875)),
bilinear antialiased, + CenterCrop(S)) computed through PIL, and keeps DCT-domain scaling off."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from chute import ImageOptions, Pipeline
from chute.fallbacks import decode_batch
from chute.readers import open_dataset
from tests._datasets import write_samples
from tests._media import encode, smooth_image

# Portrait, landscape, square, odd, smaller than the output and much larger.
SIZES = [(375, 500), (500, 333), (256, 256), (301, 457), (97, 131), (120, 80), (611, 811),
         (224, 225), (1000, 300)]


def torchvision_eval_pil(payload: bytes, size: tuple[int, int], fraction: float = 0.875):
    """torchvision's Resize + CenterCrop on a PIL image, written from torchvision's rules:
    shorter side to round(S / fraction) (the long side truncated), then the (h, w) crop at
    int(round((resized - crop) / 2.0)). A non-square (h, w) resizes to cover
    (round(h / fraction), round(w / fraction))."""
    image = Image.open(io.BytesIO(payload)).convert("RGB")
    w, h = image.size
    th, tw = round(size[0] / fraction), round(size[1] / fraction)
    if th * w >= tw * h:
        new_h, new_w = th, int(th * w / h)
    else:
        new_h, new_w = int(tw * h / w), tw
    resized = image.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - size[0]) / 2.0))
    left = int(round((new_w - size[1]) / 2.0))
    return np.asarray(resized.crop((left, top, left + size[1], top + size[0])))


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    payloads = [encode(smooth_image(h, w, seed=i), quality=94) for i, (h, w) in enumerate(SIZES)]
    path = tmp_path_factory.mktemp("eval") / "photos.chute"
    fields = {"image": {"kind": "bytes", "media": "image"}, "height": "int32", "width": "int32"}
    write_samples(path, fields, ({"image": p, "height": h, "width": w}
                                 for p, (h, w) in zip(payloads, SIZES, strict=True)))
    return open_dataset(path), payloads


def _eval_batch(ds, size, **image) -> np.ndarray:
    image = ImageOptions(size=size, backend="cpu", dtype="uint8", layout="NHWC", **image)
    with Pipeline(ds, len(ds), fields={"image": image}, augment="eval", device="cpu") as pipe:
        batch = next(iter(pipe))
        order = batch["index"].numpy()
        out = np.empty_like(batch["image"].numpy())
        out[order] = batch["image"].numpy()
        return out


@pytest.mark.parametrize("size", [(224, 224), (64, 64), (48, 80)])
def test_eval_equals_torchvision_through_pil(photos, size):
    ds, payloads = photos
    got = _eval_batch(ds, size)
    mae = np.array([np.abs(got[i].astype(int) - torchvision_eval_pil(p, size)).mean()
                    for i, p in enumerate(payloads)])
    # PIL rounds to uint8 between its two passes; chute rounds once
    assert np.median(mae) <= 0.3 and mae.max() <= 0.5, mae


def test_crop_resize_is_the_other_definition(photos):
    """eval_crop="crop-resize" keeps the whole-pixel box resized to S (FFCV's definition),
    which is measurably not torchvision's: the check above can tell them apart."""
    ds, payloads = photos
    got = _eval_batch(ds, (64, 64), eval_crop="crop-resize")
    mae = np.array([np.abs(got[i].astype(int) - torchvision_eval_pil(p, (64, 64))).mean()
                    for i, p in enumerate(payloads)])
    assert np.median(mae) > 0.5, mae


def test_eval_uses_no_dct_scaling_by_default(photos):
    """Regression: eval used DCT-domain downscaling (what train keeps) and so differed from the
    exact decode by up to tens of levels on real photos."""
    ds, payloads = photos
    cpu = {"image": ImageOptions(size=64, backend="cpu")}
    with Pipeline(ds, 2, fields=cpu, augment="eval", device="cpu") as pipe:
        assert pipe.backend.dct_scaling is False
    with Pipeline(ds, 2, fields=cpu, augment="train", device="cpu") as pipe:
        assert pipe.backend.dct_scaling is True
    dct = {"image": ImageOptions(size=64, backend="cpu", backend_options={"dct_scaling": True})}
    with Pipeline(ds, 2, fields=dct, augment="eval", device="cpu") as pipe:
        assert pipe.backend.dct_scaling is True  # an explicit choice is honoured
    # The delivered pixels are those of the exact decode, not of the DCT-scaled one.
    got = _eval_batch(ds, (32, 32))
    boxes = None
    with Pipeline(ds, len(ds), fields={"image": ImageOptions(size=32, backend="cpu")},
                  augment="eval", device="cpu") as pipe:
        boxes = pipe.plan(0).request(0).params["boxes"]
        ids = pipe.plan(0).request(0).ids
    order = np.argsort(ids)
    data = np.frombuffer(b"".join(payloads), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in payloads])])
    outs = {}
    for dct in (False, True):
        out = np.empty((len(payloads), 32, 32, 3), np.uint8)
        status = decode_batch(data, offsets, boxes[order], np.zeros(len(payloads), bool), out,
                              layout="NHWC", dct_scaling=dct)
        assert not status.any()
        outs[dct] = out
    assert not np.array_equal(outs[True], outs[False])  # the images are large enough to scale
    np.testing.assert_array_equal(got, outs[False])


def test_eval_on_converted_pngs_matches_torchvision_on_the_pngs(tmp_path):
    """`convert` transcodes PNGs to JPEG; eval on them stays close to torchvision's transform on
    the PNG files themselves: median MAE 0.3-0.4 on these noisy, saturated images (0.21 on PNG
    copies of photos, README); 4:2:0 chroma at quality 95 gave 2.9-4.6."""
    from chute.convert import ConvertOptions, convert_imagefolder

    sizes = [(375, 500), (333, 250), (301, 457), (240, 240)]
    pngs = {f"p{i}.png": encode(smooth_image(h, w, seed=20 + i), "PNG")
            for i, (h, w) in enumerate(sizes)}
    (tmp_path / "src").mkdir()
    for name, payload in pngs.items():
        (tmp_path / "src" / name).write_bytes(payload)
    report = convert_imagefolder(tmp_path / "src", tmp_path / "png.chute",
                                 ConvertOptions(workers=1, progress=False))
    assert report.actions["transcoded"] == len(pngs)
    ds = open_dataset(tmp_path / "png.chute")
    got = _eval_batch(ds, (224, 224))
    mae = np.array([np.abs(got[i].astype(int)
                           - torchvision_eval_pil(pngs[ds[i]["meta"]["key"]], (224, 224))).mean()
                    for i in range(len(ds))])
    assert np.median(mae) <= 0.45 and mae.max() <= 0.55, mae
