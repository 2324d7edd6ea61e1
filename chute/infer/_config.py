"""What an inference pipeline is made of: stages in order, each with its callable, replicas,
devices, dynamic batching and input queue (docs/design.md, "Inference pipelines"); loadable
from JSON (or YAML when PyYAML is installed)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chute import _device
from chute.errors import FormatError

__all__ = ["StageConfig", "InferConfig", "load_config", "max_replicas", "ALLOW_OUTSIDE_ENV",
           "MAX_REPLICAS_ENV"]

# A config is trusted code (docs/inference.md, "A config is code"): these two are the guards
# against its surprises, each with an explicit way past it.
ALLOW_OUTSIDE_ENV = "CHUTE_INFER_ALLOW_OUTSIDE"
MAX_REPLICAS_ENV = "CHUTE_INFER_MAX_REPLICAS"
# replica processes per usable CPU core a stage may ask for without MAX_REPLICAS_ENV
REPLICAS_PER_CPU = 4


def max_replicas() -> int:
    """The most replicas a config may have on this machine, per stage and in all its stages
    together: `REPLICAS_PER_CPU` per usable CPU core, or the `CHUTE_INFER_MAX_REPLICAS`
    environment variable when it is set."""
    raw = os.environ.get(MAX_REPLICAS_ENV)
    if raw is None or not raw.strip():
        return REPLICAS_PER_CPU * _device.usable_cpu_count()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise FormatError(f"{MAX_REPLICAS_ENV}={raw!r}: expected a positive integer (the most "
                          "replicas one inference stage may have)")
    return value


@dataclass
class StageConfig:
    """One stage of an inference pipeline.

    Attributes:
        name: the stage's name in reports.
        fn: "module:attr" or "file.py:attr" (a path relative to the config file's folder), or
            the object itself (picklable: it is sent to every replica). Without `options` the
            object is the stage: a `torch.nn.Module` (its forward runs on the stacked batch) or
            a callable taking a list of inputs and returning a list (or a tensor with a leading
            batch dimension) of outputs, where an item may be an Exception to fail only that
            request. With `options` it is a factory, called once in each replica as
            `fn(**options)` (plus `device=` and `dataset=` when it takes them), that returns the
            stage.
        options: keyword arguments of the factory, or None when `fn` is the stage itself.
        replicas: processes running this stage, at most `max_replicas()` (4 per usable CPU
            core unless CHUTE_INFER_MAX_REPLICAS says otherwise).
        devices: device per replica ("cpu", "cuda:N"), cycled when shorter than `replicas`.
        max_batch: the most requests one call takes.
        max_wait_ms: how long a replica that has one request waits for more before it runs a
            smaller batch.
        queue_size: bound of the stage's input queue (back-pressure; for the first stage, a
            request arriving when it is full is dropped).
        threads: torch intra-op threads in each replica (None: torch's default).
    """

    name: str
    fn: Any
    options: dict | None = None
    replicas: int = 1
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    max_batch: int = 1
    max_wait_ms: float = 0.0
    queue_size: int = 16
    threads: int | None = 1

    def __post_init__(self) -> None:
        if isinstance(self.devices, str):
            self.devices = [self.devices]
        problems = []
        if not isinstance(self.name, str) or not self.name:
            problems.append(f"a name (got {_shown(self.name)})")
        if not _count(self.replicas):
            problems.append(f"replicas an integer >= 1 (got {_shown(self.replicas)})")
        elif self.replicas > (cap := max_replicas()):
            problems.append(f"replicas <= {cap} (got {self.replicas}; the cap is "
                            f"{REPLICAS_PER_CPU} per CPU core of this machine: lower it, or set "
                            f"{MAX_REPLICAS_ENV}=N to allow N)")
        if not _count(self.max_batch):
            problems.append(f"max_batch an integer >= 1 (got {_shown(self.max_batch)})")
        if isinstance(self.max_wait_ms, bool) or not isinstance(self.max_wait_ms, (int, float)) \
                or not math.isfinite(self.max_wait_ms) or self.max_wait_ms < 0:
            problems.append(f"max_wait_ms a number >= 0 (got {_shown(self.max_wait_ms)})")
        if not _count(self.queue_size):
            problems.append(f"queue_size an integer >= 1 (got {_shown(self.queue_size)})")
        if not isinstance(self.devices, list) or not self.devices or \
                not all(isinstance(d, str) and d for d in self.devices):
            problems.append(f"devices a device name or a non-empty list of them (got "
                            f"{_shown(self.devices)})")
        if self.threads is not None and not _count(self.threads):
            problems.append(f"threads an integer >= 1 or null (got {_shown(self.threads)})")
        if self.options is not None and not isinstance(self.options, dict):
            problems.append(f"options an object of keyword arguments or null (got "
                            f"{_shown(self.options)})")
        if isinstance(self.fn, str):
            if ":" not in self.fn:
                problems.append(f"fn as 'module:attr' or 'file.py:attr' (got {_shown(self.fn)})")
        elif not callable(self.fn):
            problems.append(f"fn a 'module:attr' or 'file.py:attr' string or a callable (got "
                            f"{_shown(self.fn)})")
        if problems:
            raise FormatError(f"inference stage {_shown(self.name)} needs " + ", ".join(problems))

    def device(self, replica: int) -> str:
        """The device of replica `replica`."""
        return self.devices[replica % len(self.devices)]


@dataclass
class InferConfig:
    """An inference pipeline: stages in order (the output of one is the input of the next).

    Attributes:
        stages: the stages, first to last.
        dataset: the dataset path handed to factories that take `dataset=` (`chute
            infer-bench` sets it from its DATASET argument).
        base: folder that "file.py:attr" specs are relative to (the config file's folder).
    """

    stages: list[StageConfig]
    dataset: str | None = None
    base: str | None = None

    def __post_init__(self) -> None:
        self.stages = [s if isinstance(s, StageConfig) else StageConfig(**s)
                       for s in self.stages]
        if self.dataset is not None and not isinstance(self.dataset, str):
            raise FormatError(f"an inference config's dataset is a path (got "
                              f"{_shown(self.dataset)})")
        if not self.stages:
            raise FormatError("an inference config needs at least one stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise FormatError(f"inference stage names must be unique, got {names}")
        total = sum(s.replicas for s in self.stages)
        if total > (cap := max_replicas()):
            raise FormatError(f"the inference stages have {total} replicas in all, over this "
                              f"machine's cap of {cap} ({REPLICAS_PER_CPU} per CPU core): use "
                              f"fewer replicas or stages, or set {MAX_REPLICAS_ENV}=N to allow N")

    def stage(self, name: str) -> StageConfig:
        """The stage called `name`."""
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} (stages: {[s.name for s in self.stages]})")

    def replace(self, name: str, **changes) -> InferConfig:
        """A copy with stage `name` changed (e.g. `replicas=2, max_batch=4`)."""
        stages = [dataclasses.replace(s, **changes) if s.name == name else s
                  for s in self.stages]
        return dataclasses.replace(self, stages=stages)

    def to_dict(self) -> dict:
        """The config as JSON-ready data (callables given as objects appear as their repr)."""
        out = dataclasses.asdict(self)
        for stage in out["stages"]:
            if not isinstance(stage["fn"], str):
                stage["fn"] = repr(stage["fn"])
        return out


def _count(value: Any) -> bool:
    """An integer >= 1 (not a bool, which JSON's true would give)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _shown(value: Any) -> str:
    """A value as a short one-line repr for a message."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a huge integer"
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown(where: str, data: dict, known: set[str]) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise FormatError(f"{where}: unknown keys {extra} (known: {sorted(known)})")


def _allowed_outside(allow_outside: bool | None) -> bool:
    if allow_outside is not None:
        return allow_outside
    return os.environ.get(ALLOW_OUTSIDE_ENV, "").strip().lower() in ("1", "true", "yes")


def _check_inside(path: Path, k: int, stage: dict, base: Path) -> None:
    """Refuse a "file.py:attr" fn whose file (symlinks followed) is outside the config's
    folder: a config from elsewhere must not import a file it merely points at."""
    fn = stage.get("fn")
    if not isinstance(fn, str):
        return
    where = fn.rpartition(":")[0]
    if not where.endswith(".py"):
        return
    try:
        target = (base / where).resolve()  # an absolute `where` replaces base
    except (OSError, ValueError) as exc:  # a NUL byte, a symlink loop
        raise FormatError(f"{path}: stage {k} ({stage.get('name')!r}) fn {fn!r}: not a usable "
                          f"path ({exc})") from None
    if not target.is_relative_to(base):
        raise FormatError(
            f"{path}: stage {k} ({stage.get('name')!r}) fn {fn!r} names a file outside the "
            f"config's folder {base}; move the file next to the config, or allow it with "
            f"--allow-outside (chute infer-bench), {ALLOW_OUTSIDE_ENV}=1 or "
            "load_config(..., allow_outside=True)")


# the spellings of the video loader in a config: its `root` option is a folder
_VIDEO_LOADER_SPECS = ("chute.infer:VideoClipLoader", "chute.infer._video_loader:VideoClipLoader")


def _root_from_config(base: Path, stage: dict) -> dict:
    """`stage` with a VideoClipLoader's relative `root` option made relative to the config's
    folder `base`, as "file.py:attr" specs are: relative, it would otherwise be resolved
    against the working directory of each replica process. Absolute roots and other stages'
    options are kept as they are."""
    options = stage.get("options")
    if stage.get("fn") not in _VIDEO_LOADER_SPECS or not isinstance(options, dict):
        return stage
    root = options.get("root")
    if not isinstance(root, str) or Path(root).is_absolute():
        return stage
    return {**stage, "options": {**options, "root": str(base / root)}}


def load_config(path: str | Path, *, allow_outside: bool | None = None) -> InferConfig:
    """Read an inference config from a JSON file (or YAML, `.yaml`/`.yml`, with PyYAML).

    A config is trusted code: its stages import and run what they name (docs/inference.md,
    "A config is code").

    Args:
        path: the file: `{"stages": [{"name": ..., "fn": ..., ...}, ...], "dataset": ...}`.
        allow_outside: allow "file.py:attr" specs whose file is outside the config's folder
            (absolute paths, `..`, symlinks leading out). None: only when the environment
            variable CHUTE_INFER_ALLOW_OUTSIDE is 1.

    Returns:
        The config, with `base` set to the file's folder, and a relative `root` option of a
        `chute.infer:VideoClipLoader` stage made relative to that folder.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark is not the config's
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the inference config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise FormatError(f"{path}: reading YAML needs PyYAML (pip install pyyaml), or "
                              "write the config as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise FormatError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") \
                from None
        except (RecursionError, ValueError) as exc:  # nesting, 5,000-digit integers
            raise FormatError(f"{path}: not a usable YAML config ({type(exc).__name__}: "
                              f"{str(exc)[:120]})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{path}: not valid JSON ({exc})") from None
        except (RecursionError, ValueError) as exc:  # nesting, 5,000-digit integers
            raise FormatError(f"{path}: not a usable JSON config ({type(exc).__name__}: "
                              f"{str(exc)[:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise FormatError(f"{path}: an inference config is an object with a `stages` list")
    _unknown(str(path), data, {"stages", "dataset"})
    known = {f.name for f in dataclasses.fields(StageConfig)}
    base = path.parent.resolve()
    outside = _allowed_outside(allow_outside)
    stages = []
    for k, stage in enumerate(data["stages"]):
        if not isinstance(stage, dict):
            raise FormatError(f"{path}: stage {k} is not an object")
        _unknown(f"{path}: stage {k}", stage, known)
        if not outside:
            _check_inside(path, k, stage, base)
        stage = _root_from_config(base, stage)
        try:
            stages.append(StageConfig(**stage))
        except TypeError as exc:
            raise FormatError(f"{path}: stage {k}: {exc}") from None
        except FormatError as exc:
            raise FormatError(f"{path}: stage {k}: {exc}") from None
    try:
        return InferConfig(stages, dataset=data.get("dataset"), base=str(base))
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None
