"""What replaces a sample that fails to decode.

on_error="skip": the failed sample is replaced by a substitute that is a pure function of
(seed, epoch, failed id): candidate k is `random_u64(derive_key(seed, epoch, "substitute"),
failed id, stream=k) mod N`, for k = 0, 1, ... until one decodes (the failed id itself is
skipped). The substitute carries its own crop (the one it gets anywhere in this epoch), its own
label and its own id in `index`, so a batch never holds a wrong (image, label) pair, and the
replacement is identical on every rank, backend and resume.
on_error="raise": a DecodeError names the sample, its shard and the dataset.
"""

from __future__ import annotations

import numpy as np
import torch

from chute.errors import DecodeError
from chute.pipelines._keyed_random import derive_key, random_u64

__all__ = ["Substitutor", "decode_error"]

_MAX_CANDIDATES = 16


def decode_error(dataset, sample_id: int) -> DecodeError:
    shard, local = dataset.locate(int(sample_id))
    return DecodeError(
        f"sample {int(sample_id)} (shard {shard}, local index {local}) of dataset {dataset.path} "
        "could not be decoded (corrupt or truncated image). Run `chute verify` on the dataset, "
        "or pass on_error='skip' to replace failing samples deterministically."
    )


class Substitutor:
    """Replaces failed rows of a decoded batch in place (producer thread)."""

    def __init__(self, dataset, plan, decoder_factory, on_error: str):
        self.dataset = dataset
        self.plan = plan
        # () -> callable(ids, boxes, flips, out numpy) -> status; built on the first failure
        self.decoder_factory = decoder_factory
        self.on_error = on_error
        self._key = derive_key(plan.seed, plan.epoch, "substitute")

    def fix(self, ids: np.ndarray, status: np.ndarray, out) -> tuple[np.ndarray, list]:
        """New ids for the batch and [(failed id, substitute id), ...]; `out` rows rewritten."""
        failed_rows = np.flatnonzero(status)
        if failed_rows.size == 0:
            return ids, []
        if self.on_error == "raise":
            raise decode_error(self.dataset, ids[failed_rows[0]])
        ids = ids.copy()
        replaced = []
        for row in failed_rows:
            bad = int(ids[row])
            ids[row] = self._decode_substitute(bad, out, row)
            replaced.append((bad, int(ids[row])))
        return ids, replaced

    def _decode_substitute(self, bad: int, out, row: int) -> int:
        n = self.plan.n
        heights, widths = self.plan.sizes()
        scratch = np.empty((1, *out.shape[1:]), dtype=_numpy_dtype(out))
        for k in range(_MAX_CANDIDATES):
            cand = int(random_u64(self._key, bad, stream=k) % np.uint64(n))
            if cand == bad:
                continue
            one = np.array([cand], dtype=np.int64)
            boxes, flips = self.plan.crops(one, heights[one], widths[one])
            if self.decoder_factory()(one, boxes, flips, scratch)[0] == 0:
                if isinstance(out, torch.Tensor):
                    out[row].copy_(torch.from_numpy(scratch[0]))
                else:
                    out[row] = scratch[0]
                return cand
        raise DecodeError(
            f"sample {bad} of dataset {self.dataset.path} could not be decoded, nor could any of "
            f"{_MAX_CANDIDATES} substitutes; the dataset looks badly damaged. "
            "Run `chute verify` on it."
        )


def _numpy_dtype(out) -> np.dtype:
    if isinstance(out, torch.Tensor):
        return torch.empty(0, dtype=out.dtype).numpy().dtype
    return out.dtype
