"""Producer "test-text": stored bytes -> uint8 [B, max_len] + "<field>_lengths"."""

from __future__ import annotations

import numpy as np

from chute.pipelines.producers._contract import Output, StoredFieldProducer


class TextProducer(StoredFieldProducer):
    name = "test-text"

    def __init__(self, spec):
        self.field, self.dataset = spec.field, spec.dataset
        self.max_len, self.upper = int(spec.options["max_len"]), bool(spec.options["upper"])

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((self.max_len,), np.dtype(np.uint8)),
                f"{self.field}_lengths": Output((), np.dtype(np.int64))}

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        n = len(request.ids)
        return {self.field: (n, self.max_len), f"{self.field}_lengths": (n,)}

    def fill(self, request, out) -> np.ndarray:
        status = np.zeros(len(request.ids), np.uint8)
        texts = self.dataset.read(self.field, request.ids)
        for row, text in enumerate(texts):
            data = bytes(text).upper() if self.upper else bytes(text)
            if len(data) > self.max_len:
                status[row] = 1
                continue
            out[self.field][row] = 0
            out[self.field][row, :len(data)] = np.frombuffer(data, np.uint8)
            out[f"{self.field}_lengths"][row] = len(data)
        return status


def create(spec) -> TextProducer:
    return TextProducer(spec)


def candidates(device: str) -> list:
    return []
