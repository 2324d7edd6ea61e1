"""Checks and conversions of the Pipeline's user-facing arguments, kept out of the Pipeline so
that it reads as the iteration logic it is: image size spellings, output dtypes, mean/std units,
backend option types and the memory a batch ring would take."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os

import numpy as np
import torch

__all__ = ["image_size_of", "dtype_name", "output_dtype", "field_cast", "mean_std_fractions",
           "check_backend_options", "check_ring_memory", "parse_flag", "FLAG_OPTIONS",
           "ring_memory_error", "suggest_options"]

# dtype the user asks for -> (dtype the producers write, torch dtype cast to on the device or None)
_DTYPES = {"uint8": ("uint8", None), "float16": ("float16", None),
           "float32": ("float32", None), "bfloat16": ("float32", torch.bfloat16)}
_TORCH_NAMES = {torch.uint8: "uint8", torch.float16: "float16", torch.float32: "float32",
                torch.bfloat16: "bfloat16"}
# What a stored numeric field may be cast to on the device (ArrayOptions(dtype=...)).
_FIELD_CASTS = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                "float32": torch.float32, "float64": torch.float64}
# backend options that are yes/no (None: the backend's default); strings are parsed strictly
FLAG_OPTIONS = frozenset({"dct_scaling", "roi_decode"})
_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}
_BOOLEAN_WORDS = _TRUE_WORDS | _FALSE_WORDS | {"none", ""}


def image_size_of(value) -> tuple[int, int]:
    """(H, W) from 224, (224, 320), "224" or "224x320".

    Args:
        value: the size (ImageOptions.size, `chute bench --image-size`).
    """
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").split("x")
        try:
            sizes = tuple(int(p) for p in parts)
        except ValueError:
            sizes = ()
        if len(sizes) not in (1, 2):
            raise ValueError(f"an image size must be S, (H, W) or 'HxW' (e.g. '224x320'), "
                             f"got {value!r}")
        value = sizes if len(sizes) == 2 else sizes[0]
    size = tuple(int(s) for s in (value if np.ndim(value) else (value, value)))
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"an image size must be S, (H, W) or 'HxW' with positive sizes, "
                         f"got {value!r}")
    return size


def dtype_name(dtype) -> str:
    """"uint8", "float16", "float32" or "bfloat16" for that name or torch dtype (what autotune
    decisions are keyed by).

    Args:
        dtype: a name or a torch dtype.
    """
    name = _TORCH_NAMES.get(dtype, dtype) if not isinstance(dtype, str) else dtype
    if name not in _DTYPES:
        raise ValueError(f"dtype must be uint8, float16, bfloat16 or float32, got {dtype!r}")
    return name


def output_dtype(dtype) -> tuple[str, torch.dtype | None]:
    """(dtype name the image producers write, torch dtype to cast to on the device or None).

    Args:
        dtype: "uint8", "float16", "float32", "bfloat16" or the torch dtype.
    """
    return _DTYPES[dtype_name(dtype)]


def field_cast(where: str, stored: np.dtype, requested) -> torch.dtype | None:
    """The torch dtype a stored array field is cast to on the device, or None (as stored).

    Args:
        where: how errors name the field (e.g. "field 'latent' of /data/x.chute").
        stored: the field's stored NumPy dtype.
        requested: the `dtype` field option: None, a name in float16/bfloat16/float32/float64
            or the torch dtype.
    """
    if requested is None:
        return None
    name = requested if isinstance(requested, str) else \
        next((k for k, v in _FIELD_CASTS.items() if v == requested), repr(requested))
    if name not in _FIELD_CASTS:
        raise ValueError(f"{where}: dtype {requested!r} is not a cast chute makes on the device; "
                         f"choose one of {sorted(_FIELD_CASTS)} or leave it out (as stored)")
    if np.dtype(stored).kind not in "biuf":
        raise ValueError(f"{where} is stored as {np.dtype(stored)}, which cannot be cast to "
                         f"{name}; leave its dtype option out")
    return _FIELD_CASTS[name]


def mean_std_fractions(mean, std) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """mean/std as fractions of 255. Values above 1 mean 0-255 units (FFCV's and DALI's
    convention, e.g. 123.675): then both must be in those units, and are divided by 255.

    Args:
        mean: 3 per-channel means, fractions (0.485) or 0-255 units (123.675).
        std: 3 per-channel stds, in the same units as mean.
    """
    mean_a = np.asarray(mean, dtype=np.float64).reshape(-1)
    std_a = np.asarray(std, dtype=np.float64).reshape(-1)
    if mean_a.shape != (3,) or std_a.shape != (3,) or not np.all(std_a > 0):
        raise ValueError(f"mean and std must be 3 values each with std > 0, got {mean}, {std}")
    if max(mean_a.max(), std_a.max()) <= 1:
        return tuple(mean_a.tolist()), tuple(std_a.tolist())
    if mean_a.max() <= 1 or std_a.min() <= 1:
        raise ValueError(
            f"mean={tuple(mean)} and std={tuple(std)} mix units: give both as fractions of 255 "
            "(ImageNet: mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)) or both in 0-255 "
            "units (mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))")
    return tuple((mean_a / 255).tolist()), tuple((std_a / 255).tolist())


def parse_flag(value, name: str) -> bool | None:
    """A yes/no option as a bool (None stays None: the default), parsed strictly: "no",
    "false", "off" and "0" are False (as Python values they would be truthy strings), and
    anything that is not clearly yes or no is an error.

    Args:
        value: True/False/None, 0/1, or a string true/false, yes/no, on/off, 1/0 (any case).
        name: the option's name, for the message.
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise ValueError(f"backend_options[{name!r}] = {value!r} is not a yes/no value; pass True "
                     "or False (strings 'true'/'false', 'yes'/'no', 'on'/'off', '1'/'0' work "
                     "too), or None for the default")


