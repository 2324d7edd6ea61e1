"""Probing a video container (PyAV, imported lazily): frame count, rate, display size, duration
and what seeking needs (every frame's timestamp in presentation order, keyframe indices).
Packets are demuxed, not decoded, except the first frame (its rotation), and every frame of a
stream whose timestamps may be in decode order (below)."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np

__all__ = ["VideoInfo", "UnreadableVideo", "probe_video", "import_av"]


class UnreadableVideo(ValueError):
    """The bytes are not a video chute can read (the message says why)."""


def import_av():
    try:
        import av
    except ImportError:
        raise ImportError("video needs PyAV: pip install chute[video]") from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    num_frames: int
    fps: float
    height: int  # display size: rotation applied
    width: int
    duration: float  # seconds
    rotation: int  # degrees counter-clockwise to display (0, 90, 180, 270)
    pts: np.ndarray  # int64 [num_frames] each frame's timestamp, in presentation order
    time_base: float  # seconds per pts unit
    # int64 frame indices of the keyframes a decode may start at (for a stream decoded whole
    # at probe time, those checked to decode as the whole stream does: `_seekable`)
    keyframes: np.ndarray


def _rotation(container, stream) -> int:
    for frame in container.decode(stream):
        return int(round(getattr(frame, "rotation", 0) or 0)) % 360
    raise UnreadableVideo("no frame decodes")


def _frame_rate(pts: np.ndarray, time_base: float, declared) -> float:
    """Frames per second from the timestamps (n - 1 intervals over the span), so a variable
    rate is measured rather than taken from the header; the declared rate when it agrees
    within 1 % (timestamps rounded to the time base, e.g. milliseconds at 23.976 fps)."""
    span = float(pts.max() - pts.min()) * time_base if len(pts) > 1 else 0.0
    if span <= 0:
        return float(declared) if declared else 0.0
    measured = (len(pts) - 1) / span
    if declared and abs(float(declared) - measured) <= 0.01 * measured:
        return float(declared)
    return measured


def _truncation(stream, stored: int, end: float) -> str | None:
    """What the container's header promises that the packets do not hold, or None.

    AVI and MP4 headers count the frames; Matroska writers tag each track's DURATION. A file
    cut short keeps its header, so its packets stop early."""
    if stream.frames and stored < stream.frames:
        return f"its header lists {stream.frames} frames, {stored} are stored"
    tag = str(stream.metadata.get("DURATION", ""))
    try:
        hours, minutes, seconds = tag.split(":")
        declared = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        return None
    interval = end / max(stored, 1)
    if end < declared - max(0.1, 2 * interval):
        return f"its header says {declared:.3f} s, its frames end at {end:.3f} s"
    return None


def _digest(frame) -> bytes:
    """A frame's pixels as a short hash (plane padding excluded)."""
    try:
        pixels = frame.to_ndarray()
    except ValueError:  # a pixel format NumPy conversion does not cover
        pixels = frame.to_ndarray(format="rgb24")
    return hashlib.blake2b(np.ascontiguousarray(pixels).data, digest_size=16).digest()


def _decode_all(container, stream, pts: list[int]) -> list[tuple[int, bytes]] | None:
    """(timestamp, pixel digest) of every frame the decoder shows, in order, when the stream
    needs this decode, else None.

    A container without presentation timestamps (AVI) gives packets their decode order, or
    timestamps libavformat guesses from each packet's first picture: with B-frames, frame k of
    the display is then not the k-th smallest timestamp. MPEG-4 Part 2 with "packed" B-frames
    (DivX/Xvid AVIs: a P-frame and the next B-frame in one packet, an empty placeholder packet
    after) defeats the guess, so its decoder shows the guessed timestamps out of order
    (docs/video.md, "AVI and packed B-frames"). Only a stream that may reorder, and whose
    timestamps are guessed (AVI) or never go back, needs this decode."""
    guessed = container.format.name == "avi"
    if not stream.codec_context.has_b_frames or (
            not guessed and bool(np.any(np.diff(pts) < 0))):
        return None
    container.seek(0, stream=stream)
    shown = [(frame.pts, _digest(frame)) for frame in container.decode(stream)
             if frame.pts is not None]
    if sorted(p for p, _ in shown) != sorted(pts):
        raise UnreadableVideo(f"{len(pts)} frames are stored but {len(shown)} decode")
    return shown


_VERIFY_SLACK = 16  # frames decoded past a GOP's length before its frames count as missing


