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
               images=None, pts_ms=None, options: dict | None = None) -> bytes:
    """`n` frames of `frame_image` (or `natural_image` when `natural`; or the RGB `images`
    given, then `n`, `height` and `width` come from them) encoded with `codec` (libx264,
    libvpx-vp9, libvpx, mjpeg, mpeg4, mpeg2video) in `container`; `pts_ms` gives each frame's
    timestamp in milliseconds (a variable frame rate); `options` are more encoder options
    (FFmpeg's names, e.g. {"flags": "+qpel"})."""
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
        if options:
            stream.options = {**stream.options, **options}
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


_VOP = b"\x00\x00\x01\xb6"  # MPEG-4 Part 2 picture (VOP) start code
# User data that marks a packed bitstream ("p") as DivX 5 and Xvid write it; FFmpeg's decoder
# keys its packed B-frame handling on it.
_PACKED_USER_DATA = b"\x00\x00\x01\xb2DivX503b1393p"


def _vop_type(chunk: bytes) -> str:
    i = chunk.find(_VOP)
    return "IPBS"[chunk[i + 4] >> 6]


def _not_coded_vop(fps: int) -> bytes:
    """An empty ("not coded") P picture: the placeholder a packed stream stores where the
    anchor that travelled with the previous B-frame is shown."""
    increment = max(1, (fps - 1).bit_length())  # bits of vop_time_increment
    # coding type P, modulo_time_base 0, marker, time increment, marker, vop_coded = 0
    bits = "01" + "0" + "1" + "0" * increment + "1" + "0"
    bits += "0" + "1" * ((7 - len(bits)) % 8)  # stuffing to the byte boundary
    return _VOP + int(bits, 2).to_bytes(len(bits) // 8, "big")


def make_asp_avi(n: int = 164, height: int = 240, width: int = 320, *, bframes: int = 2,
                 gop: int = 300, packed: bool = False, fps: int = 25) -> bytes:
    """An MPEG-4 Part 2 Advanced Simple Profile AVI like the Xvid/DivX files of UCF-101 and
    HMDB: B-frames, quarter-pel motion, a long GOP (FFmpeg's scene-change keyframes off), and
    with `packed` the "packed bitstream" those encoders write: each P-frame shares its AVI
    chunk with the first B-frame shown before it, the other B-frames follow one per chunk, and
    an empty placeholder picture takes the P-frame's own slot, so chunk k is frame k shown
    (decoders that reorder show the same frames; timestamps libavformat guesses from each
    chunk's first picture come out of order)."""
    data = make_video(n, height, width, codec="mpeg4", container="avi", fps=fps, gop=gop,
                      bframes=bframes, natural=True,
                      options={"flags": "+qpel", "sc_threshold": "1000000000"})
    return pack_bframes(data, fps) if packed else data


def pack_bframes(data: bytes, fps: int = 25) -> bytes:
    """The MPEG-4 Part 2 AVI `data` (B-frames stored one per chunk in decode order, as FFmpeg
    writes them) remuxed, not re-encoded, as a packed bitstream (see `make_asp_avi`)."""
    import av

    with av.open(io.BytesIO(data)) as src:
        stream = src.streams.video[0]
        packets = [bytes(p) for p in src.demux(stream) if p.size]
        extradata = stream.codec_context.extradata or b""
        height, width = stream.codec_context.height, stream.codec_context.width
    chunks: list[bytes] = []
    k = 0
    while k < len(packets):
        anchor, k = packets[k], k + 1
        bs = []
        while k < len(packets) and _vop_type(packets[k]) == "B":
            bs.append(packets[k])
            k += 1
        if bs:
            chunks += [anchor + bs[0], *bs[1:], _not_coded_vop(fps)]
        else:
            chunks.append(anchor)
    out = io.BytesIO()
    with av.open(out, "w", format="avi") as dst:
        copy = dst.add_stream("mpeg4", rate=fps)
        copy.width, copy.height = width, height
        copy.time_base = Fraction(1, fps)
        copy.codec_context.extradata = extradata + _PACKED_USER_DATA
        for j, chunk in enumerate(chunks):
            if chunk.startswith(b"\x00\x00\x01\xb0"):  # headers repeated before a keyframe
                at = chunk.find(_VOP)
                chunk = chunk[:at] + _PACKED_USER_DATA + chunk[at:]
            packet = av.Packet(chunk)
            packet.pts = packet.dts = j
            packet.time_base = copy.time_base
            packet.is_keyframe = _vop_type(chunk) == "I"
            packet.stream = copy
            dst.mux(packet)
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

    from chute.convert._convert_video import convert_video_csv
    from chute.readers import open_dataset

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
