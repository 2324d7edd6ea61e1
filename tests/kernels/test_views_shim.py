"""The multi-crop views kernel (one launch for every view, docs/views.md) compiled as C++ through
the host shim and run on the CPU: each view equals the one-view kernel bit for bit, and the
views of decoded JPEGs, with the crops a Pipeline draws (`view_seed`), match what the cpu
backend's `decode_views` delivers (issue 25 item 1)."""

from __future__ import annotations

import numpy as np
import pytest

from chute._output_types import image_batch_shape
from chute.kernels import union_windows
from chute.kernels._plan import output_view, source_views, views_plan
from chute.pipelines import View, crop_boxes, view_seed
from tests._media import jpeg
from tests.kernels.cases import make_batch, view_boxes
from tests.kernels.compare import (
    HostAsDevice,
    assert_matches_reference,
    run_shim,
    run_views_shim,
)

# A DINO-like mix: two large views, then small ones of other aspect ratios (one 1x1).
VIEW_SIZES = [(24, 32), (24, 32), (7, 5), (33, 31), (1, 1)]


def _outs(batch, dtype, layout, sizes=VIEW_SIZES, fill=77):
    # `fill`: a stale value the kernel must overwrite
    return [np.full(image_batch_shape(batch, h, w, layout), fill, dtype=dtype) for h, w in sizes]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32])
def test_every_view_equals_the_one_view_kernel(kernel_shim, dtype, layout):
    images, padded, _, _ = make_batch(seed=6)
    boxes, flips = view_boxes(images, len(VIEW_SIZES), seed=1)
    outs = _outs(len(images), dtype, layout)
    run_views_shim(kernel_shim, padded, boxes, flips, outs, layout)
    for v, (h, w) in enumerate(VIEW_SIZES):
        alone = np.zeros(image_batch_shape(len(images), h, w, layout), dtype=dtype)
        run_shim(kernel_shim, padded, boxes[:, v], flips[:, v], alone, layout)
        np.testing.assert_array_equal(outs[v], alone, err_msg=f"view {v}")


def test_a_swapped_view_or_flip_is_detected(kernel_shim):
    """Guards the comparison above: the views must land in their own outputs, with their own
    flips (the two 24x32 views swapped, or a flip dropped, must show)."""
    images, padded, _, _ = make_batch(seed=7)
    boxes, flips = view_boxes(images, len(VIEW_SIZES), seed=2)
    outs = _outs(len(images), np.float32, "NCHW")
    run_views_shim(kernel_shim, padded, boxes, flips, outs, "NCHW")
    swapped = np.zeros_like(outs[1])
    run_shim(kernel_shim, padded, boxes[:, 0], flips[:, 0], swapped, "NCHW")
    assert np.abs(outs[1] - swapped).max() > 0.1
    unflipped = np.zeros_like(outs[0])
    run_shim(kernel_shim, padded, boxes[:, 0], ~flips[:, 0], unflipped, "NCHW")
    assert np.abs(outs[0] - unflipped).max() > 0.1


def test_the_plan_numbers_every_views_blocks_once():
    images, padded, _, _ = make_batch(seed=8)
    boxes, flips = view_boxes(images, 3, seed=3)
    outs = _outs(len(images), np.float16, "NCHW", sizes=[(224, 224), (96, 96), (0, 5)])
    plan = views_plan(source_views([HostAsDevice(p) for p in padded]), boxes, flips,
                      [output_view(HostAsDevice(o), "NCHW") for o in outs], (0.5,) * 3, (0.25,) * 3)
    table = plan.buffer[plan.offsets["views"]:plan.offsets["flips"]].view(np.int32).reshape(3, 4)
    # (out_h, out_w, blocks_x, first_block): 7 x 28 blocks, then 3 x 12, then none
    np.testing.assert_array_equal(table, [[224, 224, 7, 0], [96, 96, 3, 196], [0, 5, 1, 232]])
    assert plan.grid == (232, len(images), 1)
    assert plan.kernel == "chute_resize_normalize_views_f16_nchw" and plan.num_views == 3


@pytest.mark.parametrize("change, message", [
    (lambda b, f, o: (b[:, :2], f, o), r"boxes must have shape"),
    (lambda b, f, o: (b, f[:, :2], o), r"flips must have shape"),
    (lambda b, f, o: (b, f, [o[0], o[1].astype(np.float32), o[2]]), r"share one dtype"),
    (lambda b, f, o: (b, f, [o[0], o[1][:2], o[2]]), r"view 1's output holds 2"),
    (lambda b, f, o: (b, f, []), r"at least one output"),
])
def test_the_plan_rejects_mismatched_views(change, message):
    images, padded, _, _ = make_batch(seed=9)
    boxes, flips = view_boxes(images, 3, seed=4)
    outs = _outs(len(images), np.float16, "NCHW", sizes=VIEW_SIZES[:3])
    boxes, flips, outs = change(boxes, flips, outs)
    with pytest.raises(ValueError, match=message):
        views_plan(source_views([HostAsDevice(p) for p in padded]), boxes, flips,
                   [output_view(HostAsDevice(o), "NCHW") for o in outs], (0.5,) * 3, (0.25,) * 3)


