#pragma once

// DeepSeek-V4.1's image preprocessing: the resize plan (pixel size, ViT patch grid, LLM token
// grid), the resize itself (ImageOps.pad with Pillow's BICUBIC on a grey canvas), the bf16-valued
// pixel values in patch order, and the token types of an image's span in the prompt.
//
// Source: DeepSeek-V4.1-Flash inference/image_processor.py (HF revision dba1be0a; plan_image_grid,
// safe_resize, solve_resize_ratio, llm_grid, load_image, image_token_types) with Pillow 13.0.0;
// ../shared/goldens/deepseek_v41_vision/README.md spells the semantics out. All planning
// arithmetic follows Python's: int() truncates, round() is banker's, `/` is float division.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "image/image.h"

namespace deepinfer::image {

// The image knobs of a model's vision_config, with the release's values as defaults.
struct VisionKnobs {
  int patch_size = 14;                 // ViT patch side, pixels
  int downsample_ratio = 3;            // aligner cell = downsample_ratio x downsample_ratio patches
  int max_image_tokens = 1024;         // upper bound of one image's span, delimiters included
  int64_t min_pixels = 295936;         // smaller images are upscaled to about this area (544^2)
  std::optional<double> max_wh_ratio;  // null in the release; see PlanImageGrid / ResizeForVision
};

// OK when the knobs are usable: patch_size, downsample_ratio >= 1, max_image_tokens >= 4 (the
// span of a 1x1 grid), min_pixels >= 0, max_wh_ratio > 0 when set.
// Errors: bad_config.
absl::Status CheckVisionKnobs(const VisionKnobs& knobs);

// The plan for one image.
struct ImageGridPlan {
  int best_width = 0;   // pixel size after the resize (multiples of patch_size)
  int best_height = 0;
  int n_vit_h = 0;      // patch grid = best / patch_size
  int n_vit_w = 0;
  int n_llm_h = 0;      // token grid = ceil(n_vit / downsample_ratio)
  int n_llm_w = 0;
  bool solve_resize_ratio_used = false;  // the first plan was over max_image_tokens

  int num_patches() const { return n_vit_h * n_vit_w; }
  int num_image_tokens() const { return n_llm_h * (n_llm_w + 1) + 2; }
};

// Tokens of a span for an n_llm_h x n_llm_w grid: n_llm_h * (n_llm_w + 1) + 2.
int64_t NumImageTokens(int64_t n_llm_h, int64_t n_llm_w);

// plan_image_grid: with max_wh_ratio set and width > height * ratio, width = height * ratio;
// if width * height < min_pixels, both sides scale by sqrt(min_pixels / area) and truncate;
// best = ceil(side / patch) * patch; when the span is over max_image_tokens, SolveResizeRatio.
// max_image_tokens is an upper bound, not a target (2048^2 plans 994 of 1024).
// Units: pixels. Errors: invalid_image (width or height < 1, or no grid of at least one patch
// per side fits), bad_config (CheckVisionKnobs). Threads: pure function.
absl::StatusOr<ImageGridPlan> PlanImageGrid(int width, int height, const VisionKnobs& knobs);

// solve_resize_ratio: the largest aspect-keeping pixel size (height, width) whose token grid fits
// in max_image_tokens; very tall inputs collapse to one column, very wide ones to one row.
// `height` and `width` are doubles because the reference passes a float width when max_wh_ratio
// capped it. Returns {height, width} in that order, as the reference does. Threads: pure.
std::array<int64_t, 2> SolveResizeRatio(double height, double width, int patch_size,
                                        int downsample_ratio, int max_image_tokens);

// Where ImageOps.pad puts an image of width x height in a target_width x target_height box:
// ImageOps.contain's size (the side that does not fit is round(h / w * target_w) or
// round(w / h * target_h), banker's rounding; it can round to 0) and the paste offset
// round((target - fitted) * 0.5) (banker's: a 9-pixel gap pads 4 + 5).
struct PadGeometry {
  int fitted_width = 0;
  int fitted_height = 0;
  int pad_left = 0;
  int pad_top = 0;
  int pad_right = 0;
  int pad_bottom = 0;
};
PadGeometry PlanPad(int width, int height, int target_width, int target_height);

// ImageOps.pad(image, (target_width, target_height), BICUBIC, color=(fill, fill, fill)): resized
// by ResizeBicubic to PlanPad's fitted size and pasted on a fill-coloured canvas (all fill when a
// fitted side rounds to 0, as Pillow then resizes to an empty image).
// Shapes: [H, W, 3] -> [target_height, target_width, 3] uint8. Preconditions: targets >= 1.
RgbImage PadToSize(const RgbImage& image, int target_width, int target_height, uint8_t fill);

// load_image's resize: with max_wh_ratio set and width >= ratio * height, a plain BICUBIC resize
// to the plan's size (aspect not kept); otherwise PadToSize(..., 127).
RgbImage ResizeForVision(const RgbImage& image, const ImageGridPlan& plan,
                         const VisionKnobs& knobs);

// value_table[k] = bf16_rne((float32(k) / 255 - 0.5) / 0.5), as float32 (0 -> -1, 127 ->
// -0.00390625, 255 -> 1): the reference's torch float32 arithmetic then .to(bfloat16).
const std::array<float, 256>& PixelValueTable();

// The ViT input: patches in row-major grid order, each flattened (channel, row, column).
// Shapes: resized [n_vit_h * patch, n_vit_w * patch, 3] uint8 -> float32
//   [n_vit_h * n_vit_w, 3, patch, patch], every value bf16-representable.
// Preconditions: resized's sides are multiples of patch_size (DI_CHECK).
std::vector<float> PixelValues(const RgbImage& resized, int patch_size);

// The span's token types (start, image, newline, end) are the model's: arch/vision_tower.h
// ImageSpanTokenTypes.

// Everything one image contributes: the plan, the resized uint8 image and the pixel values.
struct PreprocessedImage {
  ImageGridPlan plan;
  RgbImage resized;                // [best_height, best_width, 3]
  std::vector<float> pixel_values;  // [num_patches, 3, patch, patch]
};

// load_image after decoding: PlanImageGrid, ResizeForVision, PixelValues.
// Errors: as PlanImageGrid. Threads: any. Cost: one resize plus 3 floats per output pixel.
absl::StatusOr<PreprocessedImage> PreprocessImage(const RgbImage& image,
                                                  const VisionKnobs& knobs);

}  // namespace deepinfer::image