def _seekable(container, stream, shown: list[tuple[int, bytes]],
              keyframes: np.ndarray) -> np.ndarray:
    """The keyframes a decode may start at: those where a seek lands and whose frames up to
    the next keyframe decode exactly as in the full decode `shown`.

    A packed keyframe packet also carries the B-frame shown before its I-frame; after a seek
    there that B-frame has no reference, the decoder drops it and the packed frames after it
    decode against a wrong state (other pixels, no error). Clips that start there are decoded
    from an earlier keyframe instead (`chute.fallbacks.decode_frames`, its `keyframes`)."""
    number = {p: k for k, (p, _) in enumerate(shown)}
    ok = [0]
    bounds = [*keyframes.tolist(), len(shown)]
    for key, stop in zip(bounds[:-1], bounds[1:], strict=True):
        if key == 0:
            continue
        container.seek(shown[key][0], stream=stream, backward=True, any_frame=False)
        packets = container.demux(stream)
        head = next(packets, None)
        if head is None or not head.is_keyframe or number.get(head.pts) != key:
            continue
        want = {shown[k][0]: shown[k][1] for k in range(key, stop)}
        budget = stop - key + _VERIFY_SLACK
        for frame in _decoded(head, packets):
            budget -= 1
            if frame.pts in want:
                if _digest(frame) != want.pop(frame.pts):
                    break
            if not want or budget <= 0:
                break
        if not want:
            ok.append(key)
    return np.asarray(ok, np.int64)


def _decoded(head, packets):
    """Frames of the packet `head`, then of `packets` (the last flushes the decoder)."""
    yield from head.decode()
    for packet in packets:
        yield from packet.decode()


def probe_video(data: bytes) -> VideoInfo:
    """Probe a container held in memory; UnreadableVideo when it has no decodable video."""
    av = import_av()
    try:
        container = av.open(io.BytesIO(data))
    except (av.error.FFmpegError, ValueError) as exc:
        # FFmpeg's words: str() adds the errno and the in-memory buffer's name ('<none>')
        detail = getattr(exc, "strerror", None) or str(exc)
        raise UnreadableVideo(f"not a readable container ({detail})") from None
    with container:
        if not container.streams.video:
            raise UnreadableVideo("has no video stream (audio only?)")
        stream = container.streams.video[0]
        if stream.codec_context is None:  # a codec id FFmpeg has no decoder for
            raise UnreadableVideo("its video stream's codec has no decoder (unknown or "
                                  "corrupt codec id)")
        pts, keys, starts_with_key, stored, end = [], [], None, 0, None
        try:
            for packet in container.demux(stream):
                if packet.pts is not None and packet.size:
                    if packet.is_corrupt:
                        raise UnreadableVideo(f"frame {stored} is cut short or corrupt "
                                              "(truncated?)")
                    stored += 1
                    end = max(end or packet.pts, packet.pts + (packet.duration or 0))
                    if starts_with_key is None:
                        starts_with_key = packet.is_keyframe
                    if packet.is_discard:
                        # Before the start of an MP4 edit list (a cut stream): decoded as a
                        # reference for what follows, never shown, so not a frame.
                        continue
                    pts.append(packet.pts)
                    keys.append(packet.is_keyframe)
        except av.error.FFmpegError as exc:
            raise UnreadableVideo(f"cannot be demuxed ({exc})") from None
        if not pts:
            raise UnreadableVideo("has no video frames")
        assert end is not None  # set with the first packet of `pts`
        try:
            shown = _decode_all(container, stream, pts)
        except av.error.FFmpegError as exc:
            raise UnreadableVideo(f"frames do not decode ({exc})") from None
        if shown is None:
            order = np.argsort(np.asarray(pts, np.int64), kind="stable")
        else:  # each shown timestamp's packet
            where = {p: k for k, p in enumerate(pts)}
            order = np.asarray([where[p] for p, _ in shown], np.int64)
        pts_sorted = np.asarray(pts, np.int64)[order]
        keyframes = np.flatnonzero(np.asarray(keys, bool)[order]).astype(np.int64)
        if shown is not None:
            try:
                keyframes = _seekable(container, stream, shown, keyframes)
            except av.error.FFmpegError as exc:
                raise UnreadableVideo(f"frames do not decode after a seek ({exc})") from None
        if not starts_with_key:
            raise UnreadableVideo("does not start with a keyframe (truncated or cut?)")
        time_base = float(stream.time_base)
        missing = _truncation(stream, stored, end * time_base)
        if missing:
            raise UnreadableVideo(f"is truncated: {missing}")
        container.seek(0, stream=stream)
        try:
            rotation = _rotation(container, stream)
        except av.error.FFmpegError as exc:
            raise UnreadableVideo(f"first frame does not decode ({exc})") from None
        height, width = stream.codec_context.height, stream.codec_context.width
        if rotation in (90, 270):
            height, width = width, height
        fps = _frame_rate(pts_sorted, time_base, stream.average_rate or stream.guessed_rate)
        duration = len(pts_sorted) / fps if fps else 0.0
        return VideoInfo(len(pts_sorted), fps, int(height), int(width), float(duration), rotation,
                         pts_sorted, time_base, keyframes)
