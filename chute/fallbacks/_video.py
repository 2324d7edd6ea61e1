"""Decoding the frames of a clip from container bytes with FFmpeg (PyAV), touching only the
span the clip needs: seek to the keyframe at or before its first frame, decode forward, keep
the wanted frames, stop after the last (docs/design.md, "Video clips").

Within the span, an H.264 packet that no other frame depends on and whose frame is not wanted
is never decoded (`_h264_refs.py`); each thread keeps its scaler contexts instead of building
one per frame."""

from __future__ import annotations

import io
import threading
import warnings

import numpy as np

from chute.errors import DecodeError
from chute.fallbacks._h264_refs import disposable_test

__all__ = ["decode_frames", "fill_and_crop"]


def _av():
    try:
        import av
    except ImportError:
        raise ImportError("video needs PyAV: pip install chute[video]") from None
    return av


def _fill_dims(height: int, width: int, rotation: int, size) -> tuple[int, int]:
    """Coded-orientation (height, width) that covers `size` at display orientation with the
    aspect ratio kept (the "resize to fill" before the centre crop)."""
    turned = rotation in (90, 270)
    dh, dw = (width, height) if turned else (height, width)
    scale = max(size[0] / dh, size[1] / dw)
    sh, sw = max(size[0], round(dh * scale)), max(size[1], round(dw * scale))
    return (sw, sh) if turned else (sh, sw)


def _offset(room: int, fraction: float | None) -> int:
    """First row (or column) of a crop with `room` spare pixels: centred when `fraction` is
    None, else floor(fraction * (room + 1)) (every offset equally likely)."""
    if fraction is None:
        return room // 2
    return min(int(fraction * (room + 1)), room)


def fill_and_crop(height: int, width: int, rotation: int, size,
                  crop) -> tuple[tuple[int, int], int, int]:
    """The resize-to-fill and crop of a coded (height, width) frame shown at `rotation`:
    the coded-orientation fill size, then the crop's top and left at display orientation
    (`crop`: (vertical, horizontal) fractions, or None to centre). The cpu and dali video
    backends both place their crops with this."""
    fill = _fill_dims(height, width, rotation, size)
    shown = fill[::-1] if rotation in (90, 270) else fill
    fy, fx = crop if crop is not None else (None, None)
    return fill, _offset(shown[0] - size[0], fy), _offset(shown[1] - size[1], fx)


_local = threading.local()
_MAX_SCALERS = 8  # per thread: a few output sizes (buckets) in turn


def _scaler(key):
    """This thread's reformatter for `key` (source and output geometry): one FFmpeg scaler
    context kept across frames, not rebuilt for each."""
    from av.video.reformatter import VideoReformatter

    scalers = getattr(_local, "scalers", None)
    if scalers is None:
        scalers = _local.scalers = {}
    found = scalers.get(key)
    if found is None:
        if len(scalers) >= _MAX_SCALERS:
            scalers.clear()
        found = scalers[key] = VideoReformatter()
    return found


def _display(frame, rotation: int, size, crop) -> np.ndarray:
    if size is None:
        h, w = frame.height, frame.width
    else:
        (h, w), top, left = fill_and_crop(frame.height, frame.width, rotation, size, crop)
    # FFmpeg's scaler converts and resizes in one pass (its bilinear filter widens with
    # the downscale factor, so it is antialiased); then only a crop is left. The scaler keeps
    # FFmpeg's default threads: one thread per scaler measured slower (README, "Video clips").
    scaler = _scaler((frame.format.name, frame.height, frame.width, h, w))
    rgb = scaler.reformat(frame, width=w, height=h, format="rgb24",
                          interpolation="BILINEAR").to_ndarray()
    if rotation:
        rgb = np.rot90(rgb, k=rotation // 90)
    if size is not None:
        rgb = rgb[top:top + size[0], left:left + size[1]]
    return rgb


def decode_frames(data, frame_pts: np.ndarray, indices: np.ndarray, rotation: int = 0,
                  size: tuple[int, int] | None = None,
                  crop: tuple[float, float] | None = None, skip: bool = True,
                  keyframes: np.ndarray | None = None) -> np.ndarray:
    """Frames `indices` (frame numbers in presentation order; repeats allowed) of a video.

    Args:
        data: the container's bytes (bytes-like or a uint8 array).
        frame_pts: every frame's presentation timestamp in presentation order (what
            `chute convert video` stores in the `pts` field).
        indices: frame numbers to return, in the order wanted.
        rotation: degrees counter-clockwise that display applies (0, 90, 180, 270).
        size: (H, W) to resize to fill (aspect ratio kept) and centre-crop to; None keeps the
            decoded size.
        crop: (vertical, horizontal) fractions in [0, 1) placing the crop at
            floor(fraction * (spare + 1)) pixels; None centres it.
        skip: drop unwanted H.264 frames that no other frame depends on before decoding
            (same pixels; False decodes every packet of the span).
        keyframes: frame numbers a decode may start at (the `keyframes` field `chute convert
            video` stores: for AVIs, only keyframes checked to decode as the whole stream
            does); a seek that lands on another keyframe goes further back. None: any
            keyframe.

    Returns:
        uint8 [len(indices), H, W, 3] RGB frames at display orientation.

    Raises:
        DecodeError: a wanted frame is missing or the stream is corrupt.
    """
    indices = np.asarray(indices, dtype=np.int64)
    frame_pts = np.asarray(frame_pts)
    wanted = frame_pts[indices]
    if not isinstance(data, (bytes, bytearray)):
        # numpy's stubs give ndarray __buffer__ on Python >= 3.12 only
        data = memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]
    span = _Span(frame_pts, indices, keyframes)
    found = _decode_span(data, span, rotation, size, crop, skip)
    if found is None:
        # Skipping disposable packets lost a wanted frame: decode the whole span, as a decoder
        # without the shortcut would, and say so when that finds it (a decoder that reorders
        # by what it has seen; a corrupt stream fails below without a warning).
        found = _decode_span(data, span, rotation, size, crop, False)
        if isinstance(found, dict):
            warnings.warn("chute: a video lost wanted frames when its unwanted disposable "
                          "H.264 frames were skipped; its whole span was decoded instead",
                          RuntimeWarning, stacklevel=2)
    if not isinstance(found, dict):
        assert found is not None  # only a decode that skips packets returns None
        raise DecodeError(f"frames with pts {sorted(found)[:3]} are missing (truncated or "
                          "corrupt stream)")
    return np.stack([found[p] for p in wanted.tolist()])