def check_backend_options(options: dict | None) -> dict:
    """A copy of `options` with its yes/no options (FLAG_OPTIONS) parsed strictly, refusing
    strings elsewhere where a flag or number is meant ("no" and "false" are truthy strings:
    passed through they would switch an option on).

    Args:
        options: the Pipeline's backend_options.
    """
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"backend_options must be a dict, got {type(options).__name__}")
    options = {k: parse_flag(v, k) if k in FLAG_OPTIONS else v for k, v in options.items()}
    for key, value in options.items():
        if isinstance(value, str) and value.strip().lower() in _BOOLEAN_WORDS:
            raise TypeError(
                f"backend_options[{key!r}] = {value!r} is a string; pass a Python value "
                "(True/False, a number or None), e.g. backend_options={" f"{key!r}: False}}")
    return options


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_ring_memory(slots: int, batch_size: int, outputs: dict,
                      where: str | os.PathLike[str]) -> None:
    """Raise before allocating when the batch ring could not fit in this machine's memory.

    Args:
        slots: batches allocated at once (prefetch + 2).
        batch_size: samples per batch.
        outputs: key -> Output (sample_shape, dtype) of every producer.
        where: the dataset, for the message.
    """
    limit = _physical_memory()
    if limit is not None and _ring_bytes(slots, batch_size, outputs)[1] > limit:
        raise ring_memory_error(slots, batch_size, outputs, where,
                                f"more than this machine's {limit / 2**30:.1f} GiB")


def _ring_bytes(slots: int, batch_size: int, outputs: dict) -> tuple[float, float]:
    """(bytes of one batch, bytes of the ring), as floats (sizes may exceed int64)."""
    per_batch = sum(float(np.prod(slot_shape(batch_size, o), dtype=np.float64))
                    * np.dtype(o.dtype).itemsize for o in outputs.values() if o.dtype is not None)
    return per_batch, slots * per_batch


def slot_shape(batch_size: int, output) -> tuple[int, ...]:
    """The shape a batch slot allocates for `output` (flat buffers: each batch views a prefix).

    Args:
        batch_size: the largest batch size.
        output: the key's Output; its `batch_elements`, when set, bounds the batch instead.
    """
    if output.batch_elements is not None:
        return (int(output.batch_elements),)
    return (batch_size, *output.sample_shape)


def ring_memory_error(slots: int, batch_size: int, outputs: dict,
                      where: str | os.PathLike[str], why: str) -> ValueError:
    """The error for a batch ring that does not fit: how much memory it would take and what to
    lower.

    Args:
        slots, batch_size, outputs, where: as for `check_ring_memory`.
        why: what it does not fit in (e.g. "the allocation failed").
    """
    per_batch, total = _ring_bytes(slots, batch_size, outputs)
    return ValueError(
        f"Pipeline on {where}: {slots} batches in flight of {per_batch / 2**30:.1f} GiB each "
        f"need {total / 2**30:.1f} GiB, {why}; lower batch_size, the fields' output size "
        "(ImageOptions or VideoOptions size=, the Buckets) or prefetch")


def suggest_options(cls):
    """Class decorator of an options dataclass: an unknown keyword raises a TypeError naming
    the closest option and every option (instead of dataclass' bare "unexpected keyword")."""
    init = cls.__init__
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{cls.__name__} has no option {unknown[0]!r}{hint} (its options: "
                            f"{', '.join(names)})")
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls

