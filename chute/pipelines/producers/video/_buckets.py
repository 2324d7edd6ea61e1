"""Buckets for variable-shape video batches (docs/design.md, "Buckets").

A bucket is (resolution, frame count, aspect ratio) with an output size (multiples of 16 whose
product fits the resolution's pixel budget) and a batch size. Each epoch, every sample goes to
the largest resolution that does not upscale it, the aspect ratio nearest its own, and the
largest frame count it has enough frames for, kept with that entry's probability (a keyed draw);
all of it is vectorised NumPy over the metadata columns, no decoding.

The schedule of an epoch is a pure function of (seed, epoch, world size): each bucket's samples
in a keyed order, cut into global batches of world_size x batch_size; each step draws one bucket
in proportion to its remaining samples with a keyed draw, so every rank computes the same
bucket for every step and takes its own disjoint slice of that step's global batch.

Elastic resume: each bucket's keyed order does not depend on the world size, and steps consume
each bucket's order from its front, so what an interrupted epoch has delivered is the first
`start[b]` samples of every bucket b. The schedule after a resume point re-cuts each bucket's
rest into global batches of the new world size: nothing delivered comes again, nothing is
skipped beyond the usual dropped leftovers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from chute.pipelines.sampling._keyed_random import derive_key, uniform

__all__ = ["Bucket", "BucketTable", "Schedule", "parse_buckets", "schedule", "bucket_orders",
           "RESOLUTIONS", "ASPECT_RATIOS", "EXCLUDED"]

# Pixel budgets of the usual resolution names (height x width at 16:9, or square).
RESOLUTIONS = {"144p": 144 * 256, "240p": 240 * 426, "256": 256 * 256, "360p": 360 * 640,
               "480p": 480 * 854, "512": 512 * 512, "720p": 720 * 1280, "1024": 1024 * 1024,
               "1080p": 1080 * 1920}
# Height / width ratios a resolution is offered at (portrait to wide).
ASPECT_RATIOS = (0.5625, 0.75, 1.0, 1.3333, 1.7778)
_STREAM_KEEP = 100
_HXW = re.compile(r"^(\d+)x(\d+)$")


@dataclass(frozen=True)
class Bucket:
    resolution: str
    num_frames: int
    keep: float
    batch_size: int
    size: tuple[int, int]  # (H, W) of the output
    ratio: float  # H / W this size stands for

    @property
    def name(self) -> str:
        """How errors and summaries name it: "240p/16f/0.5625 (240x416)"."""
        return (f"{self.resolution}/{self.num_frames}f/{self.ratio:.4g} "
                f"({self.size[0]}x{self.size[1]})")


# Why a sample is in no bucket (BucketTable.excluded): codes and their words.
EXCLUDED = {1: "smaller than every resolution's pixel budget (x tolerance)",
            2: "fewer frames than every frame count it is large enough for",
            3: "not kept (the entries it fits drew it out: keep probability < 1)"}


def _budget(name) -> int:
    """Pixels of a resolution key: a name ("240p", "256"), "HxW", or an integer N (an N x N
    budget, written 256 as well as "256")."""
    text = str(name)
    match = _HXW.match(text)
    if match:
        return int(match.group(1)) * int(match.group(2))
    if text in RESOLUTIONS:
        return RESOLUTIONS[text]
    if text.isdigit() and int(text) > 0:
        return int(text) ** 2
    raise ValueError(f"bucket resolution {name!r} is unknown; use one of "
                     f"{sorted(RESOLUTIONS)}, an integer N (N x N pixels) or 'HxW'")


def _ratio(key) -> float:
    """H / W of an aspect-ratio key: a number (H / W, as Open-Sora's "0.56") or "W:H" as
    people say it ("16:9" is wide: H / W = 0.5625)."""
    text = str(key)
    if ":" in text:
        w, _, h = text.partition(":")
        value = float(h) / float(w)
    else:
        value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError
    return value


def _size_for(budget: int, ratio: float) -> tuple[int, int]:
    """(H, W), multiples of 16, of about `budget` pixels with H / W about `ratio`."""
    h = max(16, int(math.sqrt(budget * ratio) // 16) * 16)
    w = max(16, int(math.sqrt(budget / ratio) // 16) * 16)
    return h, w


@dataclass(frozen=True)
class BucketTable:
    """The buckets of a config, resolutions from the largest pixel budget down."""

    buckets: tuple[Bucket, ...]
    frame_interval: int
    # a sample fits a resolution with at least `tolerance` x its pixel budget (1.0: never
    # upscaled; Open-Sora's 0.8 upscales slightly smaller videos into it)
    tolerance: float = 1.0
    spread: bool = False  # clips spread over the whole video (VideoOptions sampling="uniform")

    @property
    def max_batch_size(self) -> int:
        return max(b.batch_size for b in self.buckets)

    def max_batch_pixels(self) -> int:
        """The most frames x pixels one batch of any bucket holds (batch size x frames x H x W),
        far below max_batch_size x max_clip_shape when large batches go with small clips."""
        return max(b.batch_size * b.num_frames * b.size[0] * b.size[1] for b in self.buckets)

    def fit_hint(self, heights: np.ndarray, widths: np.ndarray) -> str:
        """What would let the largest video that fits no resolution into a bucket: the
        tolerance that fits it to the smallest resolution, and the largest known resolution
        it fills (for the "no batch" error; "" when every video is large enough)."""
        smallest = min({b.resolution for b in self.buckets}, key=_budget)
        floor = _budget(smallest) * self.tolerance
        pixels = np.asarray(heights, np.int64) * np.asarray(widths, np.int64)
        small = pixels < floor
        if not small.any():
            return ""
        k = int(np.flatnonzero(small)[np.argmax(pixels[small])])
        shape, share = f"{int(heights[k])}x{int(widths[k])}", pixels[k] / _budget(smallest)
        fits = [r for r, budget in RESOLUTIONS.items() if budget <= pixels[k]]
        named = (f", or add the resolution {max(fits, key=_budget)!r} (or {shape!r})" if fits
                 else f", or add the resolution {shape!r}")
        return (f"the largest video too small for every resolution, {shape}, holds "
                f"{share:.2f} x the pixels of the smallest, {smallest!r}: "
                f"Buckets(config, tolerance={math.floor(share * 100) / 100:.2f}) fits it"
                f"{named}")

    def max_clip_shape(self) -> tuple[int, int, int]:
        """The largest (T, H, W) any bucket delivers (what output slots must hold)."""
        t = max(b.num_frames for b in self.buckets)
        h = max(b.size[0] for b in self.buckets)
        w = max(b.size[1] for b in self.buckets)
        return t, h, w

    def assign(self, seed: int, epoch: int, heights: np.ndarray, widths: np.ndarray,
               frames: np.ndarray) -> np.ndarray:
        """Bucket index of every sample this epoch (-1: in no bucket this epoch)."""
        return self._assign(seed, epoch, heights, widths, frames)[0]

    def excluded(self, seed: int, epoch: int, heights: np.ndarray, widths: np.ndarray,
                 frames: np.ndarray) -> np.ndarray:
        """Why each sample is in no bucket this epoch: 0 (it is in one), else an EXCLUDED
        code."""
        chosen, large, long = self._assign(seed, epoch, heights, widths, frames)
        why = np.zeros(len(chosen), np.int64)
        why[chosen < 0] = 3
        why[(chosen < 0) & ~long] = 2
        why[(chosen < 0) & ~large] = 1
        return why

    def summary(self, seed: int, epoch: int, heights: np.ndarray, widths: np.ndarray,
                frames: np.ndarray) -> dict:
        """The epoch's bucket counts: {"samples": n, "buckets": {name: samples},
        "excluded": {reason: samples}, "examples": {reason: first sample ids}}."""
        chosen = self.assign(seed, epoch, heights, widths, frames)
        why = self.excluded(seed, epoch, heights, widths, frames)
        counts = np.bincount(chosen[chosen >= 0], minlength=len(self.buckets))
        return {"samples": int(len(chosen)),
                "buckets": {b.name: int(c) for b, c in zip(self.buckets, counts, strict=True)},
                "excluded": {EXCLUDED[k]: int((why == k).sum()) for k in EXCLUDED
                             if (why == k).any()},
                "examples": {EXCLUDED[k]: np.flatnonzero(why == k)[:3].tolist()
                             for k in EXCLUDED if (why == k).any()}}

    def _assign(self, seed, epoch, heights, widths, frames):
        """(chosen bucket or -1, large enough for some resolution, long enough for some entry
        it is large enough for)."""
        n = len(heights)
        ids = np.arange(n, dtype=np.uint64)
        pixels = heights.astype(np.int64) * widths.astype(np.int64)
        ratio = heights / np.maximum(widths, 1)
        chosen = np.full(n, -1, np.int64)
        key = derive_key(seed, epoch, "bucket")
        # Entries (resolution, frame count) from the most to the least demanding; a sample
        # takes the first it fits and whose keep draw passes.
        entries = sorted({(b.resolution, b.num_frames) for b in self.buckets},
                         key=lambda e: (-_budget(e[0]), -e[1]))
        large = np.zeros(n, bool)
        long = np.zeros(n, bool)
        for k, (res, t) in enumerate(entries):
            members = [j for j, b in enumerate(self.buckets)
                       if (b.resolution, b.num_frames) == (res, t)]
            span = (t - 1) * self.frame_interval + 1
            size_ok = pixels >= _budget(res) * self.tolerance
            large |= size_ok
            long |= size_ok & (frames >= span)
            fits = (chosen < 0) & size_ok & (frames >= span)
            # one keep draw per (sample, entry); entries split by aspect ratio draw per ratio
            ratios = np.array([self.buckets[j].ratio for j in members])
            nearest = np.abs(np.log(ratio[:, None]) - np.log(ratios[None, :])).argmin(1)
            keep = np.array([self.buckets[j].keep for j in members])[nearest]
            fits &= uniform(key, ids, _STREAM_KEEP + k) < keep
            if not fits.any():
                continue
            chosen[fits] = np.asarray(members)[nearest[fits]]
        return chosen, large, long


def _entry(res, t, entry) -> tuple[float, int]:
    try:
        keep, batch = float(entry[0]), int(entry[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise ValueError(f"bucket {res!r} frames {t!r}: need (keep probability, batch "
                         f"size), got {entry!r}") from None
    if not 0 <= keep <= 1 or batch < 1 or int(t) < 1:
        raise ValueError(f"bucket {res!r} frames {t!r}: keep must be in [0, 1], batch "
                         f"size and frame count >= 1, got {entry!r}")
    return keep, batch


def parse_buckets(config: dict, frame_interval: int = 1, tolerance: float = 1.0) -> BucketTable:
    """A BucketTable from {resolution: {num_frames: (keep probability, batch size)}}.

    Args:
        config: e.g. {"240p": {1: (1.0, 64), 16: (1.0, 8)}, "480p": {16: (0.5, 2)}};
            resolutions are names ("240p", "480p", ...), integers N (N x N pixels; 256 or
            "256") or "HxW" pixel budgets. An entry may instead be {aspect ratio: (keep,
            batch size)} to offer only those ratios, each with its own batch size: ratios
            are "W:H" ("16:9", "9:16", "1:1") or H / W numbers (0.5625).
        frame_interval: frames between the frames of a clip.
        tolerance: a sample fits a resolution with at least tolerance x its pixels (1.0:
            never upscaled; 0.8 as Open-Sora upscales slightly smaller videos).
    """
    if not isinstance(config, dict) or not config:
        raise ValueError("buckets must be a non-empty dict {resolution: {num_frames: "
                         "(keep probability, batch size)}}")
    if not 0 < tolerance <= 1:
        raise ValueError(f"bucket tolerance must be in (0, 1], got {tolerance!r}")
    buckets = []
    for res, per_frames in config.items():
        budget = _budget(res)
        if not isinstance(per_frames, dict):
            raise ValueError(f"bucket {res!r}: need {{num_frames: (keep probability, batch "
                             f"size)}}, got {per_frames!r}")
        for t, entry in per_frames.items():
            if isinstance(entry, dict):  # per aspect ratio
                if not entry:
                    raise ValueError(f"bucket {res!r} frames {t!r}: no aspect ratio given")
                for key, value in entry.items():
                    try:
                        ratio = _ratio(key)
                    except ValueError:
                        raise ValueError(f"bucket {res!r} frames {t!r}: aspect ratio {key!r} "
                                         "is neither 'W:H' (e.g. '16:9') nor a positive "
                                         "H / W number") from None
                    keep, batch = _entry(res, t, value)
                    buckets.append(Bucket(str(res), int(t), keep, batch,
                                          _size_for(budget, ratio), ratio))
                continue
            keep, batch = _entry(res, t, entry)
            for ratio in ASPECT_RATIOS:
                buckets.append(Bucket(str(res), int(t), keep, batch, _size_for(budget, ratio),
                                      ratio))
    if frame_interval < 1:
        raise ValueError(f"frame_interval must be >= 1, got {frame_interval}")
    return BucketTable(tuple(buckets), int(frame_interval), float(tolerance))


@dataclass(frozen=True)
class Schedule:
    """One epoch's global steps from a resume point: bucket, first offset into the bucket's
    order, and count."""

    order: dict  # bucket -> sample ids in keyed order
    steps: np.ndarray  # int64 [S, 3]: bucket, offset, global count


_SCHEDULES: dict = {}  # a few epochs' schedules per process (cheap to rebuild)


def schedule(table: BucketTable, seed: int, epoch: int, world_size: int, drop_last: bool,
             identity: str, heights: np.ndarray, widths: np.ndarray, frames: np.ndarray,
             start: tuple[int, ...] = ()) -> Schedule:
    """The epoch's steps after `start` (samples of each bucket already delivered, () at the
    epoch's start); `identity` (the dataset fingerprint) keys the per-process cache."""
    start = tuple(int(c) for c in start)
    key = (identity, table, seed, epoch, world_size, drop_last, start)
    found = _SCHEDULES.get(key)
    if found is None:
        if len(_SCHEDULES) >= 4:
            _SCHEDULES.pop(next(iter(_SCHEDULES)))
        found = _SCHEDULES[key] = _schedule(table, seed, epoch, world_size, drop_last,
                                            np.asarray(heights), np.asarray(widths),
                                            np.asarray(frames), start)
    return found


