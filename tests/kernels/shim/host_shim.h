// Host shim: lets the CUDA C source of chute/kernels/*.cu compile as plain C++ so its
// arithmetic can run on a CPU. The CUDA qualifiers vanish, the built-in index variables become
// thread-local globals that a loop driver sets before calling the kernel once per (block, thread),
// and the kernel's fp16 conversion (inline PTX on the GPU) comes from half_bits.h next to this file. Valid only for kernels without
// shared memory or barriers (each thread must be independent), which is true of ours.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "half_bits.h"

#define CHUTE_HOST_SHIM 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct chute_dim3 {
    unsigned x, y, z;
};

thread_local chute_dim3 blockIdx, threadIdx, blockDim, gridDim;
