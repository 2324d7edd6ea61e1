"""The pinned argument ring: copies go from pinned slots, a slot is reused only after the event
of its previous copy completed, and the steady state allocates nothing."""

from __future__ import annotations

import numpy as np
import pytest

from chute.kernels._arg_ring import ArgRing


class Log:
    def __init__(self):
        self.entries = []
        self.allocated = []

    def alloc(self, nbytes):
        buffer = np.zeros(nbytes, dtype=np.uint8)  # stands for cupyx.empty_pinned
        self.allocated.append(buffer)
        return buffer

    def event(self):
        log = self

        class Event:
            def record(self, stream):
                log.entries.append(("record", id(self), stream))

            def synchronize(self):
                log.entries.append(("sync", id(self)))

        return Event()


class Device:
    def __init__(self, log):
        self.log = log
        self.data = None

    def set(self, array, stream=None):
        owner = array.base if array.base is not None else array
        assert any(owner is b for b in self.log.allocated), "copied from a non-pinned buffer"
        self.data = array.copy()
        self.log.entries.append(("copy", stream))


def test_copies_from_pinned_slots_and_waits_before_reusing_one():
    log = Log()
    ring = ArgRing(2, log.alloc, log.event)
    payloads = [np.full(n, k, dtype=np.uint8) for k, n in enumerate([10, 12, 8, 30, 5])]
    for k, host in enumerate(payloads):
        device = Device(log)
        ring.copy_to_device(host, device, stream=f"s{k}")
        np.testing.assert_array_equal(device.data, host)
    syncs = [e for e in log.entries if e[0] == "sync"]
    records = [e for e in log.entries if e[0] == "record"]
    # launches 3, 4, 5 reuse slots 0, 1, 0: each waits for the event of that slot's last copy
    assert [s[1] for s in syncs] == [records[0][1], records[1][1], records[0][1]]
    assert log.entries.index(syncs[0]) < len(log.entries) - 1
    # slot 0: 10 bytes, then 8 (fits), then 5 (fits); slot 1: 12, then 30 -> grows to 30
    assert [b.size for b in log.allocated] == [10, 12, 30]


def test_a_slot_is_rewritten_only_after_its_wait():
    log = Log()
    ring = ArgRing(1, log.alloc, log.event)
    ring.copy_to_device(np.ones(4, np.uint8), Device(log), stream=None)
    ring.copy_to_device(np.ones(4, np.uint8), Device(log), stream=None)
    kinds = [e[0] for e in log.entries]
    assert kinds == ["copy", "record", "sync", "copy", "record"]


def test_needs_a_slot():
    with pytest.raises(ValueError, match="at least 1"):
        ArgRing(0, np.empty, object)
