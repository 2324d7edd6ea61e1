"""Turning a stage's `fn` into the batch function a replica calls: resolve "module:attr" or
"file.py:attr", call a factory with its options, wrap a torch.nn.Module."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chute.errors import FormatError

__all__ = ["resolve", "build_stage", "check_spec"]


def _split(spec: str, base: str | None) -> tuple[str, Path | None, str]:
    """(module name or file, the file's path or None for a module, attribute) of a spec."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise FormatError(f"stage fn {spec!r}: expected 'module:attr' or 'file.py:attr'")
    if not where.endswith(".py"):
        return where, None, attr
    path = Path(where)
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    if not path.is_file():
        raise FormatError(f"stage fn {spec!r}: no file {path}")
    return where, path, attr


def check_spec(spec: Any, base: str | None = None) -> None:
    """Refuse a spec that names no file or no importable module, without importing it (the
    parent checks this before it spawns a replica: a typo fails at once, not once per
    replica).

    Args:
        spec: the stage's `fn`.
        base: folder a relative "file.py" is looked up in.
    """
    if not isinstance(spec, str):
        return
    where, path, _ = _split(spec, base)
    if path is not None:
        return
    try:
        found = importlib.util.find_spec(where)  # imports the parent packages, not `where`
    except (ImportError, ValueError) as exc:
        raise FormatError(f"stage fn {spec!r}: cannot import {where} ({exc}); is it on "
                          "PYTHONPATH?") from None
    if found is None:
        raise FormatError(f"stage fn {spec!r}: no module named {where!r}; is it on "
                          "PYTHONPATH?")


def resolve(spec: Any, base: str | None = None) -> Any:
    """The object a spec names ("module:attr" or "file.py:attr"); any other object as is.

    Args:
        spec: the spec or the object.
        base: folder a relative "file.py" is looked up in (the config file's folder).
    """
    if not isinstance(spec, str):
        return spec
    where, path, attr = _split(spec, base)
    if path is not None:
        name = f"_chute_stage_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(name, path)
            assert loader_spec is not None and loader_spec.loader is not None  # a .py file
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise FormatError(f"stage fn {spec!r}: cannot import {where} ({exc}); is it on "
                              "PYTHONPATH?") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise FormatError(f"stage fn {spec!r}: {where} has no attribute {attr!r}") from None
    return obj


def _takes(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def build_stage(spec: Any, options: dict | None, *, base: str | None, device: str,
                dataset: str | None) -> Callable[[list], Any]:
    """The batch function of one replica.

    Args:
        spec: the stage's `fn` (see `StageConfig`).
        options: factory keyword arguments, or None when `spec` is the stage itself.
        base: folder for "file.py:attr" specs.
        device: this replica's device; passed to a factory that takes `device=`.
        dataset: the config's dataset; passed to a factory that takes `dataset=` unless its
            options give one.

    Returns:
        A callable taking a list of inputs and returning their outputs.
    """
    obj = resolve(spec, base)
    if options is not None:
        kwargs = dict(options)
        if _takes(obj, "device") and "device" not in kwargs:
            kwargs["device"] = device
        if _takes(obj, "dataset") and "dataset" not in kwargs and dataset is not None:
            kwargs["dataset"] = dataset
        obj = obj(**kwargs)
    import torch

    if isinstance(obj, torch.nn.Module):
        from chute.infer._module_runner import ModuleRunner

        return ModuleRunner(obj, device)
    if not callable(obj):
        raise FormatError(f"stage fn {spec!r} gives {type(obj).__name__}, which is neither a "
                          "torch.nn.Module nor callable")
    return obj
