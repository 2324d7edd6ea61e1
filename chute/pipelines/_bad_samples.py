"""Samples that failed to decode: counted in the Pipeline's stats, the first one warned about
with where it is (docs/pipeline.md, "Bad samples")."""

from __future__ import annotations

import warnings
from collections.abc import Callable

__all__ = ["BadSamples", "describe_sample"]


def describe_sample(dataset, unit, sample_id: int, seed: int, epoch: int) -> str:
    """Where sample `sample_id` is: its shard and local index (and its segment and recording
    when samples are segments).

    Args:
        dataset: the open dataset.
        unit: the Pipeline's sample unit, or None (rows).
        sample_id: the plan's sample id.
        seed, epoch: the epoch it belongs to (merged segments depend on it).
    """
    where = "" if unit is None else unit.describe(sample_id, seed, epoch)
    row = sample_id if unit is None else int(unit.rows([sample_id], seed, epoch)[0])
    shard, local = dataset.locate(row)
    return f"{where}shard {shard}, local index {local}"


class BadSamples:
    """Counts failed samples in `stats` and warns once.

    Args:
        stats: the Pipeline's PipelineStats.
        path: the dataset's path, for the warning.
    """

    def __init__(self, stats, path) -> None:
        self.stats, self.path = stats, path
        self.warned = False

    def note(self, replaced: list, describe: Callable[[int], str]) -> None:
        """Count the failed samples of a batch ((failed id, substitute id or None when eval
        left it out, reason), ...) and warn at the first.

        Args:
            replaced: the batch's failures.
            describe: sample id -> where it is.
        """
        if not replaced:
            return
        self.stats.decode_errors += len(replaced)
        self.stats.skipped.extend(bad for bad, sub, _ in replaced if sub is None)
        if self.warned:
            return
        self.warned = True
        bad, sub, reason = replaced[0]
        why = f" ({reason})" if reason else ""
        done = (f"replaced by sample {sub}" if sub is not None else
                "left out of this eval pass (eval never delivers a sample twice; its ids "
                "are in pipe.stats.skipped)")
        # stacklevel 3: this method, the Pipeline's generator, then the training loop
        warnings.warn(
            f"chute: sample {bad} ({describe(bad)}) of {self.path} could not be decoded{why}; "
            f"{done}. Further failures are counted in pipe.stats.decode_errors without "
            "warning; run `chute verify` on the dataset.", RuntimeWarning, stacklevel=3)
