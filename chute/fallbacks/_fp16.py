"""float32 -> IEEE half conversion for jitted code (Numba 0.68 has no float16 on the CPU).

Outputs are written through a uint16 view of the float16 array. Rounding is to nearest, ties
to even, with overflow to infinity, gradual underflow to subnormals and NaN kept NaN: the same
results as NumPy's `astype(np.float16)`.

On CPUs with F16C the conversion is LLVM's `fptrunc` to half (one vcvtps2ph per vector, same
rounding); elsewhere a branch-free integer emulation, because LLVM would lower `fptrunc`
to a runtime-library call that Numba's JIT may not link.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding, ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["HAS_F16C", "float32_to_half_bits", "float32_to_half_bits_f16c",
           "float32_to_half_bits_soft"]


@intrinsic
def _float32_bits(typingctx, value):
    """The bit pattern of a float32 as uint32 (a register bitcast)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def _fptrunc_half_bits(typingctx, value):
    """The float16 bits of a float32 via the hardware conversion (needs F16C)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(types.float32), codegen


@njit(inline="always", nogil=True, cache=True)
def float32_to_half_bits_f16c(value):
    """The float16 bits (uint16) nearest to a float32 value, ties to even, via F16C."""
    return _fptrunc_half_bits(np.float32(value))


@njit(inline="always", nogil=True, cache=True)
def float32_to_half_bits_soft(value):
    """The float16 bits (uint16) nearest to a float32 value, ties to even.

    Every case is computed and then selected (no data-dependent branches), so loops over
    outputs stay vectorisable.
    """
    x = np.float32(value)
    bits = np.int64(_float32_bits(x))
    sign = (bits >> 16) & 0x8000
    mag = bits & 0x7FFFFFFF
    # Normal halves: rebias the exponent (127 -> 15), round away 13 mantissa bits (ties even).
    normal = (mag - 0x38000000 + 0xFFF + ((mag >> 13) & 1)) >> 13
    # Below 2**-14 (subnormal halves): adding 0.5, whose float32 ulp is 2**-24 (the half
    # subnormal step), makes the FPU round |x| to that step, ties to even.
    subnormal = np.int64(_float32_bits(abs(x) + np.float32(0.5))) - 0x3F000000
    special = 0x7E00 if mag > 0x7F800000 else 0x7C00  # NaN stays NaN; inf and overflow
    half = normal if mag >= 0x38800000 else subnormal
    half = special if mag >= 0x477FF000 else half  # >= 65520 rounds past 65504
    return np.uint16(sign | half)


# Numba's cache is keyed by the host CPU's name and features, so each CPU gets its own choice.
HAS_F16C = bool(binding.get_host_cpu_features().get("f16c", False))
float32_to_half_bits = float32_to_half_bits_f16c if HAS_F16C else float32_to_half_bits_soft
