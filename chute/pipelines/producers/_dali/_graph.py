"""DALI pipeline graphs of the `dali` and `dali-native` backends (DALI imported lazily).

Both graphs share the reader: `fn.external_source` over a `DaliBatchSource`, then a ROI decode of
exactly each sample's crop window (`fn.decoders.image_slice`, on the GPU with device="mixed", on
the CPU with device="cpu"). Then:
- "kernel" (backend `dali`): the decoded crops are the output; chute's fused CUDA kernel resizes,
  flips, normalizes and lays them out afterwards.
- "native" (backend `dali-native`): `fn.resize(antialias=True, linear)` of the box inside the
  decoded window (its region of interest: a fractional box decodes the whole pixels holding it)
  to float (unrounded, as the shared resize definition asks) + `fn.crop_mirror_normalize`
  (mirror, mean/std, dtype, layout).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chute._normalization import IMAGENET_MEAN, IMAGENET_STD
from chute._output_types import check_layout, output_dtype
from chute.errors import BackendUnavailableError
from chute.pipelines.producers._dali._shm import check_shm

__all__ = ["DaliGraphConfig", "build_dali_pipeline", "decode_arguments", "import_dali"]

DALI_PACKAGE = "nvidia-dali-cuda120"


def import_dali():
    """`nvidia.dali`, or a BackendUnavailableError naming the package and the extra to install."""
    try:
        import nvidia.dali as dali
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.types  # noqa: F401
    except ImportError as err:
        raise BackendUnavailableError(
            f"the DALI backends need NVIDIA DALI (package {DALI_PACKAGE}), which cannot be "
            f"imported here ({err}). Install it with `pip install chute[dali]`, or use "
            "backend='cpu'."
        ) from err
    return dali


@dataclasses.dataclass(frozen=True)
class DaliGraphConfig:
    """What a DALI graph needs besides its source.

    variant: "kernel" (decode only; chute's CUDA kernel does the rest; with device_id None it
        decodes on the CPU, which the tests use) or "native" (DALI does all).
    device_id: CUDA device ordinal, or None for DALI's CPU-only mode (decode on the CPU).
    image_size: (H, W) of the output; dtype: "uint8" | "float16" | "float32";
    layout: "NCHW" | "NHWC"; mean/std: per channel, in [0, 1] units (scaled by 255 here).
    """

    variant: str
    batch_size: int
    image_size: tuple[int, int]
    device_id: int | None = None
    dtype: str = "float16"
    layout: str = "NCHW"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    num_threads: int = 2
    prefetch: int = 2
    hw_decoder_load: float = 0.65
    parallel: bool = False
    py_num_workers: int = 1
    py_start_method: str = "fork"
    bytes_per_sample_hint: int = 1 << 20
    enable_checkpointing: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.variant not in ("kernel", "native"):
            raise ValueError(f"variant must be 'kernel' or 'native', not {self.variant!r}")
        object.__setattr__(self, "dtype", output_dtype(self.dtype))
        check_layout(self.layout)


def decode_arguments(config: DaliGraphConfig, types) -> dict:
    """Keyword arguments of `fn.decoders.image_slice` for this graph.

    Both follow the CPU decoder (docs/design.md, "Resize definition"): EXIF orientation is
    ignored (crop windows come from the stored header size, which a rotation would swap), and
    the GPU decoder upsamples chroma "fancily" as libjpeg-turbo does (DALI's default is off).
    """
    args = dict(axis_names="HW", normalized_anchor=False, normalized_shape=False,
                output_type=types.RGB, adjust_orientation=False)
    if config.device_id is None:
        args.update(device="cpu")
    else:
        args.update(device="mixed", hw_decoder_load=config.hw_decoder_load,
                    jpeg_fancy_upsampling=True)
    return args


def _source_types(types, names) -> dict:
    """dtype and ndim of each external_source output `names`, per sample."""
    kinds = {"encoded": (types.UINT8, 1), "anchor": (types.FLOAT, 1), "shape": (types.FLOAT, 1),
             "roi_start": (types.FLOAT, 1), "roi_end": (types.FLOAT, 1),
             "flip": (types.INT32, 0), "index": (types.INT64, 0)}
    return dict(dtype=[kinds[name][0] for name in names],
                ndim=[kinds[name][1] for name in names])


def build_dali_pipeline(source: Any, config: DaliGraphConfig, checkpoint=None):
    """A built DALI Pipeline over `source`, a field's batch source (the image folder's
    `DaliBatchSource`: `staging`, `with_roi`, callable per batch); its outputs are ("images",
    "index") for the native variant and ("crops", "flip", "index") for the kernel variant
    (crops: uint8 HWC, one shape per sample)."""
    dali = import_dali()
    fn, types = dali.fn, dali.types
    no_copy = source.staging == "pinned" and not config.parallel
    if source.with_roi != (config.variant == "native"):
        raise ValueError("the dali-native graph needs a source with_roi=True, the kernel graph "
                         "one without (a bug in the backend)")

    @dali.pipeline_def(
        batch_size=config.batch_size,
        num_threads=config.num_threads,
        device_id=config.device_id,
        prefetch_queue_depth=config.prefetch,
        py_num_workers=config.py_num_workers,
        py_start_method=config.py_start_method,
        enable_checkpointing=config.enable_checkpointing,
        seed=config.seed,
    )
    def graph():
        source_args = dict(parallel=True) if config.parallel else dict(no_copy=no_copy)
        if config.parallel:
            source_args["bytes_per_sample_hint"] = config.bytes_per_sample_hint
        outputs = dict(zip(source.outputs, fn.external_source(
            source=source,
            num_outputs=len(source.outputs),
            batch=True,
            batch_info=True,
            **_source_types(types, source.outputs),
            **source_args,
        ), strict=True))
        encoded, anchor, shape = outputs["encoded"], outputs["anchor"], outputs["shape"]
        flip, index = outputs["flip"], outputs["index"]
        crops = fn.decoders.image_slice(encoded, anchor, shape,
                                        **decode_arguments(config, types))
        if config.variant == "kernel":
            # flip is returned (and unused: the kernel takes the plan's flips) so that every
            # source output is consumed, which keeps DALI from warning on each build.
            return crops, flip, index
        height, width = config.image_size
        resized = fn.resize(
            crops,
            resize_x=float(width),
            resize_y=float(height),
            roi_start=outputs["roi_start"],
            roi_end=outputs["roi_end"],
            roi_relative=False,
            antialias=True,
            interp_type=types.INTERP_LINEAR,
            dtype=types.FLOAT,
        )
        scale = 1.0 if config.dtype == "uint8" else 255.0
        images = fn.crop_mirror_normalize(
            resized,
            dtype=_DALI_DTYPES[config.dtype](types),
            output_layout="CHW" if config.layout == "NCHW" else "HWC",
            mean=[0.0] * 3 if config.dtype == "uint8" else [m * scale for m in config.mean],
            std=[1.0] * 3 if config.dtype == "uint8" else [s * scale for s in config.std],
            mirror=flip,
        )
        return images, index

    if config.parallel:
        check_shm(config)
    kwargs = {} if checkpoint is None else {"checkpoint": checkpoint}
    pipe = graph(**kwargs)
    if config.parallel:
        # Start the source workers before DALI itself creates a CUDA context in this process.
        pipe.start_py_workers()
    pipe.build()
    return pipe


_DALI_DTYPES = {
    "uint8": lambda types: types.UINT8,
    "float16": lambda types: types.FLOAT16,
    "float32": lambda types: types.FLOAT,
}
