"""Getting DALI's outputs into the Pipeline's output buffer (numpy on the host, torch on a GPU).

- `write_native`: DALI already produced the final images (dense batch): copy them into `out`,
  on the caller's CUDA stream for GPU outputs (the DALI outputs are bound to that stream).
- `KernelWriter`: DALI produced variable-size decoded crops on the GPU: chute's fused kernel
  resizes/flips/normalizes them straight into `out`, on the caller's stream.
"""

from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["write_native", "KernelWriter"]


def write_native(images, out) -> None:
    """Copy a dense DALI TensorList (CPU or GPU) of final images into `out` (same shape)."""
    if hasattr(images, "as_array"):  # TensorListCPU: host output
        array = images.as_array()
        _check_shape(array.shape, out)
        np.copyto(_host_array(out), array, casting="no")
        return
    import torch

    dense = images.as_tensor()
    _check_shape(tuple(dense.shape()), out)
    if not out.is_contiguous():
        raise ValueError("the DALI backend writes into contiguous output slots only")
    stream = torch.cuda.current_stream(out.device)
    dense.copy_to_external(
        ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(stream.cuda_stream), non_blocking=True
    )


class KernelWriter:
    """Runs chute's fused CUDA kernel over DALI's decoded crops (one ROI per sample)."""

    def __init__(self, mean, std, layout: str):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.layout = layout
        self._held = None  # the previous batch's DALI crops, see write()

    def write(self, crops, boxes, flips, out) -> None:
        """crops: DALI's decoded windows; boxes: [B, 4] crop boxes inside each window (the ROI
        decode adds the resample's margin around the crop: `chute.kernels.roi_windows`)."""
        import torch

        from chute.kernels import resize_normalize

        samples = [crops[k] for k in range(len(crops))]
        stream = torch.cuda.current_stream(out.device)
        resize_normalize(
            samples, np.asarray(boxes, dtype=np.float32), np.asarray(flips, dtype=bool), out,
            layout=self.layout, mean=self.mean, std=self.std, stream=stream,
        )
        # DALI's output buffers are bound to `stream` (pipe.run(cuda_stream=...)), so their
        # release is ordered after the kernel; holding them one more batch costs one batch of
        # memory and keeps the kernel's inputs alive even if a DALI version released eagerly.
        self._held = crops

    def write_views(self, crops, boxes, flips, outs) -> None:
        """Multi-crop views (docs/views.md): every view of every decoded window in one launch.
        boxes: [B, V, 4] every view's box inside its sample's window; flips [B, V]; outs: the
        V output batches."""
        import torch

        from chute.kernels import resize_normalize_views

        samples = [crops[k] for k in range(len(crops))]
        stream = torch.cuda.current_stream(outs[0].device)
        resize_normalize_views(
            samples, np.asarray(boxes, dtype=np.float32), np.asarray(flips, dtype=bool), outs,
            layout=self.layout, mean=self.mean, std=self.std, stream=stream,
        )
        self._held = crops  # as in write()


def _host_array(out) -> np.ndarray:
    return out if isinstance(out, np.ndarray) else out.numpy()


def _check_shape(shape, out) -> None:
    if tuple(shape) != tuple(out.shape):
        raise ValueError(
            f"DALI produced a batch of shape {tuple(shape)} for an output slot of shape "
            f"{tuple(out.shape)} (a bug in the DALI graph)"
        )
