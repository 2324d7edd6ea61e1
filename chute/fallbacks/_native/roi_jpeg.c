/* Region-of-interest JPEG decoding for chute's CPU path (libjpeg API of libjpeg-turbo >= 2.0).
 *
 * TurboJPEG 2 decodes whole frames only; the libjpeg API can skip what a crop does not need:
 * rows above the region are entropy-decoded but not transformed (jpeg_skip_scanlines), rows
 * below are never read, and columns outside are not transformed (jpeg_crop_scanline).
 * libjpeg reports fatal errors through a callback that must not return, hence this C shim
 * with setjmp/longjmp; the jitted code calls the functions below by symbol name.
 *
 * Decoder settings match TurboJPEG's defaults (islow DCT unless asked, fancy upsampling), so
 * the pixels of the region equal those of a full-frame tjDecompress2 away from its edges.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* Return codes of chute_roi_decode. */
#define ROI_OK 0
#define ROI_WARNING 1     /* libjpeg warned (truncation, extraneous bytes): caller decides */
#define ROI_FATAL 2       /* libjpeg rejected the data */
#define ROI_TOO_SMALL 3   /* dst_capacity is smaller than the region */
#define ROI_BAD_REGION 4  /* the requested region is empty or outside the scaled image */

#define ROI_FLAG_FASTDCT 1
#define ROI_ROWS_PER_CALL 16

typedef struct {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr err;
  jmp_buf escape;
} roi_decoder;

static void roi_error_exit(j_common_ptr cinfo) {
  roi_decoder *dec = (roi_decoder *)cinfo; /* cinfo is the first member */
  longjmp(dec->escape, 1);
}

static void roi_output_message(j_common_ptr cinfo) { (void)cinfo; /* silent: codes say it */ }

/* A decoder (one per thread), or NULL when out of memory or the library's ABI differs from
 * the header's (jpeg_CreateDecompress checks the version and the struct size). */
void *chute_roi_create(void) {
  roi_decoder *volatile dec = (roi_decoder *)calloc(1, sizeof(roi_decoder));
  if (dec == NULL) return NULL;
  dec->cinfo.err = jpeg_std_error(&dec->err);
  dec->err.error_exit = roi_error_exit;
  dec->err.output_message = roi_output_message;
  if (setjmp(dec->escape)) {
    free(dec);
    return NULL;
  }
  jpeg_create_decompress(&dec->cinfo);
  return dec;
}

void chute_roi_destroy(void *handle) {
  roi_decoder *dec = (roi_decoder *)handle;
  if (dec == NULL) return;
  jpeg_destroy_decompress(&dec->cinfo);
  free(dec);
}

/* The work of chute_roi_decode; libjpeg errors longjmp out of it. */
static int decode_region(roi_decoder *dec, const uint8_t *data, uint64_t size,
                         int32_t scale_denom, int32_t y0, int32_t y1, int32_t x0, int32_t x1,
                         uint8_t *dst, uint64_t dst_capacity, int32_t flags, int32_t *geometry) {
  struct jpeg_decompress_struct *cinfo = &dec->cinfo;
  int status = ROI_OK;
  jpeg_mem_src(cinfo, data, (unsigned long)size);
  jpeg_read_header(cinfo, TRUE);
  int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = (unsigned int)scale_denom;
  cinfo->dct_method = (flags & ROI_FLAG_FASTDCT) ? JDCT_IFAST : JDCT_ISLOW;
  jpeg_start_decompress(cinfo);
  int32_t out_w = (int32_t)cinfo->output_width, out_h = (int32_t)cinfo->output_height;
  if (x0 < 0) {
    x0 = 0;
    x1 = out_w;
  }
  if (y0 < 0 || y1 > out_h || y0 >= y1 || x0 < 0 || x1 > out_w || x0 >= x1) {
    jpeg_abort_decompress(cinfo);
    return ROI_BAD_REGION;
  }
  JDIMENSION left = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
  if (left > 0 || width < (JDIMENSION)out_w) jpeg_crop_scanline(cinfo, &left, &width);
  int channels = cinfo->output_components;
  uint64_t pitch = (uint64_t)width * (uint64_t)channels;
  if (pitch * (uint64_t)(y1 - y0) > dst_capacity) {
    jpeg_abort_decompress(cinfo);
    return ROI_TOO_SMALL;
  }
  if (y0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
  /* Several rows per call: with one, libjpeg upsamples 2-row groups into a spare row and
   * copies it out. */
  JSAMPROW rows[ROI_ROWS_PER_CALL];
  while ((int32_t)cinfo->output_scanline < y1) {
    int32_t first = (int32_t)cinfo->output_scanline, count = y1 - first;
    if (count > ROI_ROWS_PER_CALL) count = ROI_ROWS_PER_CALL;
    for (int32_t r = 0; r < count; r++) rows[r] = dst + pitch * (uint64_t)(first + r - y0);
    if (jpeg_read_scanlines(cinfo, rows, (JDIMENSION)count) == 0) break; /* cannot suspend */
  }
  if ((int32_t)cinfo->output_scanline < y1) status = ROI_FATAL;
  if (status == ROI_OK && dec->err.num_warnings > 0) status = ROI_WARNING;
  geometry[0] = (int32_t)left;
  geometry[1] = (int32_t)width;
  geometry[2] = channels;
  /* Stop here: rows below the region are never needed. */
  jpeg_abort_decompress(cinfo);
  return status;
}

/* Decode rows [y0, y1) and at least columns [x0, x1) of the image scaled by 1/scale_denom.
 *
 * geometry (int32[3]) receives: left column of the decoded region (x0 rounded down to an
 * iMCU boundary by libjpeg), its width, and channels (3 RGB, 4 for CMYK/YCCK images: raw Adobe
 * CMYK as TurboJPEG's TJPF_CMYK gives it). dst receives y1 - y0 rows of width * channels
 * bytes. x0 < 0 decodes the full width.
 */
int chute_roi_decode(void *handle, const uint8_t *data, uint64_t size, int32_t scale_denom,
                     int32_t y0, int32_t y1, int32_t x0, int32_t x1, uint8_t *dst,
                     uint64_t dst_capacity, int32_t flags, int32_t *geometry) {
  roi_decoder *dec = (roi_decoder *)handle;
  memset(geometry, 0, 3 * sizeof(int32_t));
  dec->err.num_warnings = 0;
  if (setjmp(dec->escape)) {
    jpeg_abort_decompress(&dec->cinfo);
    return ROI_FATAL;
  }
  return decode_region(dec, data, size, scale_denom, y0, y1, x0, x1, dst, dst_capacity, flags,
                       geometry);
}
