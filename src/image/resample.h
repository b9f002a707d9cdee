#pragma once

// Pillow's BICUBIC resize of an 8-bit RGB image, bit for bit: what `Image.resize((w, h),
// Image.BICUBIC)` (and so ImageOps.contain / pad) computes for mode "RGB".

#include "image/image.h"

namespace deepinfer::image {

// `in` resized to out_width x out_height with Pillow's separable convolution: cubic kernel
// a = -0.5 (support 2), widened by the reduction factor when a side shrinks (so a downscale
// averages, never aliases); coefficients computed in double, normalised to sum 1, then rounded to
// 22-bit fixed point; one pass per axis, each rounding and clipping to 8 bits: horizontal then
// vertical, except when the height shrinks by more than twice as many pixels as the width (then
// vertical first, as Pillow 13 orders them). A side whose size does not change skips its pass (a
// copy when neither does).
// Shapes: in [H, W, 3] -> [out_height, out_width, 3], uint8.
// Preconditions: in non-empty; out_width, out_height >= 1 (checked: DI_CHECK).
// Threads: any; no shared state. Cost: O(out_w * H * taps_w + out_w * out_h * taps_h) integer
//   multiply-adds; taps = 4 * max(1, in / out) + 1 per side.
// Source: Pillow 13.0.0 src/libImaging/Resample.c (precompute_coeffs, normalize_coeffs_8bpc,
//   ImagingResampleHorizontal_8bpc / Vertical_8bpc, ImagingResampleInner).
RgbImage ResizeBicubic(const RgbImage& in, int out_width, int out_height);

}  // namespace deepinfer::image
