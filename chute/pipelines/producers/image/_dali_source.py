"""The DALI external source: one rank's batches as a pure function of DALI's BatchInfo.

`DaliBatchSource(plan, first_iteration)(BatchInfo(iteration, epoch_idx))` returns the encoded
bytes of this rank's batch `first_iteration + iteration` of epoch `plan.epoch` (for epoch_idx 0;
DALI epoch k > 0 is batch `iteration` of epoch `plan.epoch + k` from position 0), the crop
windows (anchor and shape, in source pixels, for `fn.decoders.image_slice`), the flip flags and
the global sample ids.
Nothing about the order lives in the object: the same BatchInfo gives the same batch in any process,
which is what DALI's parallel external source (worker processes) and checkpointing require.

The dataset is opened lazily, in the process that calls the source (a forked or spawned worker
reopens its own memory maps); pickling drops the open dataset and the staging buffers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from chute.pipelines.producers.image._header import refused_headers
from chute.pipelines.producers.image._placeholder import (
    PLACEHOLDER_BOX,
    placeholder_payload,
    refused_index,
)

__all__ = ["DaliBatchSource", "SOURCE_OUTPUTS", "ROI_SOURCE_OUTPUTS", "CUPY_INSTALL_HINT",
           "cupy_import_error", "staging_for"]

CUPY_INSTALL_HINT = ("CuPy (cupy-cuda12x) is not installed (pip install chute[dali]; "
                     "chute[dali-cu13] for a CUDA 13 torch)")

# The order of the tuple a DaliBatchSource returns (external_source num_outputs=len(...)).
SOURCE_OUTPUTS = ("encoded", "anchor", "shape", "flip", "index")
# With `with_roi`: also the box inside each decoded window, as fn.resize's roi_start/roi_end.
ROI_SOURCE_OUTPUTS = ("encoded", "anchor", "shape", "roi_start", "roi_end", "flip", "index")


@dataclasses.dataclass
class DaliBatchSource:
    """Picklable, stateless batch callable for `fn.external_source(batch=True, batch_info=True)`.

    plan: a `chute.pipelines.BatchPlan` for the first epoch this DALI pipeline serves (its
        `dataset` (a DatasetRef) is reopened lazily by whichever process calls the source); DALI's
        `epoch_idx` k (bumped by each `pipe.reset()`) selects epoch `plan.epoch + k`, starting at
        position 0 (only epoch_idx 0 honours the plan's resume position).
    first_iteration: the plan iteration that DALI iteration 0 of epoch_idx 0 maps to (resume).
    field: the bytes field holding the encoded images.
    staging: "views" returns zero-copy views of the memory-mapped shard bytes (DALI copies them);
        "pinned" gathers the batch into a page-locked contiguous buffer and returns views of it, for
        a GPU decoder fed with `no_copy=True`. Buffers rotate through a ring of `ring` slots so a
        slot is rewritten only after DALI has consumed it (ring > DALI's prefetch_queue_depth).
    margin_for: (out_h, out_w) to widen each decode window by the resample's margin for that
        output size (the `dali` kernel variant: `chute._resize_box.decode_windows`, the CPU
        decoder's rule), or None to decode the smallest window of whole pixels holding the
        crop box (`dali-native`; an integer box is its own window).
    size_fields: the dataset's (height, width) columns of the full images (clamp the windows).
    with_roi: also return each box inside its window as (roi_start, roi_end) (y, x) float32
        pairs, for `fn.resize`'s region of interest (the `dali-native` graph).
    max_pixels: the largest image header accepted (None: `chute.fallbacks.max_image_pixels`).
        A payload whose header claims more, or a size other than its height/width columns, or
        cannot be read, never reaches DALI: a small placeholder image takes its place and its
        `index` output is `refused_index(id, status)` (`refusals` decodes it).
    view_sizes: multi-crop views (docs/views.md; the kernel graph only): the (out_h, out_w) of
        every view. The plan's "<field>.view_boxes" [B, V, 4] then give one decode window per
        sample holding every view's resample margin (`chute.kernels.union_windows`), and
        `windows` returns every view's box inside it ([B, V, 4]). None: one crop per sample.
    """

    plan: Any
    first_iteration: int = 0
    field: str = "image"
    staging: str = "views"
    ring: int = 4
    margin_for: tuple[int, int] | None = None
    size_fields: tuple[str, str] = ("height", "width")
    with_roi: bool = False
    max_pixels: int | None = None
    view_sizes: tuple[tuple[int, int], ...] | None = None

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the returned tuple's items, in order."""
        return ROI_SOURCE_OUTPUTS if self.with_roi else SOURCE_OUTPUTS

    def __post_init__(self) -> None:
        if self.staging not in ("views", "pinned"):
            raise ValueError(f"staging must be 'views' or 'pinned', not {self.staging!r}")
        if self.view_sizes is not None and self.with_roi:
            raise ValueError("multi-crop views are resampled by chute's kernel: a views "
                             "source cannot feed the dali-native graph (with_roi)")
        from chute.fallbacks import max_image_pixels

        self.max_pixels = max_image_pixels(self.max_pixels)
        self._dataset = None
        self._slots: list[np.ndarray | None] = [None] * self.ring
        self._held: list[tuple | None] = [None] * self.ring

    # -- pickling: only the description travels, never open maps or pinned memory ----------------
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_dataset"] = None
        state["_slots"] = [None] * self.ring
        state["_held"] = [None] * self.ring
        return state

    # -- the source ------------------------------------------------------------------------------
    def plan_for(self, epoch_idx: int):
        """The BatchPlan of DALI epoch `epoch_idx` (0 = the plan this source was built with)."""
        if epoch_idx == 0:
            return self.plan
        return dataclasses.replace(
            self.plan, epoch=self.plan.epoch + epoch_idx, start_position=0
        )

    def plan_iteration(self, batch_info) -> tuple[Any, int]:
        """(plan, plan iteration) that a DALI BatchInfo stands for."""
        epoch_idx, iteration = int(batch_info.epoch_idx), int(batch_info.iteration)
        if epoch_idx == 0:
            return self.plan, self.first_iteration + iteration
        return self.plan_for(epoch_idx), iteration

    def __call__(self, batch_info) -> tuple:
        plan, iteration = self.plan_iteration(batch_info)
        # BatchPlan.request raises StopIteration past the end, consistently for any lookahead.
        request = plan.request(iteration)
        ids, boxes, flips = self.crops(request)
        if self.view_sizes is not None:
            flips = flips[:, 0]  # the graph passes flips through unused: the kernel flips
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        sizes = self.sizes(ids)
        boxes, inner = self.windows(ids, boxes, sizes)
        if self.staging == "pinned":
            encoded = self._gather_pinned(ids, iteration)
        else:
            encoded = self.dataset().views(ids, field=self.field)
        ids = self._refuse(encoded, ids, sizes, boxes, inner)
        anchor = np.ascontiguousarray(boxes[:, 0:2], dtype=np.float32)  # (top, left)
        shape = np.ascontiguousarray(boxes[:, 2:4], dtype=np.float32)  # (height, width)
        flip = np.ascontiguousarray(flips, dtype=np.int32)
        batch: tuple  # the arrays of `outputs`, in order
        if self.with_roi:
            roi_start = np.ascontiguousarray(inner[:, 0:2], dtype=np.float32)
            roi_end = np.ascontiguousarray(inner[:, 0:2] + inner[:, 2:4], dtype=np.float32)
            batch = (encoded, anchor, shape, roi_start, roi_end, flip, ids)
        else:
            batch = (encoded, anchor, shape, flip, ids)
        if self.staging == "pinned":
            # Fed with no_copy=True: DALI reads every output array in place later, so the ring
            # keeps all of them alive (not only the staged bytes) until the slot comes round.
            self._held[iteration % self.ring] = batch
        return batch

    def crops(self, request) -> tuple[Any, np.ndarray, np.ndarray]:
        """(ids, boxes, flips) of a request: [B, 4] and [B], or every view's [B, V, 4] and
        [B, V] with `view_sizes`."""
        if self.view_sizes is not None:
            return (request.ids, request.params[f"{self.field}.view_boxes"],
                    np.asarray(request.params[f"{self.field}.view_flips"], dtype=bool))
        return request.ids, request.params["boxes"], request.params["flips"]

    def windows(self, ids, boxes, sizes=None) -> tuple[np.ndarray, np.ndarray]:
        """(decode windows [B, 4] int32, crop boxes inside them [B, 4] float32, or [B, V, 4]
        with `view_sizes`) of a batch (`sizes`: its height/width columns, when at hand)."""
        from chute._resize_box import decode_windows

        sizes = self.sizes(ids) if sizes is None else sizes
        if self.view_sizes is not None:
            from chute.kernels import union_windows

            return union_windows(boxes, sizes, self.view_sizes)
        return decode_windows(boxes, sizes, self.margin_for)

    def sizes(self, ids) -> np.ndarray:
        """[B, 2] (height, width) columns of the samples `ids`."""
        ds = self.dataset()
        ids = np.asarray(ids, dtype=np.int64)
        return np.stack([np.asarray(ds.column(name))[ids] for name in self.size_fields], axis=1)

    def _refuse(self, encoded: list, ids: np.ndarray, sizes: np.ndarray, boxes: np.ndarray,
                inner: np.ndarray) -> np.ndarray:
        """Swap refused payloads (in place) for the placeholder; the ids to deliver."""
        assert self.max_pixels is not None  # __post_init__ resolved it
        status = refused_headers(encoded, sizes, self.max_pixels)
        if not status.any():
            return ids
        ids = ids.copy()
        for k in np.flatnonzero(status).tolist():
            encoded[k] = placeholder_payload()
            boxes[k] = inner[k] = PLACEHOLDER_BOX
            ids[k] = refused_index(int(ids[k]), int(status[k]))
        return ids

    def dataset(self):
        if self._dataset is None:
            self._dataset = self.plan.dataset.open()
        return self._dataset

    def _gather_pinned(self, ids: np.ndarray, iteration: int) -> list[np.ndarray]:
        ds = self.dataset()
        needed = int(ds.sizes(ids, field=self.field).sum())
        slot = iteration % self.ring
        buffer = self._slots[slot]
        if buffer is None or buffer.nbytes < needed:
            # Grow by doubling so the steady state never allocates page-locked memory.
            size = max(needed, 0 if buffer is None else 2 * buffer.nbytes)
            self._slots[slot] = buffer = pinned_bytes(size)
        data, offsets = ds.gather(ids, field=self.field, out=buffer)
        return [data[offsets[k] : offsets[k + 1]] for k in range(len(ids))]


def cupy_import_error() -> str | None:
    """Why CuPy cannot be imported here (None when it can). CuPy allocates the pinned staging
    memory and launches chute's kernel; importing it touches no GPU."""
    try:
        import cupy  # noqa: F401
        import cupyx  # noqa: F401
    except ImportError:
        return CUPY_INSTALL_HINT
    except Exception as exc:  # a broken install: say what broke rather than hide it
        return f"cupy failed to import ({type(exc).__name__}: {exc})"
    return None


def staging_for(requested: str, on_gpu: bool) -> str:
    """The staging a source really uses: "pinned" only for a GPU decoder fed in-process and only
    where CuPy (the pinned allocator) imports; "views" (DALI copies the bytes) otherwise.

    Args:
        requested: the backend option, "pinned" or "views".
        on_gpu: whether DALI decodes on a GPU in this process (no parallel workers).
    """
    if requested == "pinned" and on_gpu and cupy_import_error() is None:
        return "pinned"
    return "views"


def pinned_bytes(nbytes: int) -> np.ndarray:
    """A page-locked uint8 host array (CuPy's pinned allocator), imported only when asked for."""
    try:
        import cupyx
    except ImportError as err:
        from chute.errors import BackendUnavailableError

        raise BackendUnavailableError(
            "pinned staging for the DALI GPU decoder needs CuPy, which is not installed. "
            "Install it with `pip install chute[dali]` (cupy-cuda12x; chute[dali-cu13] for a "
            "CUDA 13 torch)."
        ) from err
    return cupyx.empty_pinned((max(int(nbytes), 1),), dtype=np.uint8)
