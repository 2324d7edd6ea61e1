"""Producers "test-text" (written on the host) and "test-text-device" (writes the device tensor
itself: an on-device output): stored bytes -> uint8 [B, max_len] + "<field>_lengths"; with the
"word" unit, each sample is one word of its row."""

from __future__ import annotations

import numpy as np
import torch

from chute.pipelines.producers._contract import Output, StoredFieldProducer


class TextProducer(StoredFieldProducer):
    name = "test-text"
    on_device = False

    def __init__(self, spec):
        self.field, self.dataset, self.options = spec.field, spec.dataset, spec.options
        self.max_len = int(spec.options.max_len)
        self.words = spec.unit is not None

    def outputs(self) -> dict[str, Output]:
        return {self.field: Output((self.max_len,), np.dtype(np.uint8),
                                   on_device=self.on_device),
                f"{self.field}_lengths": Output((), np.dtype(np.int64))}

    def shapes(self, request) -> dict[str, tuple[int, ...]]:
        n = len(request.ids)
        return {self.field: (n, self.max_len), f"{self.field}_lengths": (n,)}

    def _texts(self, request) -> list[bytes]:
        if not self.words:
            return [bytes(t) for t in self.dataset.read(self.field, request.ids)]
        rows, words = request.params["row"], request.params["word"]
        texts = self.dataset.read(self.field, np.asarray(rows, np.int64))
        return [bytes(t).split()[int(w)] for t, w in zip(texts, words, strict=True)]

    def fill(self, request, out) -> np.ndarray:
        status = np.zeros(len(request.ids), np.uint8)
        for row, text in enumerate(self._texts(request)):
            data = text.upper() if self.options.upper else text
            if len(data) > self.max_len:
                status[row] = 1
                continue
            self._write(out[self.field], row, data)
            out[f"{self.field}_lengths"][row] = len(data)
        return status

    def _write(self, target, row: int, data: bytes) -> None:
        target[row] = 0
        target[row, :len(data)] = np.frombuffer(data, np.uint8)


class DeviceTextProducer(TextProducer):
    name = "test-text-device"
    on_device = True

    def _write(self, target, row: int, data: bytes) -> None:
        assert isinstance(target, torch.Tensor)  # the Pipeline hands on-device outputs as such
        target[row].zero_()
        if data:  # (frombuffer refuses an empty buffer)
            codes = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            target[row, :len(data)].copy_(codes.to(target.device))


def create(spec) -> TextProducer:
    return DeviceTextProducer(spec) if spec.name == "test-text-device" else TextProducer(spec)


def candidates(device: str) -> list:
    return []
