"""`batching=Buckets(config)`: video batches of variable shape, the video family's batching
(docs/video.md, "Buckets"). Every rank's step k comes from one bucket (a clip resolution and
frame count) with the bucket's batch size; it implements the batching contract of
`sampling/_batching.py`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chute.pipelines.sampling._batching import BoundBatching, Plan, PlanContext, _ref

__all__ = ["Buckets", "BoundBuckets"]


@dataclass(frozen=True)
class Buckets:
    """Video batches of variable shape: every rank's step k comes from one bucket (a clip
    resolution and frame count), with the bucket's batch size.

    Args:
        config: {resolution: {num_frames: (keep probability, batch size)}}, e.g.
            {"240p": {16: (1.0, 8)}, "360p": {16: (0.5, 4)}}, 256 / "256" / "HxW"
            resolutions, or {num_frames: {aspect ratio: (keep, batch size)}} entries such as
            {"240p": {16: {"16:9": (1.0, 8), "9:16": (1.0, 8)}}} (docs/video.md).
        tolerance: a sample fits a resolution with at least tolerance x its pixel budget:
            1.0 never upscales; 0.8 (Open-Sora's) upscales slightly smaller videos.
    """

    config: dict
    tolerance: float = 1.0

    def __post_init__(self) -> None:
        # a config that cannot be read is refused where it is written (issue 38 item 13)
        from chute.pipelines.producers.video._buckets import parse_buckets

        try:
            parse_buckets(self.config, 1, self.tolerance)
        except (TypeError, ValueError) as err:
            raise ValueError(f"Buckets: {err}") from None

    def bind(self, fields: dict[str, tuple[str, Any]]) -> BoundBatching:
        from chute.pipelines.producers.video._buckets import parse_buckets

        videos = [f for f, (family, _) in fields.items() if family == "video"]
        if len(videos) != 1:
            raise ValueError(f"batching=Buckets(...) needs exactly one video field among "
                             f"fields={list(fields)} (found {videos})")
        options = fields[videos[0]][1]
        interval = int(getattr(options, "frame_interval", 1))
        table = parse_buckets(self.config, interval, self.tolerance)
        if getattr(options, "sampling", "window") == "uniform":
            table = replace(table, spread=True)
        return BoundBuckets(videos[0], table)

    def summary(self, dataset, *, frame_interval: int = 1, seed: int = 0,
                epoch: int = 0) -> dict:
        """How `dataset`'s videos fall into these buckets in epoch `epoch`, without a
        Pipeline (what `chute info DST --buckets CONFIG` prints): {"samples", "buckets":
        {bucket: samples}, "excluded": {reason: samples}, "examples": {reason: first ids}}.

        Args:
            dataset: an open video dataset (its height, width and num_frames columns).
            frame_interval: the video field's `VideoOptions.frame_interval`.
            seed: the Pipeline's seed (keep probabilities below 1 draw with it).
            epoch: the epoch.
        """
        from chute.pipelines.producers.video._buckets import parse_buckets

        table = parse_buckets(self.config, int(frame_interval), self.tolerance)
        return table.summary(seed, epoch, *_bucket_columns(dataset))


@dataclass(frozen=True)
class BoundBuckets:
    """`Buckets` bound to its video field (the table made with that field's frame interval).
    """

    field: str
    table: Any

    def slot_size(self, batch_size: int | None) -> int:
        if batch_size is not None:
            raise ValueError("batching=Buckets(...) takes each bucket's batch size from its "
                             f"config; pass batch_size=None (got {batch_size!r})")
        return int(self.table.max_batch_size)

    def field_options(self) -> dict[str, dict]:
        return {self.field: {"buckets": self.table}}

    def plan(self, context: PlanContext) -> Plan:
        from chute.pipelines.producers.video._bucket_plan import BucketPlan

        c = context
        if not c.shuffle:
            raise ValueError("batching=Buckets(...) draws each step's bucket at random; "
                             "order='sequential' is not available with it")
        ds = c.dataset
        offsets = tuple(c.state.get("bucket_offsets", ()))
        columns = _bucket_columns(ds)
        plan = BucketPlan(_ref(ds), c.n, c.seed, c.epoch, c.rank, c.world_size, c.drop_last,
                          c.start_position, self.table, c.augment, *columns, c.params, offsets)
        if c.start_position == 0:
            _report_exclusions(self.table, ds, c, columns, plan)
        return plan

    def summary(self, dataset, seed: int = 0, epoch: int = 0) -> dict:
        """How `dataset`'s samples fall into the buckets in epoch `epoch`: {"samples",
        "buckets": {bucket: samples}, "excluded": {reason: samples}, "examples": {reason:
        first sample ids}} (`pipe.batching.summary(pipe.dataset, seed, epoch)`).

        Args:
            dataset: the open dataset (its height, width and num_frames columns).
            seed: the Pipeline's seed (keep probabilities below 1 draw with it).
            epoch: the epoch.
        """
        return self.table.summary(seed, epoch, *_bucket_columns(dataset))

    def load_state(self, state: dict, position: int, n: int, where: str) -> dict:
        from chute.pipelines.producers.video._bucket_plan import state_offsets

        offsets = state_offsets(state, position, n, self.table, where)
        return {"bucket_offsets": offsets} if offsets else {}


def _bucket_columns(ds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    names = ("height", "width", "num_frames")
    missing = [c for c in names if c not in ds.specs]
    if missing:
        raise ValueError(f"{ds.path} has no {', '.join(missing)} column: buckets need a "
                         "video dataset (made by `chute convert video`)")
    return tuple(np.asarray(ds.column(c)) for c in names)  # type: ignore[return-value]


_REPORTED: set = set()  # (dataset, table, seed) whose exclusions were warned about


def _report_exclusions(table, ds, c: PlanContext, columns, plan) -> None:
    """Warn once per dataset, table and seed about samples in no bucket; raise, naming the
    buckets, when the epoch has no batch at all."""
    import warnings

    summary = table.summary(c.seed, c.epoch, *columns)
    excluded = summary["excluded"]
    if len(plan) == 0:
        filled = {k: v for k, v in summary["buckets"].items() if v}
        held = (f"the buckets that got samples hold too few for one batch of "
                f"{c.world_size} rank(s) x its batch size: {filled}" if filled else
                "no sample fits any bucket")
        hint = table.fit_hint(columns[0], columns[1])
        raise ValueError(f"batching=Buckets(...) on {ds.path} gives no batch in epoch "
                         f"{c.epoch}: {held}; of the {summary['samples']} samples, excluded: "
                         f"{excluded or 'none'} (first ids: {summary['examples']}). "
                         f"{hint + '. ' if hint else ''}Add a "
                         "smaller resolution or frame count, lower the batch sizes, lower "
                         "the tolerance (e.g. Buckets(config, tolerance=0.8)) or pass "
                         "drop_last=False")
    key = (ds.fingerprint, table, c.seed)
    if excluded and key not in _REPORTED:
        _REPORTED.add(key)
        total = sum(excluded.values())
        warnings.warn(f"chute: batching=Buckets(...) leaves {total} of {summary['samples']} "
                      f"samples of {ds.path} out of epoch {c.epoch}: {excluded} (first ids: "
                      f"{summary['examples']}); per bucket: pipe.batching.summary(pipe.dataset, "
                      "seed, epoch); Buckets(config, tolerance=0.8) takes slightly smaller "
                      "videos", RuntimeWarning, stacklevel=2)
