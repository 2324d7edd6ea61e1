// Fused crop + antialiased bilinear resize + horizontal flip + normalize + layout.
//
// One thread computes one output pixel (all 3 channels) of one sample, reading the
// variable-size decoded HWC uint8 RGB source of that sample through a device array of
// pointers. The resampling is the shared resize definition (docs/design.md, "Resize
// definition"; PIL's BILINEAR with a box):
// for each axis, scale = box_extent / out_extent, support = max(scale, 1),
// center = box_start + (o + 0.5) * scale, taps [int(center - support + 0.5), int(center +
// support + 0.5)) clipped to the source array, weight max(0, 1 - |(j + 0.5 - center) / support|),
// normalised to sum 1. Both axes' taps are summed directly (sum over y taps of sum over x
// taps), which equals PIL's horizontal-then-vertical passes without an intermediate image.
// The value v is never rounded before normalisation:
//   uint8:  clamp(floor(v + 0.5), 0, 255)
//   float:  (v - 255 * mean[c]) / (255 * std[c]) in float32; fp16 is rounded to nearest even by
//           `cvt.rn.f16.f32` and stored as its bits in an unsigned short. No cuda_fp16.h: NVRTC
//           has no built-in copy and recent CuPy does not bundle it, so the kernel compiles with
//           the launcher's options alone.
//
// The kernel uses no shared memory and no synchronisation: every thread is independent, which
// is what lets the tests run this same file serially on the CPU through a host shim.
//
// Arguments (all device pointers):
//   srcs   [B]      pointer to the first byte of sample b (row y starts at srcs[b] + y * pitch)
//   shapes [B, 3]   int32 (height, width, row pitch in bytes); pixels are 3 contiguous bytes
//   boxes  [B, 4]   float32 (y0, x0, box_h, box_w) in source pixel units
//   flips  [B]      uint8, non-zero = mirror horizontally
//   norm   [6]      float32 (255*mean[0..2], 255*std[0..2]); unused for uint8 output
//   out             contiguous [B, H, W, 3] (NHWC) or [B, 3, H, W] (NCHW)
// Launch: block (32, 8, 1), grid (ceil(W / 32), ceil(H / 8), B).

namespace chute_kernels {

// IEEE binary16 bits of v, rounded to nearest even (the host shim supplies a C++ equivalent).
__device__ __forceinline__ unsigned short float_to_half_bits(float v) {
#ifdef CHUTE_HOST_SHIM
    return chute_shim_float_to_half_bits(v);
#else
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(v));
    return bits;
#endif
}

struct Taps {
    int first;          // first source index with a tap
    int count;          // number of taps (0 when the window misses the source)
    float center;       // window center in source coordinates
    float inv_support;  // 1 / max(scale, 1)
    float norm;         // 1 / sum of weights (0 when there are none)
};

__device__ __forceinline__ float tap_weight(int j, const Taps& t) {
    return fmaxf(0.0f, 1.0f - fabsf(((float)j + 0.5f - t.center) * t.inv_support));
}

__device__ __forceinline__ Taps axis_taps(int o, float box_start, float scale, int src_size) {
    Taps t;
    const float support = fmaxf(scale, 1.0f);
    t.center = box_start + ((float)o + 0.5f) * scale;
    t.inv_support = 1.0f / support;
    // C casts truncate toward zero, as in PIL; the clamp makes negative values harmless.
    int lo = (int)(t.center - support + 0.5f);
    int hi = (int)(t.center + support + 0.5f);
    lo = lo < 0 ? 0 : lo;
    hi = hi > src_size ? src_size : hi;
    t.first = lo;
    t.count = hi > lo ? hi - lo : 0;
    float sum = 0.0f;
    for (int k = 0; k < t.count; ++k) sum += tap_weight(lo + k, t);
    t.norm = sum > 0.0f ? 1.0f / sum : 0.0f;
    return t;
}

__device__ __forceinline__ void store(unsigned char* out, size_t i, float v, float, float) {
    const float r = floorf(v + 0.5f);
    out[i] = (unsigned char)fminf(fmaxf(r, 0.0f), 255.0f);
}

__device__ __forceinline__ void store(float* out, size_t i, float v, float mean255, float std255) {
    out[i] = (v - mean255) / std255;
}

__device__ __forceinline__ void store(unsigned short* out, size_t i, float v, float mean255,
                                      float std255) {
    out[i] = float_to_half_bits((v - mean255) / std255);
}

// One output pixel (ox, oy) of sample row `b` of `out` (out_h x out_w), resampled from `src`.
template <typename OutT, bool kNCHW>
__device__ __forceinline__ void resample_pixel(
    const unsigned char* __restrict__ src, int src_h, int src_w, size_t pitch,
    const float* __restrict__ box, bool flip, const float* __restrict__ norm,
    OutT* __restrict__ out, int b, int out_h, int out_w, int ox, int oy) {
    // Flip: output column ox shows the resampled column out_w - 1 - ox.
    const int rx = flip ? out_w - 1 - ox : ox;
    const Taps ty = axis_taps(oy, box[0], box[2] / (float)out_h, src_h);
    const Taps tx = axis_taps(rx, box[1], box[3] / (float)out_w, src_w);

    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    for (int i = 0; i < ty.count; ++i) {
        const int y = ty.first + i;
        const float wy = tap_weight(y, ty);
        const unsigned char* px = src + (size_t)y * pitch + (size_t)tx.first * 3;
        float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
        for (int k = 0; k < tx.count; ++k, px += 3) {
            const float wx = tap_weight(tx.first + k, tx);
            r0 += wx * (float)px[0];
            r1 += wx * (float)px[1];
            r2 += wx * (float)px[2];
        }
        acc0 += wy * r0;
        acc1 += wy * r1;
        acc2 += wy * r2;
    }
    const float s = ty.norm * tx.norm;
    const float v[3] = {acc0 * s, acc1 * s, acc2 * s};

    const size_t plane = (size_t)out_h * (size_t)out_w;
    const size_t pixel = (size_t)oy * (size_t)out_w + (size_t)ox;
    for (int c = 0; c < 3; ++c) {
        const size_t i = kNCHW ? ((size_t)b * 3 + c) * plane + pixel
                               : ((size_t)b * plane + pixel) * 3 + c;
        store(out, i, v[c], norm[c], norm[3 + c]);
    }
}

