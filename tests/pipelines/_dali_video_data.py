"""Video datasets in the codecs DALI's CPU-mode video decoder reads (VP9, VP8, MJPEG) plus one
it does not (H.264), made at test time: smooth natural-like frames (`natural_image`) of mixed
sizes (odd ones too), one rotated video and lengths shorter than some clips."""

from __future__ import annotations

from pathlib import Path

from tests._video_media import convert_videos, make_video

# codec -> container the CPU twin test uses
CPU_CODECS = {"libvpx-vp9": "webm", "libvpx": "webm", "mjpeg": "avi"}
FRAMES = [30, 12, 45, 20, 8, 33]  # video 4 is shorter than a 4-frame clip at stride 3
SIZES = [(48, 64), (48, 64), (33, 47), (64, 48), (48, 64), (40, 72)]
ROTATED = 3  # stored 64x48 at display orientation: coded 48x64 turned 90 degrees


def write_codec_videos(folder: Path, codec: str = "libvpx-vp9", frames=FRAMES,
                       corrupt: tuple[int, ...] = (), sizes=SIZES,
                       rotated: int | None = ROTATED) -> Path:
    """A converted dataset of len(frames) videos encoded with `codec`, video k of display size
    sizes[k % len(sizes)], turned 90 degrees when k % len(sizes) == rotated; payloads in
    `corrupt` have their middle zeroed in the shard (sizes unchanged)."""
    folder.mkdir(parents=True, exist_ok=True)
    container = CPU_CODECS.get(codec, "mp4")
    videos = []
    for k, n in enumerate(frames):
        h, w = sizes[k % len(sizes)]
        rotation = 90 if k % len(sizes) == rotated else 0
        if rotation:
            h, w = w, h
        if codec == "libx264":  # it encodes 4:2:0 at even sizes only
            h, w = h - h % 2, w - w % 2
        videos.append((f"v{k}.{container}", make_video(
            n=n, height=h, width=w, codec=codec, container=container, gop=6, rotation=rotation,
            natural=True)))
    return convert_videos(folder, videos, corrupt, shard_size="40KB")
