"""The `nvimgcodec` backend's decoder configuration: its backend options, checked when the
producer is built, and the nvImageCodec `Decoder` they describe (docs/images.md, "The
nvimgcodec decoder").

Options (`ImageOptions(backend_options=...)`):
- "decoders": decode workers K (batches in flight), each with its own Decoder and CUDA stream
  (default 2; 1..16).
- "gpu_backends": which GPU decoders nvImageCodec may use, in order: any of "hw" (the
  hardware JPEG engines), "cuda" (nvJPEG's CUDA decoder), "hybrid" (Huffman on the CPU, the
  rest on the GPU); default all three.
- "hw_load": the load hint of "hw" (the fraction of a batch offered to the hardware engines;
  default nvImageCodec's); the other GPU decoders take the rest.
- "preallocate": preallocate the hardware decoder for the batch size and the dataset's typical
  image size (default True).
- "cuda_streams": CUDA streams inside each Decoder (default nvImageCodec's).
- "num_cpu_threads": each Decoder's CPU threads (hybrid Huffman, CPU decodes; default 0 =
  nvImageCodec's: every core).
- "cpu_fallback": decode on the CPU what no GPU decoder takes (default False: such samples
  fail with a status naming this option and are replaced like any undecodable sample).
On the CPU twin (device "cpu") the Decoder is nvImageCodec's CPU-only one (the only set-up that
runs without CUDA); the GPU options are checked and passed in its options string all the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chute.pipelines._common._options import parse_flag
from chute.pipelines.producers._contract import check_options

__all__ = ["DecoderConfig", "NvImgCodecOptions", "decoder_config", "make_decoder",
           "cpu_only_decoder", "size_hint", "GPU_BACKENDS", "OPTIONS", "candidate_grid"]

GPU_BACKENDS = ("hw", "cuda", "hybrid")
OPTIONS = frozenset({"num_cpu_threads", "max_pixels", "roi_decode", "decoders", "gpu_backends",
                     "hw_load", "preallocate", "cuda_streams", "cpu_fallback"})
_MAX_DECODERS = 16


@dataclass(frozen=True)
class DecoderConfig:
    """What every decode worker's Decoder is built with."""

    decoders: int = 2
    gpu_backends: tuple[str, ...] = GPU_BACKENDS
    hw_load: float | None = None
    preallocate: bool = True
    cuda_streams: int | None = None
    num_cpu_threads: int = 0
    cpu_fallback: bool = False

    def options_string(self, batch_size: int, size_hint: tuple[int, int]) -> str:
        """nvImageCodec's `options=` for this configuration (docs/images.md)."""
        parts = []
        if self.cuda_streams is not None:
            parts.append(f":num_cuda_streams={self.cuda_streams}")
        if self.preallocate and "hw" in self.gpu_backends:
            height, width = size_hint
            parts += [f"nvjpeg_hw_decoder:preallocate_batch_size={batch_size}",
                      f"nvjpeg_hw_decoder:preallocate_width_hint={width}",
                      f"nvjpeg_hw_decoder:preallocate_height_hint={height}"]
        return " ".join(parts)

    def as_params(self) -> dict[str, Any]:
        """The options as backend_options (what a candidate stores)."""
        return {"decoders": self.decoders, "gpu_backends": list(self.gpu_backends),
                "hw_load": self.hw_load, "preallocate": self.preallocate,
                "cuda_streams": self.cuda_streams, "num_cpu_threads": self.num_cpu_threads,
                "cpu_fallback": self.cpu_fallback}


def _int_option(options: Mapping, name: str, low: int, high: int):
    value = options[name]
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
            low <= value <= high):
        raise ValueError(f"backend 'nvimgcodec': {name} must be a whole number from {low} to "
                         f"{high}, not {value!r}")
    return int(value)


# option -> (low, high) of the whole-number options
_INT_RANGES = {"decoders": (1, _MAX_DECODERS), "cuda_streams": (1, 64),
               "num_cpu_threads": (0, 4096)}


def decoder_config(options: Mapping[str, Any]) -> DecoderConfig:
    """The DecoderConfig of backend options `options` (raises ValueError, naming the option,
    for a value it cannot use); options left out keep DecoderConfig's defaults.

    Args:
        options: the backend options (unknown keys are checked by the producer).
    """
    given: dict[str, Any] = {}
    backends: Any = DecoderConfig.gpu_backends
    if "gpu_backends" in options:
        backends = options["gpu_backends"]
        if isinstance(backends, str):
            backends = [b.strip() for b in backends.split(",") if b.strip()]
        if not isinstance(backends, (list, tuple)) or not backends or any(
                b not in GPU_BACKENDS for b in backends) or len(set(backends)) != len(backends):
            raise ValueError(f"backend 'nvimgcodec': gpu_backends must be a non-empty list of "
                             f"distinct names from {list(GPU_BACKENDS)}, not {backends!r}")
        given["gpu_backends"] = tuple(backends)
    hw_load = options.get("hw_load")
    if hw_load is not None:
        if isinstance(hw_load, bool) or not isinstance(hw_load, (int, float, np.floating)) or \
                not math.isfinite(hw_load) or not 0.0 < float(hw_load) <= 1.0:
            raise ValueError(f"backend 'nvimgcodec': hw_load must be a fraction in (0, 1], not "
                             f"{hw_load!r}")
        if "hw" not in backends:
            raise ValueError("backend 'nvimgcodec': hw_load is the load hint of the 'hw' "
                             f"decoder, which gpu_backends={list(backends)} leaves out; add "
                             "'hw' or drop hw_load")
        given["hw_load"] = float(hw_load)
    for name in ("preallocate", "cpu_fallback"):
        flag = parse_flag(options.get(name), name)
        if flag is not None:  # None: the default
            given[name] = flag
    for name, (low, high) in _INT_RANGES.items():
        if name in options:
            given[name] = _int_option(options, name, low, high)
    return DecoderConfig(**given)


