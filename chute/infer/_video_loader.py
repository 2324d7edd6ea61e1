"""The loader stage for video: a batch of sample ids -> their clips, decoded from the dataset's
shards by the `video` producer (span-only decoding; docs/design.md, "Video clips"), written
straight into shared memory so that handing them to the next stage copies nothing."""

from __future__ import annotations

import os

import numpy as np
import torch

from chute.errors import DecodeError
from chute.pipelines import BatchRequest, ProducerSpec, VideoProducer
from chute.readers import open_dataset

__all__ = ["VideoClipLoader"]


class VideoClipLoader:
    """Clips of the samples a batch names, centred in each video (evaluation clips).

    Args:
        dataset: a dataset made by `chute convert video` (path or open Dataset).
        field: its video field.
        num_frames: frames per clip.
        frame_interval: frames between two clip frames.
        size: (H, W) or S of the clip frames (resize to fill, centre crop).
        dtype: "float32" / "float16" (scaled to [-1, 1]) or "uint8".
        layout: "CTHW" ([3, T, H, W] per clip) or "TCHW".
        threads: decoding threads (samples of a batch decode in parallel).
        max_batch: the largest batch it is called with.

    Calling it with a list of sample ids returns one clip tensor per id; a clip that does not
    decode is a DecodeError in its place (that request fails, the others go on).
    """

    def __init__(self, dataset, field: str = "video", *, num_frames: int = 16,
                 frame_interval: int = 1, size=112, dtype: str = "float32",
                 layout: str = "CTHW", threads: int = 1, max_batch: int = 64):
        self.dataset = (open_dataset(dataset) if isinstance(dataset, (str, os.PathLike))
                        else dataset)
        options = {"num_frames": num_frames, "frame_interval": frame_interval, "size": size,
                   "dtype": dtype, "layout": layout, "threads": threads}
        spec = ProducerSpec("video", field, self.dataset, max_batch, options=options,
                            augment="eval")
        self.producer = VideoProducer(spec)
        self.sources = self.producer.param_sources()
        self.field = field

    def __call__(self, ids: list) -> list:
        wanted = np.asarray([int(i) for i in ids], dtype=np.int64)
        bad = (wanted < 0) | (wanted >= len(self.dataset))
        if bad.any():
            raise IndexError(f"sample ids {wanted[bad].tolist()} are out of range for "
                             f"{self.dataset.path} ({len(self.dataset)} samples)")
        params = {}
        for source in self.sources:
            params.update(source(0, 0, wanted))
        request = BatchRequest(-1, wanted, params)
        shapes = self.producer.shapes(request)
        outputs = self.producer.outputs()
        dtype = getattr(torch, str(outputs[self.field].dtype))
        # decoded in place into shared memory: the pipe carries only a handle
        batch = torch.empty(shapes[self.field], dtype=dtype).share_memory_()
        out = {k: np.empty(shapes[k], outputs[k].dtype) for k in shapes if k != self.field}
        status = self.producer.fill(request, {**out, self.field: batch.numpy()})
        return [DecodeError(f"sample {int(i)} of {self.dataset.path}: its clip does not decode")
                if status[k] else batch[k] for k, i in enumerate(wanted)]

    def close(self) -> None:
        self.producer.close()