template <typename OutT, bool kNCHW>
__device__ __forceinline__ void resize_normalize(
    const unsigned char* const* __restrict__ srcs, const int* __restrict__ shapes,
    const float* __restrict__ boxes, const unsigned char* __restrict__ flips,
    const float* __restrict__ norm, OutT* __restrict__ out, int out_h, int out_w) {
    const int ox = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    const int oy = (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int b = (int)blockIdx.z;
    if (ox >= out_w || oy >= out_h) return;
    resample_pixel<OutT, kNCHW>(srcs[b], shapes[3 * b + 0], shapes[3 * b + 1],
                                (size_t)shapes[3 * b + 2], boxes + 4 * b, flips[b] != 0, norm,
                                out, b, out_h, out_w, ox, oy);
}

// Multi-crop views (docs/views.md): V views of every source in one launch. The blocks of all
// views' outputs are numbered one after the other along x (view v owns blocks
// [first_block, first_block + blocks_x * blocks_y)), blockIdx.y is the sample: no block is
// idle whatever the views' sizes.
//   boxes  [B, V, 4] float32, flips [B, V] uint8 (row b * V + v)
//   outs   [V]       pointer to view v's contiguous [B, ...] output (one dtype and layout)
//   views  [V, 4]    int32 (out_h, out_w, blocks_x, first_block)
// Launch: block (32, 8, 1), grid (total blocks of one sample over all views, B).
template <typename OutT, bool kNCHW>
__device__ __forceinline__ void resize_normalize_views(
    const unsigned char* const* __restrict__ srcs, const int* __restrict__ shapes,
    const float* __restrict__ boxes, const unsigned char* __restrict__ flips,
    const float* __restrict__ norm, OutT* const* __restrict__ outs,
    const int* __restrict__ views, int num_views) {
    const int block = (int)blockIdx.x;
    int v = 0;
    while (v + 1 < num_views && views[4 * (v + 1) + 3] <= block) ++v;
    const int out_h = views[4 * v + 0];
    const int out_w = views[4 * v + 1];
    const int local = block - views[4 * v + 3];
    const int ox = (local % views[4 * v + 2]) * (int)blockDim.x + (int)threadIdx.x;
    const int oy = (local / views[4 * v + 2]) * (int)blockDim.y + (int)threadIdx.y;
    if (ox >= out_w || oy >= out_h) return;
    const int b = (int)blockIdx.y;
    const int item = b * num_views + v;
    resample_pixel<OutT, kNCHW>(srcs[b], shapes[3 * b + 0], shapes[3 * b + 1],
                                (size_t)shapes[3 * b + 2], boxes + 4 * item, flips[item] != 0,
                                norm, outs[v], b, out_h, out_w, ox, oy);
}

}  // namespace chute_kernels

#define CHUTE_RESIZE_NORMALIZE_ENTRY(name, OutT, nchw)                                       \
    extern "C" __global__ void __launch_bounds__(256) name(                                  \
        const unsigned char* const* __restrict__ srcs, const int* __restrict__ shapes,       \
        const float* __restrict__ boxes, const unsigned char* __restrict__ flips,            \
        const float* __restrict__ norm, OutT* __restrict__ out, int out_h, int out_w) {      \
        chute_kernels::resize_normalize<OutT, nchw>(srcs, shapes, boxes, flips, norm, out,   \
                                                    out_h, out_w);                           \
    }

CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_u8_nhwc, unsigned char, false)
CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_u8_nchw, unsigned char, true)
CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_f16_nhwc, unsigned short, false)
CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_f16_nchw, unsigned short, true)
CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_f32_nhwc, float, false)
CHUTE_RESIZE_NORMALIZE_ENTRY(chute_resize_normalize_f32_nchw, float, true)

#define CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(name, OutT, nchw)                                 \
    extern "C" __global__ void __launch_bounds__(256) name(                                  \
        const unsigned char* const* __restrict__ srcs, const int* __restrict__ shapes,       \
        const float* __restrict__ boxes, const unsigned char* __restrict__ flips,            \
        const float* __restrict__ norm, OutT* const* __restrict__ outs,                      \
        const int* __restrict__ views, int num_views) {                                      \
        chute_kernels::resize_normalize_views<OutT, nchw>(srcs, shapes, boxes, flips, norm,  \
                                                          outs, views, num_views);           \
    }

CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_u8_nhwc, unsigned char, false)
CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_u8_nchw, unsigned char, true)
CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_f16_nhwc, unsigned short, false)
CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_f16_nchw, unsigned short, true)
CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_f32_nhwc, float, false)
CHUTE_RESIZE_NORMALIZE_VIEWS_ENTRY(chute_resize_normalize_views_f32_nchw, float, true)
