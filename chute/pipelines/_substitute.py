"""What replaces a sample that fails (an undecodable image, a corrupt record).

on_error="skip" in train (eval leaves a failed sample out instead: chute/pipelines/_run.py):
the failed sample is replaced by a substitute that is a pure function of
(seed, epoch, failed id): candidate k is `random_u64(derive_key(seed, epoch, "substitute"),
failed id, stream=k) mod N`, for k = 0, 1, ... until one that every producer reads without
failure (the failed id itself is skipped; a candidate longer than a variable-shape batch allows
is skipped too). The substitute carries its own parameters (the crop it gets anywhere in this
epoch), its own values in every field and its own id in `index`, so a batch never mixes fields
of two samples, and the replacement is identical on every rank, backend and resume.
Each producer's `fill` gets scratch of the kind its batch has: a torch tensor on the Pipeline's
device for outputs it writes there (`Output.on_device`), a host array otherwise.
on_error="raise": a DecodeError names the sample, its shard and the dataset.
"""

from __future__ import annotations

import numpy as np
import torch

from chute.errors import DecodeError
from chute.pipelines.sampling._keyed_random import derive_key, random_u64

__all__ = ["Substitutor", "decode_error", "failure_reason"]

_MAX_CANDIDATES = 16


def failure_reason(field: str, code: int, image: bool) -> str:
    """Why one field of a sample failed: an image decoder's DecodeStatus says what, other
    producers only that it failed."""
    # imported here: importing chute.fallbacks (Numba) is not this module's business otherwise
    from chute.fallbacks import DecodeStatus

    if image and code in {int(s) for s in DecodeStatus}:
        return f"field {field!r}: {DecodeStatus(code).describe()}"
    return f"field {field!r}: corrupt or truncated data"


def decode_error(dataset, sample_id: int, describe=None, reason: str | None = None
                 ) -> DecodeError:
    if describe is None:
        shard, local = dataset.locate(int(sample_id))
        where = f"shard {shard}, local index {local}"
    else:  # e.g. "segment s of recording r, ..." when samples are segments
        where = describe(int(sample_id))
    return DecodeError(
        f"sample {int(sample_id)} ({where}) of dataset {dataset.path} "
        f"could not be decoded ({reason or 'corrupt or truncated data'}). Run `chute verify` "
        "on the dataset, or pass on_error='skip' to replace failing samples deterministically."
    )


class Substitutor:
    """Replaces failed rows of a batch in place (producer thread), through every producer's
    random-access `fill`."""

    def __init__(self, dataset, plan, producers: list, outputs: dict, on_error: str,
                 describe=None, device: torch.device | None = None):
        self.dataset = dataset
        self.device = device or torch.device("cpu")  # where on_device outputs are written
        self.describe = describe  # sample id -> where it is, for errors
        self.plan = plan
        self.producers = producers
        self.outputs = outputs  # key -> Output
        self.on_error = on_error
        self._key = derive_key(plan.seed, plan.epoch, "substitute")

    def fix(self, ids: np.ndarray, status: np.ndarray, out: dict, shapes: dict,
            request=None, reasons: dict | None = None) -> tuple[np.ndarray, list, bool]:
        """New ids for the batch, [(failed id, substitute id, reason or None), ...], and whether
        the batch must be read again: True when a substitute is larger than the batch's
        variable-size outputs allow (the Pipeline then re-reads the whole batch at the new
        shapes); else the substitutes' rows are written into `out`. `reasons` (row -> why it
        failed) goes into the error under on_error="raise" and into `replaced`."""
        failed_rows = np.flatnonzero(status)
        if failed_rows.size == 0:
            return ids, [], False
        if self.on_error == "raise":
            row = int(failed_rows[0])
            raise decode_error(self.dataset, ids[row], self.describe, (reasons or {}).get(row))
        ids = ids.copy()
        replaced, reread = [], False
        for row in failed_rows.tolist():
            bad = int(ids[row])
            ids[row], fits = self._substitute(bad, out, shapes, row, request)
            reread |= not fits
            replaced.append((bad, int(ids[row]), (reasons or {}).get(row)))
        return ids, replaced, reread

    def _substitute(self, bad: int, out: dict, shapes: dict, row: int,
                    request) -> tuple[int, bool]:
        n = getattr(self.plan, "id_count", self.plan.n)  # a mix draws from all its rows
        for k in range(_MAX_CANDIDATES):
            cand = int(random_u64(self._key, bad, stream=k) % np.uint64(n))
            if cand == bad:
                continue
            scratch = self._read_one(cand, request)
            if scratch is None:
                continue
            fits = all(_fits(np.shape(v), shapes[key], self.outputs[key].exact)
                       for key, v in scratch.items() if not isinstance(out[key], list))
            if fits:
                for key, value in scratch.items():
                    _put_row(out[key], row, value)
            return cand, fits
        raise DecodeError(
            f"sample {bad} of dataset {self.dataset.path} could not be read, nor could any of "
            f"{_MAX_CANDIDATES} substitutes; the dataset looks badly damaged. "
            "Run `chute verify` on it."
        )

    def _read_one(self, cand: int, like) -> dict | None:
        """Every output of sample `cand` (rows of one), or None when it fails. `like` is the
        failed batch's request: a plan whose batches differ in shape (buckets) gives the
        substitute that batch's parameters."""
        one = np.array([cand], dtype=np.int64)
        request = self.plan.request_for(one, like=like)
        scratch = {}
        for producer in self.producers:
            shapes = producer.shapes(request)
            for key, shape in shapes.items():
                scratch[key] = self._scratch(self.outputs[key], shape)
            status = producer.fill(request, {k: scratch[k] for k in shapes})
            if np.asarray(status).any():
                return None
        return {k: v[0] for k, v in scratch.items()}

    def _scratch(self, output, shape: tuple):
        """A zeroed buffer of the kind the batch hands the producer for `output` (on the
        current stream when it is a CUDA tensor)."""
        if output.dtype is None:
            return [None]
        if output.on_device:
            dtype = torch.from_numpy(np.empty(0, output.dtype)).dtype
            return torch.zeros(shape, dtype=dtype, device=self.device)
        return np.zeros(shape, output.dtype)


def _fits(row_shape: tuple, batch_shape: tuple, exact: bool) -> bool:
    if exact:
        return tuple(row_shape) == tuple(batch_shape[1:])
    return all(a <= b for a, b in zip(row_shape, batch_shape[1:], strict=True))


def _put_row(dst, row: int, value) -> None:
    if isinstance(dst, list):
        dst[row] = value
        return
    region: tuple[int | slice, ...] = (row, *(slice(0, d) for d in np.shape(value)))
    if isinstance(dst, torch.Tensor):
        dst[row].zero_()
        if not isinstance(value, torch.Tensor):
            value = torch.from_numpy(np.ascontiguousarray(value))
        dst[region].copy_(value)
    else:
        dst[row] = 0
        dst[region] = value
