"""Test videos made at test time with PyAV: frame k is a flat grey of level `level(k)` with a
bright bar whose position also encodes k, so a decoded frame tells which frame it is."""

from __future__ import annotations

import io

import numpy as np


def level(k: int) -> int:
    return (17 + 23 * k) % 200 + 20


def frame_image(k: int, height: int, width: int, texture: bool = False) -> np.ndarray:
    img = np.full((height, width, 3), level(k), np.uint8)
    img[: max(1, height // 8), :, 0] = 255  # a red top band: shows orientation
    if texture:  # a blue ramp across: shows where a crop was taken
        img[:, :, 2] = (np.arange(width) * 255 // max(width - 1, 1)).astype(np.uint8)
    return img


def make_video(n: int = 30, height: int = 48, width: int = 64, *, codec: str = "libx264",
               container: str = "mp4", fps: int = 25, gop: int = 10, bframes: int = 2,
               rotation: int = 0, texture: bool = False) -> bytes:
    import av

    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        stream.gop_size = gop
        if codec == "libx264":
            stream.options = {"bf": str(bframes), "crf": "10", "preset": "ultrafast"}
            stream.max_b_frames = bframes
        if rotation:
            stream.set_display_rotation(rotation)
        for k in range(n):
            frame = av.VideoFrame.from_ndarray(frame_image(k, height, width, texture),
                                             format="rgb24")
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def audio_only() -> bytes:
    import av

    out = io.BytesIO()
    with av.open(out, "w", format="mp4") as c:
        stream = c.add_stream("aac", rate=16000)
        for i in range(5):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                               layout="mono")
            frame.sample_rate = 16000
            frame.pts = i * 1024
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()
