"""The "word" sample unit: sample k is one word of one text, numbered text by text; a prefix
sum over the rows' word counts maps k to its row ("row") and its word in the row ("word")."""

from __future__ import annotations

import numpy as np

from chute.pipelines.producers._by_row import ByRow


class WordUnit:
    """ParamSource: sample ids -> "row" (the dataset row), "word" (its index in the row)."""

    def __init__(self, field: str, dataset):
        self.field = field
        counts = [len(bytes(t).split()) for t in dataset.read(field, np.arange(len(dataset)))]
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def count(self, seed: int, epoch: int) -> int:
        return int(self.first[-1])

    def __call__(self, seed: int, epoch: int, ids) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, np.int64)
        rows = np.searchsorted(self.first, ids, "right") - 1
        return {"row": rows, "word": ids - self.first[rows]}

    def rows(self, ids, seed: int = 0, epoch: int = 0) -> np.ndarray:
        return self(seed, epoch, ids)["row"]

    def describe(self, sample_id: int, seed: int = 0, epoch: int = 0) -> str:
        params = self(seed, epoch, [sample_id])
        return f"word {int(params['word'][0])} of row {int(params['row'][0])}, "

    def view(self, producer):
        # the text producer reads the words itself; the other fields are read per row
        return producer if producer.field == self.field else ByRow(producer, "row")

    def durations(self, dataset, seed: int, epoch: int) -> None:
        return None


def unit(field: str, options, dataset) -> WordUnit | None:
    """The family's unit hook: words when the options say so, else rows (None)."""
    if options.unit not in ("text", "word"):
        raise ValueError(f"TextOptions of field {field!r}: unit must be 'text' or 'word', got "
                         f"{options.unit!r}")
    return WordUnit(field, dataset) if options.unit == "word" else None
