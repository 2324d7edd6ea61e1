"""Test videos made at test time with PyAV: frame k is a flat grey of level `level(k)` with a
bright bar whose position also encodes k, so a decoded frame tells which frame it is."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np


def level(k: int) -> int:
    return (17 + 23 * k) % 200 + 20


def frame_image(k: int, height: int, width: int, texture: bool = False) -> np.ndarray:
    img = np.full((height, width, 3), level(k), np.uint8)
    img[: max(1, height // 8), :, 0] = 255  # a red top band: shows orientation
    if texture:  # a blue ramp across: shows where a crop was taken
        img[:, :, 2] = (np.arange(width) * 255 // max(width - 1, 1)).astype(np.uint8)
    return img


def natural_image(k: int, height: int, width: int) -> np.ndarray:
    """Frame k with smooth colour like camera footage (no one-pixel chroma edges, which
    decoders' chroma upsampling filters treat differently): green is `level(k)`, red and blue
    are slow waves that move with k."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.empty((height, width, 3), np.uint8)
    img[..., 0] = 128 + 80 * np.sin(x / 23 + y / 31 + k / 4)
    img[..., 1] = level(k)
    img[..., 2] = 128 + 80 * np.cos(y / 19 - x / 37 + k / 5)
    return img


def make_video(n: int = 30, height: int = 48, width: int = 64, *, codec: str = "libx264",
               container: str = "mp4", fps: int = 25, gop: int = 10, bframes: int = 2,
               rotation: int = 0, texture: bool = False, natural: bool = False,
               images=None, pts_ms=None) -> bytes:
    """`n` frames of `frame_image` (or `natural_image` when `natural`; or the RGB `images`
    given, then `n`, `height` and `width` come from them) encoded with `codec` (libx264,
    libvpx-vp9, libvpx, mjpeg, mpeg4, mpeg2video) in `container`; `pts_ms` gives each frame's
    timestamp in milliseconds (a variable frame rate)."""
    import av

    if images is not None:
        n, (height, width) = len(images), images[0].shape[:2]

    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=fps)
        stream.width, stream.height = width, height
        if pts_ms is not None:
            stream.time_base = stream.codec_context.time_base = Fraction(1, 1000)
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        stream.gop_size = gop
        if codec == "libx264":
            stream.options = {"bf": str(bframes), "crf": "10", "preset": "ultrafast"}
            stream.max_b_frames = bframes
        if codec in ("mpeg4", "mpeg2video"):
            stream.max_b_frames = bframes
        if codec.startswith("libvpx"):  # libvpx's default speed is minutes for real sizes
            stream.options = {"deadline": "realtime", "cpu-used": "8"}
        if rotation:
            stream.set_display_rotation(rotation)
        for k in range(n):
            if images is not None:
                image = images[k]
            else:
                image = natural_image(k, height, width) if natural else \
                    frame_image(k, height, width, texture)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = int(pts_ms[k]), Fraction(1, 1000)
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def full_decode(data: bytes) -> list[np.ndarray]:
    """Every frame the decoder shows, in order, as RGB (the reference a clip is held to)."""
    import av

    with av.open(io.BytesIO(data)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def cut_start(data: bytes, frames: int) -> bytes:
    """The MP4 `data` remuxed (not re-encoded) with its timestamps moved back by `frames`
    frames, so an edit list hides its first `frames` frames: what cutting a stream at a
    frame that is not a keyframe gives (the hidden frames are decoded, never shown)."""
    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as src, av.open(out, "w", format="mp4") as dst:
        stream = src.streams.video[0]
        copy = dst.add_stream_from_template(stream)
        shift = None
        for packet in src.demux(stream):
            if packet.dts is None:
                continue
            if shift is None:
                shift = round(frames / stream.average_rate / stream.time_base)
            packet.pts -= shift
            packet.dts -= shift
            packet.stream = copy
            dst.mux(packet)
    return out.getvalue()


def convert_videos(folder, videos, corrupt=(), shard_size: str = "20KB"):
    """Write `videos` ((file name, bytes) pairs) to `folder` with a CSV (text "clip k") and
    convert them to `folder / "ds"`; the payloads in `corrupt` get their middle zeroed in the
    shard (sizes unchanged: only `verify` would know). Returns the dataset path."""
    import csv

    from chute.readers import open_dataset
    from chute.readers.convert._convert_video import convert_video_csv

    for name, data in videos:
        (folder / name).write_bytes(data)
    with open(folder / "v.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "text"],
                                 *[[name, f"clip {k}"] for k, (name, _) in enumerate(videos)]])
    convert_video_csv(folder / "v.csv", folder / "ds", progress=False, shard_size=shard_size)
    records = open_dataset(folder / "ds").reader("video").records
    for k in corrupt:
        shard = int(records.shard_of(np.array([k]))[0])
        start, size = int(records.pointers[k]), int(records.lengths[k])
        with open(records.paths[shard], "r+b") as f:
            f.seek(start + size // 3)
            f.write(bytes(size // 2))
    return folder / "ds"


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