@dataclass(frozen=True)
class NvImgCodecOptions:
    """The `nvimgcodec` backend's `backend_options`, parsed once when the producer is built
    (its defaults are the only ones).

    Args:
        decoder: what every decode worker's Decoder is built with.
        roi_decode: "auto" (decode each crop's window where the GPU decodes windows right),
            True or False.
        max_pixels: the largest image decoded; None: CHUTE_MAX_IMAGE_PIXELS or Pillow's bound.
    """

    decoder: DecoderConfig = DecoderConfig()
    roi_decode: bool | str = "auto"
    max_pixels: int | None = None

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> NvImgCodecOptions:
        """The options of a `backend_options` dict; unknown ones, and values the backend
        cannot use, raise ValueError naming the option.

        Args:
            options: the backend options.
        """
        check_options("nvimgcodec", dict(options), OPTIONS)
        mine = {k: options[k] for k in ("roi_decode", "max_pixels") if k in options}
        made = cls(**mine)
        roi = made.roi_decode
        if not (roi is True or roi is False or roi == "auto"):
            raise ValueError(f"backend 'nvimgcodec': roi_decode must be 'auto' (the default), "
                             f"True or False, not {roi!r}; leave it out unless a GPU "
                             "decodes wrong windows")
        return replace(made, decoder=decoder_config(options))


def make_decoder(codec: Any, config: DecoderConfig, device_id: int | None, batch_size: int,
                 size_hint: tuple[int, int]) -> Any:
    """One nvImageCodec Decoder for a decode worker: the configured GPU backends on CUDA device
    `device_id`, or the CPU-only decoder (device_id None).

    Args:
        codec: the `nvidia.nvimgcodec` module.
        config: the backend's DecoderConfig.
        device_id: the CUDA device, or None for the CPU twin.
        batch_size: the largest batch (the hardware decoder's preallocation).
        size_hint: (height, width) the preallocation is sized for.
    """
    options = config.options_string(batch_size, size_hint)
    if device_id is None:
        return cpu_only_decoder(codec, config.num_cpu_threads, options)
    kinds = {"hw": codec.HW_GPU_ONLY, "cuda": codec.GPU_ONLY, "hybrid": codec.HYBRID_CPU_GPU}
    backends = [codec.Backend(kinds[name], load_hint=(config.hw_load if name == "hw" and
                                                      config.hw_load is not None else 1.0))
                for name in config.gpu_backends]
    return codec.Decoder(device_id=device_id, backends=backends,
                         max_num_cpu_threads=config.num_cpu_threads, options=options)


def cpu_only_decoder(codec: Any, threads: int, options: str = "") -> Any:
    """nvImageCodec's CPU-only Decoder (the twin's, and a GPU backend's `cpu_fallback`): the
    only set-up that works without CUDA (docs/images.md)."""
    return codec.Decoder(device_id=codec.NVIMGCODEC_DEVICE_CPU_ONLY,
                         backends=[codec.Backend(codec.CPU_ONLY)], max_num_cpu_threads=threads,
                         options=options)


def size_hint(sizes: np.ndarray) -> tuple[int, int]:
    """(height, width) that 90% of the dataset's images fit: what the hardware decoder is
    preallocated for (a larger image makes it grow, a smaller one wastes nothing)."""
    if len(sizes) == 0:
        return 512, 512
    h, w = np.percentile(np.asarray(sizes, dtype=np.float64), 90, axis=0)
    return int(h), int(w)


def candidate_grid() -> list[DecoderConfig]:
    """The configurations the autotuner measures for `nvimgcodec` on a GPU: decode workers
    1/2/4 with every GPU decoder, the hardware engines with a load hint of 0.65 (DALI's
    default), and the hardware engines or the CUDA decoder alone."""
    grid = [DecoderConfig(decoders=k) for k in (1, 2, 4)]
    grid += [DecoderConfig(decoders=2, hw_load=0.65),
             DecoderConfig(decoders=2, gpu_backends=("hw",)),
             DecoderConfig(decoders=2, gpu_backends=("cuda",))]
    return grid