def bucket_orders(table: BucketTable, seed: int, epoch: int, heights: np.ndarray,
                  widths: np.ndarray, frames: np.ndarray) -> dict:
    """Each bucket's samples this epoch in their keyed order (bucket index -> ids); a pure
    function of (seed, epoch), so the samples a resume point has delivered -- the first
    `start[b]` of bucket b -- are the same whatever the world size."""
    chosen = table.assign(seed, epoch, heights, widths, frames)
    key = derive_key(seed, epoch, "bucket-order")
    order = {}
    for b in np.unique(chosen[chosen >= 0]).tolist():
        members = np.flatnonzero(chosen == b)
        order[b] = members[np.argsort(uniform(key, members.astype(np.uint64), b))]
    return order


def _schedule(table, seed, epoch, world_size, drop_last, h, w, f, start) -> Schedule:
    order = bucket_orders(table, seed, epoch, h, w, f)
    done = np.zeros(len(table.buckets), np.int64)
    if start:
        if len(start) != len(table.buckets):
            raise ValueError(f"a bucket resume state has {len(start)} counts but the bucket "
                             f"config has {len(table.buckets)} buckets; resume with the "
                             "Buckets config the state was saved with")
        done[:] = start
    sizes = np.array([len(order.get(b, ())) for b in range(len(table.buckets))])
    if (done < 0).any() or (done > sizes).any():
        raise ValueError(f"a bucket resume state counts {done.tolist()} delivered samples "
                         f"per bucket, but the buckets of epoch {epoch} hold "
                         f"{sizes.tolist()}; resume with the seed, dataset and Buckets config the "
                         "state was saved with")
    batches, short = [], []
    for b, members in order.items():
        first = int(done[b])
        step = table.buckets[b].batch_size * world_size
        full = (len(members) - first) // step
        batches += [(b, first + k * step, step) for k in range(full)]
        rest = len(members) - first - full * step
        if rest and not drop_last:
            short.append((b, first + full * step, rest))
    # Draw the step order: each step picks a bucket in proportion to its remaining samples.
    # The draw is keyed by the samples delivered before the step, so a schedule rebuilt at a
    # resume point with the same world size continues the interrupted one exactly.
    remaining: dict[int, list] = {}
    for b, offset, count in batches:
        remaining.setdefault(b, []).append((offset, count))
    left = {b: sum(c for _, c in v) for b, v in remaining.items()}
    draw_key = derive_key(seed, epoch, "bucket-steps")
    delivered = int(done.sum())
    steps = []
    for _ in range(len(batches)):
        names = sorted(b for b in left if left[b] > 0)
        weights = np.array([left[b] for b in names], dtype=np.float64)
        u = float(uniform(draw_key, np.array([delivered], np.uint64), 0)[0]) * weights.sum()
        b = names[min(int(np.searchsorted(np.cumsum(weights), u, side="right")),
                      len(names) - 1)]
        offset, count = remaining[b].pop(0)
        left[b] -= count
        delivered += count
        steps.append((b, offset, count))
    # Evaluation's short leftovers come last, largest first: a rank whose share of a short
    # step would be empty skips it, and with this order the steps it skips are the last ones,
    # so step k is the same bucket on every rank that has a step k.
    steps += sorted(short, key=lambda t: (-t[2], t[0]))
    return Schedule(order, np.asarray(steps, dtype=np.int64).reshape(-1, 3))
