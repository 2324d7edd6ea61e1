import numpy as np
import pytest
from numba import njit

from chute.fallbacks._fp16 import (
    HAS_F16C,
    float32_to_half_bits,
    float32_to_half_bits_f16c,
    float32_to_half_bits_soft,
)


def _converter(convert):
    @njit
    def run(values, out):
        for i in range(values.size):
            out[i] = convert(values[i])

    return run


def _float32_classes():
    rng = np.random.default_rng(0)
    edges = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x477FE000, 0x477FEFFF,
                      0x477FF000, 0x38800000, 0x387FFFFF, 0x33000000, 0x33000001, 0x32FFFFFF,
                      0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF],
                     dtype=np.uint32)
    bits = np.concatenate([
        edges,
        rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32),
        np.arange(0x33000000, 0x38900000, 61, dtype=np.uint32),  # subnormal halves
        np.arange(0x47700000, 0x47800000, 3, dtype=np.uint32),  # around overflow
        np.arange(0x3F800000, 0x40000000, 1, dtype=np.uint32)[::7],  # [1, 2): every tie
    ])
    return bits.view(np.float32)


# The F16C variant can only be compiled where the CPU has the instruction.
# (float32_to_half_bits is one of these two, so it is covered; see the test below.)
VARIANTS = [float32_to_half_bits_soft] + (
    [float32_to_half_bits_f16c] if HAS_F16C else [])


@pytest.mark.parametrize("convert", VARIANTS, ids=lambda f: f.__name__)
def test_matches_numpy_rounding_on_all_float32_classes(convert):
    values = _float32_classes()
    out = np.empty(values.size, np.uint16)
    _converter(convert)(values, out)
    with np.errstate(all="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    nan = np.isnan(values)
    assert np.array_equal(out[~nan], expected[~nan])
    assert np.isnan(out[nan].view(np.float16)).all()
    # NaN keeps its sign.
    assert np.array_equal(out[nan] & 0x8000, expected[nan] & 0x8000)


def test_uses_the_hardware_conversion_where_available():
    assert (float32_to_half_bits is float32_to_half_bits_f16c) == HAS_F16C
