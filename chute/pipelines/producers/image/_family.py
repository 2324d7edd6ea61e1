"""The image family: JPEG/PNG fields decoded, cropped, resized, flipped and normalised by the
producer that `ImageOptions.backend` names (or the autotuner chooses)."""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from chute.errors import FormatError
from chute.pipelines._common._options import (
    check_backend_options,
    dtype_name,
    image_size_of,
    mean_std_fractions,
    output_dtype,
)
from chute.pipelines.producers._contract import ImageSpec
from chute.pipelines.producers._family import Family, FieldBuild, FieldContext
from chute.pipelines.producers.image._crops import CropConfig
from chute.pipelines.producers.image._options import ImageOptions
from chute.pipelines.producers.image._views import View, expand_views, view_key

__all__ = ["FAMILY", "crop_config"]

log = logging.getLogger("chute")


def crop_config(crop: CropConfig | None, size, augment: str) -> CropConfig:
    """The crop config of a field: `crop` with the output size and the Pipeline's mode."""
    if crop is None:
        return CropConfig(image_size_of(224 if size is None else size), mode=augment)
    if not isinstance(crop, CropConfig):
        raise TypeError(f"crop must be a chute.CropConfig, got {type(crop).__name__}")
    found = crop.size
    if size is not None:
        found = image_size_of(size)
        if crop.size is not None and crop.size != found:
            raise ValueError(f"crop.size {crop.size} and the image size {found} disagree; give "
                             "the size once")
    return replace(crop, size=(224, 224) if found is None else found, mode=augment)


def _check_columns(field: str, dataset) -> None:
    missing = [c for c in ("height", "width") if c not in dataset.fields]
    why = dataset.why_missing(missing[0]) if missing else None
    if why:  # a mix: a source lacks the column (docs/mixing.md), not a conversion
        raise FormatError(f"field {field!r} of {dataset.path} holds images, whose crops need "
                          f"the {missing} column(s): {why}")
    if missing:  # the dataset is incomplete, not the call: a FormatError (a ValueError)
        raise FormatError(f"field {field!r} of {dataset.path} holds images but the dataset "
                          f"has no {missing} column(s), which crops are computed from; "
                          "convert it with `chute convert` or write it with "
                          "chute.convert.write_dataset (both store them), or give ShardWriter "
                          "int32 'height' and 'width' fields (docs/format.md)")


def _finish(channels_last: bool, cast: torch.dtype | None):
    if not channels_last and cast is None:
        return None

    def finish(image: torch.Tensor) -> torch.Tensor:
        if channels_last:
            image = image.permute(0, 3, 1, 2)  # NHWC storage seen as NCHW = channels_last
        if cast is not None:
            image = image.to(cast, memory_format=torch.preserve_format)
        return image

    return finish


def build(field: str, options: ImageOptions, ctx: FieldContext) -> FieldBuild:
    where = f"ImageOptions of field {field!r}"
    if options.layout not in ("NCHW", "NHWC"):
        raise ValueError(f"{where}: layout must be 'NCHW' or 'NHWC', got {options.layout!r}")
    if options.memory_format not in (torch.contiguous_format, torch.channels_last):
        raise ValueError(f"{where}: memory_format must be torch.contiguous_format or "
                         f"torch.channels_last, got {options.memory_format!r}")
    channels_last = options.memory_format == torch.channels_last
    if channels_last and options.layout != "NCHW":
        raise ValueError(f"{where}: memory_format=torch.channels_last applies to layout='NCHW'")
    produced, cast = output_dtype(options.dtype)
    mean, std = mean_std_fractions(options.mean, options.std)
    user = check_backend_options(dict(options.backend_options or {}))
    if options.views is not None:
        return _build_views(field, options, ctx, user, channels_last, produced, cast, mean, std)
    crop = crop_config(options.crop, options.size, ctx.augment)
    if options.eval_crop is not None:
        crop = replace(crop, eval_crop=options.eval_crop)
    _check_columns(field, ctx.dataset)
    decision = None
    if options.backend == "auto":
        from chute.pipelines.producers.image._auto import decide

        name, chosen, reason = decide(
            dataset=ctx.dataset, batch_size=ctx.batch_size, image_size=crop.size,
            augment=ctx.augment, dtype=dtype_name(options.dtype), device=ctx.device)
        log.info("backend='auto' chose %s %s: %s", name, chosen, reason)
        backend_options = {**chosen, **user}  # the user's options always win
        decision = {"backend": name, "options": backend_options, "reason": reason}
    else:
        name, backend_options = options.backend, user
        reason = f"backend={name!r} was requested"
    spec = ctx.spec(name, field, dict(backend_options), spec_type=ImageSpec, size=crop.size,
                    dtype=produced, layout="NHWC" if channels_last else options.layout,
                    mean=mean, std=std, crop=crop)
    return FieldBuild(spec, _finish(channels_last, cast),
                      decision or {"backend": name, "options": backend_options,
                                   "reason": reason})


# The backends that decode views (docs/views.md): the CPU decoder, and nvImageCodec or DALI's
# decoder with chute's views kernel (one launch for all views) on a GPU.
VIEW_BACKENDS = ("cpu", "nvimgcodec", "dali")


def _build_views(field: str, options: ImageOptions, ctx: FieldContext, user: dict,
                 channels_last: bool, produced: str, cast, mean, std) -> FieldBuild:
    """An image field delivering multi-crop views: one decode per sample, every view resampled
    from it (cpu, nvimgcodec or dali backend), delivered as a list of tensors in view order."""
    where = f"ImageOptions of field {field!r}"
    given = [k for k in ("size", "crop", "eval_crop") if getattr(options, k) is not None]
    if given:
        raise ValueError(f"{where}: views= gives every view its own size and crop; leave "
                         f"{given} unset (e.g. View(224, scale=(0.32, 1.0), count=2))")
    views: tuple[View, ...] = expand_views(options.views or (), where)
    if options.backend == "auto":
        from chute.pipelines.producers.image._auto import views_backend

        name, reason = views_backend(ctx.device)
        log.info("backend='auto' chose %s for views: %s", name, reason)
    elif options.backend in VIEW_BACKENDS:
        name, reason = options.backend, f"backend={options.backend!r} was requested"
    else:
        raise ValueError(f"{where}: backend={options.backend!r} does not decode views yet; "
                         f"use backend='cpu', 'nvimgcodec', 'dali' or 'auto' with views= "
                         "(docs/views.md)")
    _check_columns(field, ctx.dataset)
    crops = tuple(view.crop(ctx.augment) for view in views)
    spec = ctx.spec(name, field, dict(user), spec_type=ImageSpec, size=crops[0].size,
                    dtype=produced, layout="NHWC" if channels_last else options.layout,
                    mean=mean, std=std, crop=crops[0], views=crops)
    each = _finish(channels_last, cast)

    def finish(images: list) -> list:
        out = []
        for image, view in zip(images, views, strict=True):
            if each is not None:
                image = each(image)
            if view.transform is not None:
                image = view.transform(image)
            out.append(image)
        return out

    return FieldBuild(spec, finish, {"backend": name, "options": dict(user), "reason": reason},
                      parts=tuple(view_key(field, v) for v in range(len(views))))


FAMILY = Family("image", ImageOptions, build, reports_backend=True, decoder_status=True)
