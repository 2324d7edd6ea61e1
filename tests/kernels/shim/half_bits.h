// The host shim's stand-in for the kernel's `cvt.rn.f16.f32` (inline PTX): float -> IEEE
// binary16 bits, rounding to nearest, ties to even.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

inline unsigned short chute_shim_float_to_half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    struct {
        uint16_t bits;
    } h;
    if (ax > 0x7f800000u) {  // NaN: keep it a quiet NaN
        h.bits = (uint16_t)(sign | 0x7e00u);
    } else if (ax >= 0x477ff000u) {  // >= 65520 (incl. inf) rounds to infinity
        h.bits = (uint16_t)(sign | 0x7c00u);
    } else if (ax < 0x38800000u) {  // below 2^-14: subnormal half, unit 2^-24
        // Scaling by 2^24 is exact; nearbyintf rounds half to even in the default mode.
        // A result of 1024 is the smallest normal, whose encoding is also 1024.
        float a;
        memcpy(&a, &ax, sizeof a);
        h.bits = (uint16_t)(sign | (uint16_t)nearbyintf(a * 16777216.0f));
    } else {
        const uint32_t exponent = (ax >> 23) - 127 + 15;
        const uint32_t mantissa = ax & 0x7fffffu;
        uint32_t bits = (exponent << 10) | (mantissa >> 13);
        const uint32_t rest = mantissa & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) ++bits;  // carries into exponent
        h.bits = (uint16_t)(sign | bits);
    }
    return h.bits;
}