def test_a_box_outside_its_source_names_the_sample():
    images, padded, _, _ = make_batch(seed=9)
    boxes, flips = view_boxes(images, 2, seed=5)
    boxes[3, 1] = (0, 0, 1000, 1000)
    outs = _outs(len(images), np.float16, "NCHW", sizes=VIEW_SIZES[:2])
    with pytest.raises(ValueError, match=r"of sample 7 does not lie inside"):  # row 3 * 2 + 1
        views_plan(source_views([HostAsDevice(p) for p in padded]), boxes, flips,
                   [output_view(HostAsDevice(o), "NCHW") for o in outs], (0.5,) * 3, (0.25,) * 3)


DINO = [View((20, 28), scale=(0.32, 1.0), count=2), View(12, scale=(0.05, 0.32), count=3)]


def _dino_batch(seed: int = 11, epoch: int = 2):
    """Encoded JPEGs, their full decodes by the cpu backend's decoder, and the crops a Pipeline
    with `seed` draws for samples 0..5 in `epoch` (view v: crop_boxes with view_seed)."""
    pytest.importorskip("chute.fallbacks._decode")
    from chute.fallbacks import decode_batch

    sizes = [(61, 83), (120, 90), (48, 48), (97, 131), (33, 200), (150, 40)]
    payloads = [np.frombuffer(jpeg(h, w, seed=k), dtype=np.uint8) for k, (h, w) in enumerate(sizes)]
    data = np.concatenate(payloads)
    offsets = np.concatenate([[0], np.cumsum([p.size for p in payloads])])
    # the decoder's own pixels: an identity resample (box = image, output = image size) of a
    # full-size decode
    decoded = []
    for k, (h, w) in enumerate(sizes):
        one = np.zeros((1, h, w, 3), dtype=np.uint8)
        status = decode_batch(payloads[k], [0, payloads[k].size], [[0, 0, h, w]], [False], one,
                              layout="NHWC", dct_scaling=False, roi_decode=False, threads=1)
        assert status[0] == 0
        decoded.append(one[0])
    crops = [view.crop("train") for view in DINO for _ in range(view.count)]
    ids = np.arange(len(sizes))
    heights, widths = (np.array([s[i] for s in sizes]) for i in (0, 1))
    boxes = np.empty((len(sizes), len(crops), 4))
    flips = np.empty((len(sizes), len(crops)), dtype=bool)
    for v, crop in enumerate(crops):
        boxes[:, v], flips[:, v] = crop_boxes(view_seed(seed, v), epoch, ids, heights, widths,
                                              crop)
    out_sizes = [crop.size for crop in crops]
    return data, offsets, decoded, np.array(sizes), boxes, flips, out_sizes


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float16, np.uint8, np.float32])
def test_kernel_views_match_the_cpu_backends_views(kernel_shim, dtype, layout):
    from chute.fallbacks import decode_views

    data, offsets, decoded, _, boxes, flips, out_sizes = _dino_batch()
    cpu = _outs(len(decoded), dtype, layout, sizes=out_sizes, fill=0)
    float_out = dtype != np.uint8
    status = decode_views(data, offsets, boxes, flips, cpu, layout=layout, dct_scaling=False,
                          roi_decode=False, threads=1,
                          mean=(0.485, 0.456, 0.406) if float_out else None,
                          std=(0.229, 0.224, 0.225) if float_out else None)
    assert not status.any()
    gpu = _outs(len(decoded), dtype, layout, sizes=out_sizes)
    run_views_shim(kernel_shim, decoded, boxes, flips, gpu, layout)
    for v in range(len(out_sizes)):
        assert_matches_reference(gpu[v], cpu[v])


def test_views_from_the_union_window_equal_views_from_the_full_decode(kernel_shim):
    """What the GPU path decodes: one window per sample holding every view's resample margin
    (`union_windows`). Views resampled from it equal views of the full image (up to float32
    rounding of tap positions shifted by the window's origin)."""
    _, _, decoded, sizes, boxes, flips, out_sizes = _dino_batch(seed=12)
    windows, inner = union_windows(boxes, sizes, out_sizes)
    assert (windows[:, 2:] <= sizes).all() and (windows[:, :2] >= 0).all()
    assert (windows[:, 2:] < sizes).any()  # some windows are smaller than their image
    cropped = [image[t:t + h, x:x + w] for image, (t, x, h, w) in zip(decoded, windows,
                                                                       strict=True)]
    full = _outs(len(decoded), np.float32, "NCHW", sizes=out_sizes)
    run_views_shim(kernel_shim, decoded, boxes.astype(np.float32), flips, full, "NCHW")
    part = _outs(len(decoded), np.float32, "NCHW", sizes=out_sizes)
    run_views_shim(kernel_shim, cropped, inner, flips, part, "NCHW")
    for v in range(len(out_sizes)):
        assert_matches_reference(part[v], full[v])
