"""What the nvdec video backend asks the hardware decoder for, and where the kernel reads each
clip frame: pure functions of the clip's frame numbers and geometry, shared with the CPU tests
(docs/video.md, "The nvdec backend").

PyNvVideoCodec's `SimpleDecoder.get_batch_frames_by_index` returns each distinct frame once, so
a clip that repeats frames (a short video's last frame, `short="repeat"`) asks for its distinct
frames and gathers them back. Its index space is the stream's frames in presentation order,
the same frame numbers the cpu backend maps through the stored `pts` column; a variable frame
rate is the one case where an index-to-time seek can land on another frame, so such videos
are decoded by the cpu backend instead.
"""

from __future__ import annotations

import re

import numpy as np

from chute.fallbacks import fill_and_crop

__all__ = ["frame_request", "clip_box", "constant_rate", "caps_refusal", "packed_mpeg4"]

# MPEG-4 Part 2 user data of a "packed bitstream" (DivX 5 / Xvid: "DivX503b1393p"), on which
# FFmpeg keys its packed B-frame handling (docs/video.md, "AVI and packed B-frames")
_PACKED = re.compile(rb"\x00\x00\x01\xb2DivX\d+(?:Build|b)\d+p")


def frame_request(indices) -> tuple[list[int], np.ndarray]:
    """(distinct frame numbers in increasing order, each clip frame's position among them).

    Args:
        indices: the clip's frame numbers in clip order (repeats allowed).
    """
    unique, gather = np.unique(np.asarray(indices, np.int64), return_inverse=True)
    return unique.tolist(), gather.reshape(-1)


def clip_box(coded: tuple[int, int], rotation: int, size: tuple[int, int] | None,
             crop: tuple[float, float] | None) -> tuple[float, float, float, float]:
    """(y0, x0, height, width) in pixels of the frame turned to display orientation, of the
    window the cpu backend keeps: it fills `size` from the coded frame, turns it and crops at
    `fill_and_crop`'s offsets; the kernel resamples that window of the turned frame to `size`.

    Args:
        coded: the decoded frame's (height, width) before `rotation`.
        rotation: degrees counter-clockwise display turns it (0, 90, 180, 270).
        size: the clip's (H, W); None keeps the frame whole.
        crop: (vertical, horizontal) crop fractions, or None to centre.
    """
    turned = rotation in (90, 270)
    shown_h, shown_w = coded[::-1] if turned else coded
    if size is None:
        return 0.0, 0.0, float(shown_h), float(shown_w)
    fill, top, left = fill_and_crop(coded[0], coded[1], rotation, size, crop)
    fill_h, fill_w = fill[::-1] if turned else fill
    sy, sx = shown_h / fill_h, shown_w / fill_w
    return top * sy, left * sx, size[0] * sy, size[1] * sx


def constant_rate(pts) -> bool:
    """Whether stored timestamps are evenly spaced (within one tick of rounding)."""
    steps = np.diff(np.asarray(pts, np.int64))
    return steps.size == 0 or int(steps.max()) - int(steps.min()) <= 1


def packed_mpeg4(data) -> bool:
    """Whether a video's bytes mark an MPEG-4 Part 2 packed bitstream (each P-frame sharing
    its chunk with a B-frame), whose frames the cpu backend's FFmpeg reorders itself.

    Args:
        data: the container's bytes (bytes-like or a uint8 array).
    """
    # numpy's stubs give ndarray __buffer__ on Python >= 3.12 only
    view = memoryview(np.ascontiguousarray(data)).cast("B")  # type: ignore[arg-type]
    return _PACKED.search(view) is not None


def caps_refusal(caps, height: int, width: int) -> str | None:
    """Why a decoder's capabilities (`PyNvVideoCodec.GetDecoderCaps`'s dict) refuse a coded
    `height` x `width` stream, or None when they accept it.

    Args:
        caps: the capability dict of the stream's codec, chroma format and bit depth.
        height, width: the coded frame size.
    """
    if not caps:
        return "the decoder reports no capabilities for it"
    for key in ("is_supported", "supported"):
        if key in caps and not caps[key]:
            return "the decoder says the codec is not supported"
    if int(caps.get("num_decoder_engines", 1)) < 1:
        return "no decoder engine takes it"
    wmax, hmax = int(caps.get("width_max", 0)), int(caps.get("height_max", 0))
    if width > wmax or height > hmax:
        return f"{width}x{height} is over the decoder's {wmax}x{hmax}"
    wmin, hmin = int(caps.get("width_min", 0)), int(caps.get("height_min", 0))
    if width < wmin or height < hmin:
        return f"{width}x{height} is under the decoder's {wmin}x{hmin}"
    mbs = int(caps.get("mb_num_max", 0))
    if mbs and ((width + 15) // 16) * ((height + 15) // 16) > mbs:
        return f"{width}x{height} has more macroblocks than the decoder's {mbs}"
    return None
