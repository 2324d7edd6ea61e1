"""Decoding the frames of a clip from container bytes with FFmpeg (PyAV), touching only the
span the clip needs: seek to the keyframe at or before its first frame, decode forward, keep
the wanted frames, stop after the last (docs/design.md, "Video clips")."""

from __future__ import annotations

import io

import numpy as np

from chute.errors import DecodeError

__all__ = ["decode_frames"]


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


def _display(frame, rotation: int, size, crop) -> np.ndarray:
    if size is None:
        rgb = frame.to_ndarray(format="rgb24")
    else:
        # FFmpeg's scaler converts and resizes in one pass (its bilinear filter widens with
        # the downscale factor, so it is antialiased); then only a crop is left.
        h, w = _fill_dims(frame.height, frame.width, rotation, size)
        rgb = frame.reformat(width=w, height=h, format="rgb24",
                             interpolation="BILINEAR").to_ndarray()
    if rotation:
        rgb = np.rot90(rgb, k=rotation // 90)
    if size is not None:
        fy, fx = crop if crop is not None else (None, None)
        top = _offset(rgb.shape[0] - size[0], fy)
        left = _offset(rgb.shape[1] - size[1], fx)
        rgb = rgb[top:top + size[0], left:left + size[1]]
    return rgb


def decode_frames(data, frame_pts: np.ndarray, indices: np.ndarray, rotation: int = 0,
                  size: tuple[int, int] | None = None,
                  crop: tuple[float, float] | None = None) -> np.ndarray:
    """Frames `indices` (frame numbers in presentation order; repeats allowed) of a video.

    Args:
        data: the container's bytes (bytes-like or a uint8 array).
        frame_pts: every frame's presentation timestamp, ascending (what `chute convert video`
            stores in the `pts` field).
        indices: frame numbers to return, in the order wanted.
        rotation: degrees counter-clockwise that display applies (0, 90, 180, 270).
        size: (H, W) to resize to fill (aspect ratio kept) and centre-crop to; None keeps the
            decoded size.
        crop: (vertical, horizontal) fractions in [0, 1) placing the crop at
            floor(fraction * (spare + 1)) pixels; None centres it.

    Returns:
        uint8 [len(indices), H, W, 3] RGB frames at display orientation.

    Raises:
        DecodeError: a wanted frame is missing or the stream is corrupt.
    """
    av = _av()
    indices = np.asarray(indices, dtype=np.int64)
    wanted = frame_pts[indices]
    targets = set(wanted.tolist())
    last = int(wanted.max())
    found: dict[int, np.ndarray] = {}
    if not isinstance(data, (bytes, bytearray)):
        data = memoryview(np.ascontiguousarray(data))
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.video[0]
            container.seek(int(wanted.min()), stream=stream, backward=True, any_frame=False)
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                if frame.pts in targets:
                    found[frame.pts] = _display(frame, rotation, size, crop)
                    if len(found) == len(targets):
                        break
                if frame.pts > last:
                    break
    except (av.error.FFmpegError, IndexError, ValueError) as exc:
        raise DecodeError(f"video does not decode ({exc})") from None
    if len(found) != len(targets):
        missing = sorted(targets - set(found))
        raise DecodeError(f"frames with pts {missing[:3]} are missing (truncated or corrupt "
                          "stream)")
    return np.stack([found[p] for p in wanted.tolist()])
