"""The DALI graph of the `dali` video backend (DALI imported lazily; docs/design.md, "Video
clips").

Every input is fed per batch by the producer (`fn.external_source` without a source, then
`feed_input`): the container bytes, each clip's frame numbers (the ones the cpu backend takes
for the same (seed, epoch, id)), and, when resizing, each sample's fill size, crop anchor and
display rotation. Then:

    fn.decoders.video(frames=..., pad_mode="none")  device "cpu", or "mixed" (NVDEC) on a GPU
    fn.resize(size=fill, antialias=True, linear)      to fill the bucket, aspect kept
    fn.rotate(angle=rotation, NN, keep_size=False)    display orientation (only if any rotation)
    fn.slice(anchor, shape, axis_names="HW")          the centre (or keyed random) crop
    fn.crop_mirror_normalize(layout, dtype)           CFHW | FCHW; uint8, or (x - 127.5) / 127.5

`pad_mode="none"` makes a frame number past the end of the stream an error rather than a padded
frame: a clip is never filled with made-up pixels.
"""

from __future__ import annotations

import dataclasses

from chute.pipelines.producers._dali._graph import import_dali

__all__ = ["DaliVideoConfig", "build_video_pipeline", "VIDEO_INPUTS", "DECODABLE_CODECS"]

# What `fn.decoders.video` decodes in DALI 2.4, by decoder device (its documentation; checked
# here for the CPU: vp8, vp9 and mjpeg decode, h264 and mpeg4 are refused by name).
DECODABLE_CODECS = {
    "cpu": ("vp8", "vp9", "mjpeg"),
    "mixed": ("vp8", "vp9", "mjpeg", "av1", "mpeg4", "h264", "hevc"),
}

# external_source name -> (DALI type name, ndim per sample)
VIDEO_INPUTS = {
    "encoded": ("UINT8", 1),
    "frames": ("INT32", 1),
    "fill": ("FLOAT", 1),
    "angle": ("FLOAT", 0),
    "anchor": ("INT32", 1),
    "shape": ("INT32", 1),
}

_OUTPUT_LAYOUTS = {"CTHW": "CFHW", "TCHW": "FCHW"}
_DTYPES = {"uint8": "UINT8", "float16": "FLOAT16", "float32": "FLOAT"}


@dataclasses.dataclass(frozen=True)
class DaliVideoConfig:
    """What the video graph needs.

    batch_size: the largest batch fed; device_id: CUDA ordinal (decode on NVDEC) or None (DALI's
    CPU-only mode); resize: resize + crop to the fed sizes (False: native size); rotate: the
    dataset holds rotated videos; dtype: "uint8" | "float16" | "float32"; layout: "CTHW" |
    "TCHW"; num_threads: DALI's CPU threads (samples decode in parallel across them).
    """

    batch_size: int
    device_id: int | None = None
    resize: bool = True
    rotate: bool = False
    dtype: str = "uint8"
    layout: str = "CTHW"
    num_threads: int = 2

    @property
    def decoder_device(self) -> str:
        return "cpu" if self.device_id is None else "mixed"

    def inputs(self) -> tuple[str, ...]:
        """The external sources this graph is fed, in VIDEO_INPUTS order."""
        names = ["encoded", "frames"]
        if self.resize:
            names += ["fill", "anchor", "shape"]
        if self.rotate:
            names.append("angle")
        return tuple(n for n in VIDEO_INPUTS if n in names)


def build_video_pipeline(config: DaliVideoConfig):
    """A built DALI Pipeline with one output: the batch's clips in the final layout and dtype
    (dense: every clip of a batch has the same frame count and size)."""
    dali = import_dali()
    fn, types = dali.fn, dali.types

    @dali.pipeline_def(batch_size=config.batch_size, num_threads=config.num_threads,
                       device_id=config.device_id, prefetch_queue_depth=1)
    def graph():
        feed = {name: fn.external_source(name=name, dtype=getattr(types, VIDEO_INPUTS[name][0]),
                                         ndim=VIDEO_INPUTS[name][1])
                for name in config.inputs()}
        clips = fn.decoders.video(feed["encoded"], device=config.decoder_device,
                                  frames=feed["frames"], pad_mode="none")
        if config.resize:
            clips = fn.resize(clips, size=feed["fill"], antialias=True,
                              interp_type=types.INTERP_LINEAR)
        if config.rotate:
            # multiples of 90 degrees: nearest neighbour moves whole pixels, nothing blends
            clips = fn.rotate(clips, angle=feed["angle"], keep_size=False,
                              interp_type=types.INTERP_NN)
        if config.resize:
            clips = fn.slice(clips, feed["anchor"], feed["shape"], axis_names="HW")
        scale = [1.0] if config.dtype == "uint8" else [127.5]
        return fn.crop_mirror_normalize(
            clips, dtype=getattr(types, _DTYPES[config.dtype]),
            output_layout=_OUTPUT_LAYOUTS[config.layout],
            mean=[0.0] if config.dtype == "uint8" else scale, std=scale)

    pipe = graph()
    pipe.build()
    return pipe
