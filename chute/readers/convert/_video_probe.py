"""Probing a video container (PyAV, imported lazily): frame count, rate, display size, duration
and what seeking needs (every frame's timestamp in presentation order, keyframe indices).
Packets are demuxed, not decoded, except the first frame (its rotation), and every frame of a
stream whose timestamps may be in decode order (below)."""

from __future__ import annotations

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
    keyframes: np.ndarray  # int64 frame indices of keyframes


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


def _output_order(container, stream, pts: list[int]) -> list[int] | None:
    """The timestamps in the order the decoder shows the frames, when that is not ascending.

    A container without presentation timestamps (AVI) gives packets their decode order: with
    B-frames, frame k of the display is then not the k-th smallest timestamp. Only a stream
    that may reorder and whose timestamps never go back needs this decode."""
    if not stream.codec_context.has_b_frames or bool(np.any(np.diff(pts) < 0)):
        return None
    container.seek(0, stream=stream)
    shown = [frame.pts for frame in container.decode(stream) if frame.pts is not None]
    if sorted(shown) == shown:
        return None
    if sorted(shown) != sorted(pts):
        raise UnreadableVideo(f"{len(pts)} frames are stored but {len(shown)} decode")
    return shown


def probe_video(data: bytes) -> VideoInfo:
    """Probe a container held in memory; UnreadableVideo when it has no decodable video."""
    av = import_av()
    try:
        container = av.open(io.BytesIO(data))
    except (av.error.FFmpegError, ValueError) as exc:
        raise UnreadableVideo(f"not a readable container ({exc})") from None
    with container:
        if not container.streams.video:
            raise UnreadableVideo("has no video stream (audio only?)")
        stream = container.streams.video[0]
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
            shown = _output_order(container, stream, pts)
        except av.error.FFmpegError as exc:
            raise UnreadableVideo(f"frames do not decode ({exc})") from None
        if shown is None:
            order = np.argsort(np.asarray(pts, np.int64), kind="stable")
        else:  # each shown timestamp's packet
            where = {p: k for k, p in enumerate(pts)}
            order = np.asarray([where[p] for p in shown], np.int64)
        pts_sorted = np.asarray(pts, np.int64)[order]
        keyframes = np.flatnonzero(np.asarray(keys, bool)[order]).astype(np.int64)
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
