"""CUDA kernels (CUDA C in ``*.cu``, compiled with NVRTC and launched through CuPy at first use).

Importing this package never imports CuPy or touches CUDA; only launching a kernel does.
"""

from chute.kernels._launch import (
    kernel_source,
    resize_normalize,
    resize_normalize_views,
    stream_pointer,
)
from chute.kernels._plan import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    kernel_name,
    roi_windows,
    union_windows,
    views_kernel_name,
)

__all__ = [
    "resize_normalize",
    "resize_normalize_views",
    "kernel_source",
    "kernel_name",
    "views_kernel_name",
    "stream_pointer",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "roi_windows",
    "union_windows",
]
