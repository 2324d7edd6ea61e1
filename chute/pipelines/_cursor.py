"""Where a Pipeline stands in its epochs: the epoch, the position in it, the batching's own
resume state, and what a pass left unfinished (docs/ddp-and-resume.md). One object owns them,
so `set_epoch`, `state_dict`, `load_state_dict` and a pass each change them in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["EpochCursor", "checked_state"]


@dataclass
class EpochCursor:
    """The epoch/position state of one Pipeline.

    Attributes:
        epoch: the current epoch.
        position: samples of this epoch handed out by all ranks together.
        batch_state: the batching's resume state at `position` (Buckets: bucket offsets).
        resume_pending: a loaded state waits for its `set_epoch`, which then continues it.
        abandoned: the last pass stopped before its epoch's end.
        pass_start: (position, batch_state) where the last pass started.
    """

    epoch: int = 0
    position: int = 0
    batch_state: dict = field(default_factory=dict)
    resume_pending: bool = False
    abandoned: bool = False
    pass_start: tuple[int, dict] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning, unless a state just loaded is for this epoch."""
        if self.resume_pending and epoch == self.epoch:
            return
        self.epoch, self.position, self.resume_pending = epoch, 0, False
        self.batch_state = {}
        self.abandoned, self.pass_start = False, None

    def saved(self, n: int) -> tuple[int, int, dict]:
        """(epoch, position, batching state) to save: a finished epoch saves the next one's
        start, so resuming never replays an empty epoch.

        Args:
            n: samples of the current epoch.
        """
        if self.position >= n:
            return self.epoch + 1, 0, {}
        return self.epoch, self.position, self.batch_state

    def load(self, epoch: int, position: int, batch_state: dict, n: int) -> None:
        """Continue at a loaded state (one saved at an epoch's end continues with the next).

        Args:
            epoch, position, batch_state: the checked state.
            n: samples of that epoch.
        """
        if position >= n:
            epoch, position, batch_state = epoch + 1, 0, {}
        self.epoch, self.position, self.batch_state = epoch, position, dict(batch_state)
        self.resume_pending = True
        self.abandoned, self.pass_start = False, None

    def begin_pass(self, abandoned: bool, count: Callable[[int], int]) -> None:
        """Where a new pass starts: an unfinished pass (Lightning's sanity check takes 2
        batches) is taken again from its start, so a new iter() never skips what the abandoned
        one did not deliver; after a finished epoch, the next epoch.

        Args:
            abandoned: a pass is still open or stopped early.
            count: epoch -> its number of samples.
        """
        if (abandoned or self.abandoned) and not self.resume_pending and \
                self.pass_start is not None:
            self.position, self.batch_state = self.pass_start
        self.abandoned = False
        if self.position >= count(self.epoch):
            self.epoch, self.position, self.batch_state = self.epoch + 1, 0, {}
        self.resume_pending = False
        self.pass_start = (self.position, dict(self.batch_state))

    def delivered(self, last: bool, n: int, position: int, batch_state: dict) -> None:
        """A batch was handed out: the epoch ends with its last one (a dropped tail counts as
        done).

        Args:
            last: it was the plan's last batch.
            n: samples of the epoch.
            position, batch_state: the plan's position and state after the batch.
        """
        self.position = n if last else position
        self.batch_state = {} if last else batch_state


def checked_state(state, where: str, fingerprints: tuple, count: Callable[[int, int], int]
                  ) -> tuple[int, int, int]:
    """(seed, epoch, position) of a state given to `load_state_dict`, checked.

    Args:
        state: what the user passed.
        where: how errors name the call and dataset.
        fingerprints: the dataset's fingerprint, then its earlier ones (a state saved before a
            `chute meta update` still loads).
        count: (seed, epoch) -> samples of that epoch.
    """
    if not isinstance(state, dict) or not {"seed", "epoch", "position"} <= set(state):
        raise ValueError(f"{where}: expected the dict of Pipeline.state_dict() (seed, "
                         f"epoch, position), got {state!r:.200}")
    fingerprint = state.get("fingerprint")  # states saved before it was stored lack it
    if fingerprint is not None and fingerprint not in fingerprints:
        raise ValueError(f"{where}: the state was saved for another dataset (fingerprint "
                         f"{fingerprint}, this one is {fingerprints[0]}); load the "
                         "state of a Pipeline over this dataset")
    try:
        seed, epoch, position = (int(state[k]) for k in ("seed", "epoch", "position"))
    except (TypeError, ValueError):
        raise ValueError(f"{where}: seed, epoch and position must be integers, got "
                         f"{state!r:.200}") from None
    if epoch < 0 or not 0 <= position <= count(seed, epoch):
        raise ValueError(f"{where}: state position {position} (epoch {epoch}) is outside "
                         f"[0, {count(seed, max(epoch, 0))}]; was it saved for "
                         "another dataset?")
    return seed, epoch, position
