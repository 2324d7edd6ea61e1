"""`chute.mix`: several datasets as one Pipeline source, interleaved by weight
(docs/mixing.md).

A mix is a dataset whose rows are its sources' rows back to back (row `offset[s] + i` is row i
of source s): producers read it as they read any dataset, and each batch carries the "source"
of every sample. Its `sampler` says which rows an epoch holds and in which order, as a pure
function of (seed, epoch): source s gets a fixed quota of the epoch's positions (its weight's
share, largest remainders), the positions are a keyed permutation of those quotas, and the k-th
draw of source s in the epoch is
- without replacement (the default): draw `epoch * quota + k` of an endless sequence of keyed
  permutations of the source (every row once before any row again, across epochs);
- with replacement: a keyed uniform row of the source.
Order, DDP partition, equal steps and exact (elastic) resume are then the Pipeline's own, for
`epoch_samples` positions per epoch. Crops and other random choices are keyed by the row, so a
row drawn twice in one epoch (with replacement, or a quota above the source's size) gets the
same choices both times.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chute.pipelines.producers._registry import family_of
from chute.pipelines.sampling._keyed_random import derive_key, random_u64
from chute.pipelines.sampling._order import EpochOrder
from chute.readers import DatasetProtocol

__all__ = ["mix", "MixedDataset", "MixRef", "MixSampler", "SOURCE_FIELD"]

SOURCE_FIELD = "source"  # the per-sample source index every batch of a mix carries
_LIST_KINDS = ("json", "bytes")  # kinds that may be optional: a missing value is None
_MAX_EPOCH_SAMPLES = 2**53  # quotas are computed in float64, exact up to here


def mix(sources: Mapping[str, Any], weights: Mapping[str, float] | None = None, *,
        epoch_samples: int | None = None, replacement: bool | Mapping[str, bool] = False,
        optional: Sequence[str] = ()) -> MixedDataset:
    """Several datasets as one Pipeline source, interleaved by weight:
    `Pipeline(chute.mix({"a": path_a, "b": path_b}, weights={"a": 0.7, "b": 0.3}), 256)`.

    Args:
        sources: name -> dataset (a folder, URL or open dataset); the batch's "source" holds
            each sample's index in this order.
        weights: name -> share of each epoch's samples (positive finite numbers, only their
            ratios count; default: each source's size, i.e. every row once per epoch).
        epoch_samples: samples per epoch, all sources together, a whole number (default:
            the most an epoch can take without repeating a row of any source:
            min(size / weight)).
        replacement: draw rows with replacement (per source with a mapping); without it a
            source's rows come in keyed permutations, each row once before any again.
        optional: fields (json or bytes) that some sources lack; their samples hold None.
    """
    return MixedDataset(sources, weights, epoch_samples, replacement, optional)


@dataclass(frozen=True)
class MixSampler:
    """Which rows of a mix an epoch holds, in which order (a frozen, picklable value).

    Attributes:
        sizes: rows of every source.
        quotas: positions of every source in each epoch (their sum is the epoch's length).
        replacement: per source, whether its draws are with replacement.
    """

    sizes: tuple[int, ...]
    quotas: tuple[int, ...]
    replacement: tuple[bool, ...]

    @property
    def count(self) -> int:
        """Samples (positions) of every epoch."""
        return sum(self.quotas)

    @property
    def rows(self) -> int:
        """Rows of the mix: sample ids lie in [0, rows)."""
        return sum(self.sizes)

    def order(self, seed: int, epoch: int, shuffle: bool = True) -> MixOrder:
        """Position -> row id of epoch `epoch`."""
        return MixOrder(self, int(seed), int(epoch), bool(shuffle))


@dataclass(frozen=True)
class MixOrder:
    """Positions of one epoch -> row ids of the mix (see the module docstring). Unshuffled, the
    positions are the sources' quotas in order, each source's draws in its own order."""

    sampler: MixSampler
    seed: int
    epoch: int
    shuffle: bool

    def __call__(self, positions) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        quotas = np.asarray(self.sampler.quotas, np.int64)
        starts = np.concatenate([[0], np.cumsum(quotas)])
        offsets = np.concatenate([[0], np.cumsum(self.sampler.sizes)])
        slots = pos
        if self.shuffle:
            slots = EpochOrder(int(starts[-1]), derive_key(self.seed, "mix") >> 1,
                               self.epoch)(pos)
        source = np.searchsorted(starts, slots, side="right") - 1
        draw = slots - starts[source]
        rows = np.empty(pos.shape, np.int64)
        for s, size in enumerate(self.sampler.sizes):
            chosen = source == s
            if not chosen.any():
                continue
            rows[chosen] = offsets[s] + self._local(s, size, int(quotas[s]), draw[chosen])
        return rows

    def _local(self, s: int, size: int, quota: int, draw: np.ndarray) -> np.ndarray:
        if self.sampler.replacement[s]:
            if not self.shuffle:
                return draw % size
            key = derive_key(self.seed, self.epoch, "mix", s)
            return (random_u64(key, draw.astype(np.uint64)) % np.uint64(size)).astype(np.int64)
        sequence = self.epoch * quota + draw  # this source's draws continue across epochs
        cycle, index = np.divmod(sequence, size)
        if not self.shuffle:
            return index
        local = np.empty_like(index)
        seed = derive_key(self.seed, "mix", s) >> 1
        for c in np.unique(cycle).tolist():
            here = cycle == c
            local[here] = EpochOrder(size, seed, int(c))(index[here])
        return local


@dataclass(frozen=True)
class MixRef:
    """A mix named across processes, as `DatasetRef` names one dataset.

    Attributes:
        names: the sources' names, in "source" index order.
        sources: their DatasetRef objects.
        weights: the `weights` given to `chute.mix`.
        epoch_samples: its `epoch_samples`.
        replacement: its `replacement`.
        optional: its `optional`.
        fingerprint: the mix's fingerprint when it was made.
    """

    names: tuple[str, ...]
    sources: tuple[Any, ...]
    weights: dict | None
    epoch_samples: int | None
    replacement: bool | dict
    optional: tuple[str, ...]
    fingerprint: str

    @property
    def url(self) -> str:
        return f"mix:{self.fingerprint}"

    def open(self) -> MixedDataset:
        from chute.errors import FormatError

        opened = MixedDataset(dict(zip(self.names, (r.open() for r in self.sources),
                                       strict=True)),
                              self.weights, self.epoch_samples, self.replacement, self.optional)
        if opened.fingerprint != self.fingerprint:
            raise FormatError(f"{self.url}: the mix changed since it was made (fingerprint "
                              f"{opened.fingerprint}); restart the job")
        return opened


class MixedDataset(DatasetProtocol):
    """The dataset `chute.mix` returns: its sources' rows back to back, read through the
    sources, with the `sampler` a Pipeline plans its epochs with.

    Attributes:
        names: the sources' names, in "source" index order.
        sources: the open datasets.
        sampler: the epochs' rows and order (`MixSampler`).
    """

    def __init__(self, sources, weights, epoch_samples, replacement, optional):
        from chute.readers import open_dataset

        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(f"chute.mix takes {{name: dataset}} with at least one source, got "
                            f"{type(sources).__name__}")
        self.names = tuple(str(n) for n in sources)
        self._own = [isinstance(s, (str, Path)) for s in sources.values()]
        self.sources = [open_dataset(s) if own else s
                        for s, own in zip(sources.values(), self._own, strict=True)]
        sizes = tuple(len(ds) for ds in self.sources)
        empty = [n for n, size in zip(self.names, sizes, strict=True) if size == 0]
        if empty:
            raise ValueError(f"chute.mix: source {empty[0]!r} holds no samples; leave it out")
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        shares = self._shares(weights, sizes)
        self.sampler = MixSampler(sizes, _quotas(shares, sizes, epoch_samples),
                                  self._replacement(replacement))
        self.optional = tuple(optional)
        self.fields, self.specs, self._missing = self._fields()
        self.path = Path("mix(" + ", ".join(f"{n}={ds.path}" for n, ds in
                                            zip(self.names, self.sources, strict=True)) + ")")
        parts = [*(f"{n}:{ds.fingerprint}" for n, ds in zip(self.names, self.sources,
                                                               strict=True)),
                 repr(self.sampler), repr(self.optional)]
        self.fingerprint = "mix-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]
        self.delivered_fields = (SOURCE_FIELD,)
        self._args = (weights, epoch_samples, replacement)  # for ref()

    def ref(self) -> MixRef:
        """The mix's identity for other processes (DALI workers): its sources' `DatasetRef`s
        and its arguments; `open()` there builds the same mix, or refuses a changed one."""
        from chute.readers import DatasetRef

        weights, epoch_samples, replacement = self._args
        return MixRef(self.names, tuple(DatasetRef.of(ds) for ds in self.sources),
                      None if weights is None else dict(weights), epoch_samples,
                      replacement if isinstance(replacement, bool) else dict(replacement),
                      self.optional, self.fingerprint)

    # -- construction -----------------------------------------------------------------------
    def _shares(self, weights, sizes) -> np.ndarray:
        if weights is None:
            return np.asarray(sizes, np.float64) / sum(sizes)
        if not isinstance(weights, Mapping) or set(weights) != set(self.names):
            raise ValueError(f"chute.mix: weights must name every source {list(self.names)} "
                             f"once, got {weights!r:.200}")
        values = np.array([_weight(weights[n]) for n in self.names])
        bad = [n for n, v in zip(self.names, values, strict=True) if not v > 0]
        if bad:
            raise ValueError(f"chute.mix: weights must be positive finite numbers, got "
                             f"{bad[0]}={weights[bad[0]]!r:.40}")
        values = values / values.max()  # two weights of 1e308 summed overflowed to inf
        return values / values.sum()

    def _replacement(self, replacement) -> tuple[bool, ...]:
        if isinstance(replacement, Mapping):
            unknown = sorted(set(replacement) - set(self.names))
            if unknown:
                raise ValueError(f"chute.mix: replacement names {unknown}, which are not "
                                 f"sources ({list(self.names)})")
            return tuple(bool(replacement.get(n, False)) for n in self.names)
        return (bool(replacement),) * len(self.names)

    def _fields(self) -> tuple[dict, dict, dict]:
        """Fields every source has (with one kind), plus the optional ones; {field: sources
        lacking it} for the others."""
        fields: dict[str, str] = {}
        specs: dict[str, dict] = {}
        missing: dict[str, list[str]] = {}
        for name in dict.fromkeys(f for ds in self.sources for f in ds.fields):
            lacking = [n for n, ds in zip(self.names, self.sources, strict=True)
                       if name not in ds.fields]
            having = [ds for ds in self.sources if name in ds.fields]
            kinds = {ds.fields[name] for ds in having}
            media = {ds.specs[name].get("media") for ds in having}
            if len(kinds) > 1 or len(media) > 1:
                raise ValueError(f"chute.mix: field {name!r} is of kinds {sorted(kinds)} in "
                                 "different sources; give it one kind in every source")
            if lacking and name not in self.optional:
                missing[name] = lacking
                continue
            if lacking and kinds.pop() not in _LIST_KINDS:
                raise ValueError(f"chute.mix: optional field {name!r} is missing from "
                                 f"{lacking}; only json and bytes fields may be optional "
                                 "(their missing values are None)")
            family = family_of(name, having[0].specs[name]) if lacking else None
            if family is not None and not family.missing_ok:  # nothing to decode: refused
                raise ValueError(f"chute.mix: optional field {name!r} is missing from "
                                 f"{lacking} and is decoded as {family.name}, which needs it "
                                 "in every source: datasets of different modalities (e.g. "
                                 "video with images) cannot be mixed; build one Pipeline per "
                                 "dataset")
            fields[name] = having[0].fields[name]
            specs[name] = having[0].specs[name]
        unknown = sorted(set(self.optional) - set(fields) - set(missing))
        if unknown:
            raise ValueError(f"chute.mix: optional names {unknown}, which no source has")
        if SOURCE_FIELD in fields:
            raise ValueError(f"chute.mix: a source has a field named {SOURCE_FIELD!r}, the "
                             "name of the mix's source index; rename that field")
        fields[SOURCE_FIELD] = "scalar"
        specs[SOURCE_FIELD] = {"kind": "scalar", "dtype": "<i8"}
        return fields, specs, missing

    def why_missing(self, name: str) -> str | None:
        """Why `name` is not a field of the mix, when some source has it."""
        if name not in self._missing:
            return None
        having = next(ds for ds in self.sources if name in ds.fields)
        kind = having.fields[name]
        if kind not in _LIST_KINDS or not family_of(name, having.specs[name]).missing_ok:
            # optional would be refused next: say so now
            return (f"field {name!r} ({kind}) is missing from source(s) {self._missing[name]} "
                    "of the mix and cannot be optional (only stored json and bytes fields "
                    "can): a mix delivers it only when every source has it, so datasets of "
                    "different modalities (e.g. video with images) cannot be mixed; build one "
                    "Pipeline per dataset, or leave it out of fields=")
        return (f"field {name!r} is missing from source(s) {self._missing[name]} of the mix; "
                f"declare it chute.mix(..., optional=[{name!r}]) or leave it out of fields=")

    # -- the dataset protocol ---------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"mix:{self.fingerprint}"

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def split(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(source index, row in that source) of mix rows `ids`."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"rows of {self.path} lie in [0, {len(self)}), got "
                             f"{int(ids.min())}..{int(ids.max())}")
        source = np.searchsorted(self._offsets, ids, side="right") - 1
        return source, ids - self._offsets[source]

    def _groups(self, ids):
        source, local = self.split(ids)
        for s in np.unique(source).tolist():
            rows = np.flatnonzero(source == s)
            yield s, rows, local[rows]

    def locate(self, i: int) -> tuple[str, int]:
        (s,), (local,) = self.split([i])
        shard, at = self.sources[s].locate(int(local))
        return f"{self.names[s]}:{shard}", at

    def __getitem__(self, i: int) -> dict:
        (s,), (local,) = self.split([i])
        return {**self.sources[s][int(local)], SOURCE_FIELD: int(s)}

    def column(self, name: str) -> np.ndarray:
        if name == SOURCE_FIELD:
            return np.repeat(np.arange(len(self.sources)), self.sampler.sizes).astype(np.int64)
        self._check(name)
        return np.concatenate([np.asarray(ds.column(name)) for ds in self.sources])

    def _check(self, name: str) -> None:
        if name not in self.fields:
            raise KeyError(self.why_missing(name) or f"{self.path} has no field {name!r}")

    def reader(self, field: str) -> _MixReader:
        self._check(field)
        readers = [ds.reader(field) if field in ds.fields else None for ds in self.sources]
        return _MixReader(self, field, readers)

    def read(self, field: str, ids, out: Any = None) -> Any:
        return self.reader(field).read(np.asarray(ids, np.int64), out)

    def views(self, ids, field: str = "image") -> list[np.ndarray]:
        """Zero-copy uint8 views of the payloads of `ids`, read source by source."""
        return self.read(field, ids)

    def gather(self, ids, field: str = "image", out: np.ndarray | None = None):
        """Payloads of `ids` back to back (data, offsets), gathered source by source."""
        self._check(field)
        ids = np.asarray(ids, np.int64).reshape(-1)
        pieces: list = [None] * len(ids)
        for s, rows, local in self._groups(ids):
            data, offsets = self.sources[s].gather(local, field)
            for k, row in enumerate(rows.tolist()):
                pieces[row] = data[offsets[k]:offsets[k + 1]]
        lengths = np.array([len(p) for p in pieces], np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        total = int(offsets[-1])
        buffer = out[:total] if out is not None and out.ndim == 1 and len(out) >= total \
            else np.empty(total, np.uint8)
        for k, piece in enumerate(pieces):
            buffer[offsets[k]:offsets[k + 1]] = piece
        return buffer, offsets

    def close(self) -> None:
        """Close the sources this mix opened (from paths)."""
        for ds, own in zip(self.sources, self._own, strict=True):
            if own:  # opened by open_dataset here, so it has close()
                ds.close()


class _MixReader:
    """One field read through every source: rows grouped by source, read there, put back."""

    def __init__(self, mixed: MixedDataset, field: str, readers: list):
        self.mixed, self.field, self.readers = mixed, field, readers
        present = [r for r in readers if r is not None]
        shapes = {_shape_of(r) for r in present}
        dtypes = {str(r.dtype) for r in present}
        ragged = {r.lengths(np.empty(0, np.int64)) is not None for r in present
                  if hasattr(r, "lengths")}
        if len(shapes) > 1 and not ragged == {True}:
            raise ValueError(f"chute.mix: field {field!r} has shapes {sorted(shapes, key=str)} "
                             "in different sources; one Pipeline field needs one shape")
        if len(dtypes) > 1:
            raise ValueError(f"chute.mix: field {field!r} has dtypes {sorted(dtypes)} in "
                             "different sources; store it with one dtype")
        first = present[0]
        self.dtype = first.dtype
        self.sample_shape = first.sample_shape
        if ragged == {True} and self.sample_shape is not None:
            # ragged along the first axis: the longest source's shape sizes the slots
            self.sample_shape = max((tuple(r.sample_shape) for r in present),
                                    key=lambda s: s[0])

    def read(self, ids: np.ndarray, out: Any = None, **kw) -> Any:
        ids = np.asarray(ids, np.int64)
        if self.sample_shape is None:  # a list of values
            values: list = [None] * len(ids)
            for s, rows, local in self.mixed._groups(ids):
                if self.readers[s] is None:
                    continue  # an optional field this source lacks: None
                got = self.readers[s].read(local)
                for k, row in enumerate(rows.tolist()):
                    values[row] = got[k]
            return values
        status = kw.get("status")
        if out is None:
            out = np.zeros((len(ids), *self.sample_shape), self.dtype)
        for s, rows, local in self.mixed._groups(ids):
            reader = self.readers[s]
            part = np.zeros((len(rows), *out.shape[1:]), out.dtype)
            if status is not None:
                sub = np.zeros(len(rows), np.uint8)
                reader.read(local, part, status=sub)
                status[rows] = sub
            else:
                reader.read(local, part)
            out[rows] = part
        return out

    def lengths(self, ids: np.ndarray) -> np.ndarray | None:
        ids = np.asarray(ids, np.int64)
        present = [r for r in self.readers if r is not None]
        if not hasattr(present[0], "lengths") or present[0].lengths(ids[:0]) is None:
            return None
        found = np.zeros(len(ids), np.int64)
        for s, rows, local in self.mixed._groups(ids):
            found[rows] = self.readers[s].lengths(local)
        return found

    def get(self, shard: int, local: int, global_id: int) -> Any:
        return self.mixed[global_id][self.field]


def _shape_of(reader) -> tuple | None:
    shape = getattr(reader, "sample_shape", None)
    return None if shape is None else tuple(shape)


def _weight(value: Any) -> float:
    """A weight as a float; NaN for what is not a number or overflows one (10**400)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _quotas(shares: np.ndarray, sizes: tuple[int, ...], epoch_samples) -> tuple[int, ...]:
    """Positions of every source in an epoch: largest remainders of share x epoch_samples."""
    if epoch_samples is None:
        with np.errstate(divide="ignore", over="ignore"):  # a share of 0: no limit from it
            epoch_samples = int(min(np.floor(np.asarray(sizes) / shares + 1e-9)))
    try:  # an integer of any kind; 1.5 became 1, NaN raised int()'s own error
        total = operator.index(epoch_samples)
    except TypeError:
        total = 0
    if isinstance(epoch_samples, bool) or not 1 <= total <= _MAX_EPOCH_SAMPLES:
        raise ValueError(f"chute.mix: epoch_samples must be a whole number from 1 to 2**53, "
                         f"got {epoch_samples!r:.40}")
    exact = shares * total
    quotas = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - quotas), kind="stable")
    quotas[order[:total - int(quotas.sum())]] += 1
    return tuple(int(q) for q in quotas)
