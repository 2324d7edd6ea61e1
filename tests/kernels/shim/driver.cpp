// ctypes-callable driver: runs the kernels of resize_normalize.cu (one view and multi-crop
// views) serially over the whole grid.
#include "host_shim.h"

#include "resize_normalize.cu"

namespace {

template <typename OutT>
using Kernel = void (*)(const unsigned char* const*, const int*, const float*,
                        const unsigned char*, const float*, OutT*, int, int);

template <typename OutT>
void run_grid(Kernel<OutT> kernel, const unsigned* grid, const unsigned* block,
              const unsigned char* const* srcs, const int* shapes, const float* boxes,
              const unsigned char* flips, const float* norm, void* out, int out_h, int out_w) {
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned bz = 0; bz < grid[2]; ++bz)
        for (unsigned by = 0; by < grid[1]; ++by)
            for (unsigned bx = 0; bx < grid[0]; ++bx)
                for (unsigned tz = 0; tz < block[2]; ++tz)
                    for (unsigned ty = 0; ty < block[1]; ++ty)
                        for (unsigned tx = 0; tx < block[0]; ++tx) {
                            blockIdx = {bx, by, bz};
                            threadIdx = {tx, ty, tz};
                            kernel(srcs, shapes, boxes, flips, norm, static_cast<OutT*>(out),
                                   out_h, out_w);
                        }
}

}  // namespace

extern "C" int run_kernel(const char* name, const unsigned* grid, const unsigned* block,
                          const unsigned char* const* srcs, const int* shapes, const float* boxes,
                          const unsigned char* flips, const float* norm, void* out, int out_h,
                          int out_w) {
#define CHUTE_DISPATCH(entry, OutT)                                                          \
    if (strcmp(name, #entry) == 0) {                                                         \
        run_grid<OutT>(entry, grid, block, srcs, shapes, boxes, flips, norm, out, out_h,     \
                       out_w);                                                               \
        return 0;                                                                            \
    }
    CHUTE_DISPATCH(chute_resize_normalize_u8_nhwc, unsigned char)
    CHUTE_DISPATCH(chute_resize_normalize_u8_nchw, unsigned char)
    CHUTE_DISPATCH(chute_resize_normalize_f16_nhwc, unsigned short)
    CHUTE_DISPATCH(chute_resize_normalize_f16_nchw, unsigned short)
    CHUTE_DISPATCH(chute_resize_normalize_f32_nhwc, float)
    CHUTE_DISPATCH(chute_resize_normalize_f32_nchw, float)
#undef CHUTE_DISPATCH
    return -1;
}

namespace {

template <typename OutT>
using ViewsKernel = void (*)(const unsigned char* const*, const int*, const float*,
                             const unsigned char*, const float*, OutT* const*, const int*, int);

template <typename OutT>
void run_views_grid(ViewsKernel<OutT> kernel, const unsigned* grid, const unsigned* block,
                    const unsigned char* const* srcs, const int* shapes, const float* boxes,
                    const unsigned char* flips, const float* norm, void* const* outs,
                    const int* views, int num_views) {
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned bz = 0; bz < grid[2]; ++bz)
        for (unsigned by = 0; by < grid[1]; ++by)
            for (unsigned bx = 0; bx < grid[0]; ++bx)
                for (unsigned tz = 0; tz < block[2]; ++tz)
                    for (unsigned ty = 0; ty < block[1]; ++ty)
                        for (unsigned tx = 0; tx < block[0]; ++tx) {
                            blockIdx = {bx, by, bz};
                            threadIdx = {tx, ty, tz};
                            kernel(srcs, shapes, boxes, flips, norm,
                                   reinterpret_cast<OutT* const*>(outs), views, num_views);
                        }
}

}  // namespace

extern "C" int run_views_kernel(const char* name, const unsigned* grid, const unsigned* block,
                                const unsigned char* const* srcs, const int* shapes,
                                const float* boxes, const unsigned char* flips, const float* norm,
                                void* const* outs, const int* views, int num_views) {
#define CHUTE_DISPATCH(entry, OutT)                                                          \
    if (strcmp(name, #entry) == 0) {                                                         \
        run_views_grid<OutT>(entry, grid, block, srcs, shapes, boxes, flips, norm, outs,     \
                             views, num_views);                                              \
        return 0;                                                                            \
    }
    CHUTE_DISPATCH(chute_resize_normalize_views_u8_nhwc, unsigned char)
    CHUTE_DISPATCH(chute_resize_normalize_views_u8_nchw, unsigned char)
    CHUTE_DISPATCH(chute_resize_normalize_views_f16_nhwc, unsigned short)
    CHUTE_DISPATCH(chute_resize_normalize_views_f16_nchw, unsigned short)
    CHUTE_DISPATCH(chute_resize_normalize_views_f32_nhwc, float)
    CHUTE_DISPATCH(chute_resize_normalize_views_f32_nchw, float)
#undef CHUTE_DISPATCH
    return -1;
}

extern "C" void floats_to_half_bits(const float* values, uint16_t* bits, long n) {
    for (long i = 0; i < n; ++i) bits[i] = chute_kernels::float_to_half_bits(values[i]);
}