class _Span:
    """The wanted frames of one clip: their timestamps, and each timestamp's frame number."""

    def __init__(self, frame_pts: np.ndarray, indices: np.ndarray,
                 keyframes: np.ndarray | None = None):
        self.frame_pts = frame_pts
        self.number = {p: k for k, p in enumerate(frame_pts.tolist())}
        # where a decode may start (None: any keyframe)
        self.starts = None if keyframes is None else {0, *np.asarray(keyframes).tolist()}
        self.targets = set(frame_pts[indices].tolist())
        self.first = int(indices.min())
        self.last = int(indices.max())


_MAX_SEEKS = 8  # seeks back, each twice as far as the last, before decoding from the start


def _seek(container, stream, span: _Span):
    """Packets of `stream` from a keyframe at or before frame `span.first`, and that
    keyframe's frame number (0 when unknown).

    Containers index keyframes by decode timestamp (MP4, AVI) or presentation timestamp
    (Matroska), so a seek to the first wanted timestamp can land on a keyframe shown after it
    (B-frames, open GOPs: the frames just before that keyframe are decoded after it or from the
    previous one), and MPEG-TS has no index at all: its seeks land on any frame. The first
    packet tells where the seek landed; when that is past the first wanted frame, not a
    keyframe, or a keyframe a decode may not start at (`span.starts`: a packed MPEG-4 keyframe
    whose B-frames decode wrongly after a seek), seek again to before its decode timestamp,
    twice as far back each time."""
    pts = span.frame_pts
    frame_ticks = max(1, int(pts.max() - pts.min()) // max(len(pts) - 1, 1))
    target = int(pts[span.first])
    refused = _av().error.FFmpegError
    for attempt in range(_MAX_SEEKS):
        try:
            container.seek(target, stream=stream, backward=True, any_frame=False)
        except refused:
            if attempt == 0:
                raise
            break  # stepped back before the start, which AVI's demuxer refuses: see below
        packets = container.demux(stream)
        head = next(packets, None)
        if head is None:
            break
        landed = span.number.get(head.pts)
        # A discarded packet (before an MP4 edit list's start) precedes every shown frame.
        if head.is_discard or (landed is not None and landed <= span.first
                               and head.is_keyframe
                               and (span.starts is None or landed in span.starts)):
            return _chain(head, packets), landed or 0
        if landed is None:
            break
        target = min(t for t in (head.pts, head.dts, target) if t is not None) - 1 - \
            frame_ticks * ((1 << attempt) - 1)
    # Unknown timestamps or still not there: from before the first frame (a frame still
    # missing after that is a DecodeError below, never another frame). AVI's demuxer refuses
    # a timestamp before its first one (EPERM): there the first one is the start.
    start = min(int(pts.min()), 0)
    try:
        container.seek(start - 1, stream=stream, backward=True, any_frame=False)
    except refused:
        container.seek(start, stream=stream, backward=True, any_frame=False)
    return container.demux(stream), 0


def _chain(head, packets):
    yield head
    yield from packets


def _decode_span(data, span: _Span, rotation: int, size, crop,
                 skip: bool) -> dict[int, np.ndarray] | set[int] | None:
    """pts -> display frame for every wanted pts; else the missing pts (a plain decode) or
    None (skipping lost a frame)."""
    av = _av()
    targets = span.targets
    found: dict[int, np.ndarray] = {}
    skipped = False
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.video[0]
            context = stream.codec_context
            if context is None:  # FFmpeg knows no decoder for the stream's codec tag
                raise ValueError("no decoder for its video codec")
            disposable = disposable_test(context.name, context.extradata) if skip else None
            done = False
            packets, keyframe = _seek(container, stream, span)
            for packet in packets:
                if (disposable is not None and packet.pts is not None
                        and packet.pts not in targets and disposable(packet)):
                    skipped = True
                    continue
                for frame in packet.decode():
                    if frame.pts is None:
                        continue
                    number = span.number.get(frame.pts, -1)
                    if frame.is_corrupt and number >= keyframe:
                        # Damaged data the decoder concealed: this frame and the ones that
                        # refer to it look plausible but are not the video (frames shown
                        # before the keyframe lack references only because of the seek).
                        raise DecodeError(f"frame {number} is corrupt")
                    if frame.pts in targets:
                        found[frame.pts] = _display(frame, rotation, size, crop)
                    # Stop after the last wanted frame in presentation order (timestamps are
                    # in decode order in some containers, so their size does not tell).
                    done = len(found) == len(targets) or number > span.last
                    if done:
                        break
                if done:
                    break
    except (av.error.FFmpegError, IndexError, ValueError) as exc:
        raise DecodeError(f"video does not decode ({exc})") from None
    if len(found) != len(targets):
        return None if skipped else targets - set(found)
    return found
