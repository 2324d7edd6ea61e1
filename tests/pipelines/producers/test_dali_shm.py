"""The /dev/shm check of DALI's parallel external source: a clear error naming the size needed."""

from __future__ import annotations

import pytest

from chute.errors import BackendUnavailableError
from chute.pipelines.producers._dali._graph import DaliGraphConfig
from chute.pipelines.producers._dali._shm import check_shm, shm_free, shm_needed

MIB = 1 << 20


def config(**kwargs):
    return DaliGraphConfig("native", 64, (32, 32), parallel=True, py_num_workers=2, prefetch=2,
                           bytes_per_sample_hint=256 << 10, **kwargs)


def test_needed_counts_workers_batches_and_the_sample_hint():
    assert shm_needed(config()) == 2 * 3 * 64 * (256 << 10)  # 96 MiB


def test_too_small_fails_naming_sizes_and_fixes():
    with pytest.raises(BackendUnavailableError) as err:
        check_shm(config(), free=64 * MIB, path="/dev/shm")
    message = str(err.value)
    assert "96 MiB" in message and "64 MiB free" in message and "/dev/shm" in message
    assert "--shm-size" in message and "py_workers" in message


def test_enough_or_unknown_passes(tmp_path):
    check_shm(config(), free=96 * MIB)
    check_shm(config(), path=str(tmp_path / "missing"))  # cannot measure: DALI will say
    assert shm_free(str(tmp_path / "missing")) is None
    assert shm_free(str(tmp_path)) > 0
