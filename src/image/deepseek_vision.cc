#include "image/deepseek_vision.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "image/resample.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image {
namespace {

// Python's round() on a float: half to even. nearbyint under the default rounding mode (to
// nearest, ties to even) is exactly that.
int64_t PyRound(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// llm_grid: ceil((best // patch) / downsample), with Python's float division before the ceil.
int64_t LlmSide(int64_t best, int patch_size, int downsample_ratio) {
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(best / patch_size) / downsample_ratio));
}

// Round to bfloat16, nearest-even (torch's float -> bfloat16 conversion; no NaN occurs here).
float RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  bits &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

std::array<float, 256> MakePixelValueTable() {
  std::array<float, 256> table;
  for (int k = 0; k < 256; ++k) {
    // float32 throughout, as torch computes: u8 -> float32, / 255, - 0.5, / 0.5.
    float x = static_cast<float>(k) / 255.0f;
    float y = (x - 0.5f) / 0.5f;
    table[k] = RoundToBf16(y);
  }
  return table;
}

}  // namespace

absl::Status CheckVisionKnobs(const VisionKnobs& knobs) {
  if (knobs.patch_size < 1 || knobs.downsample_ratio < 1 || knobs.max_image_tokens < 4 ||
      knobs.min_pixels < 0 || (knobs.max_wh_ratio && !(*knobs.max_wh_ratio > 0))) {
    return InvalidArgumentError(
        util::codes::kBadConfig,
        absl::StrCat("vision knobs out of range: patch_size ", knobs.patch_size,
                     ", downsample_ratio ", knobs.downsample_ratio, ", max_image_tokens ",
                     knobs.max_image_tokens, ", min_pixels ", knobs.min_pixels,
                     ", max_wh_ratio ", knobs.max_wh_ratio ? *knobs.max_wh_ratio : 0.0));
  }
  return absl::OkStatus();
}

int64_t NumImageTokens(int64_t n_llm_h, int64_t n_llm_w) { return n_llm_h * (n_llm_w + 1) + 2; }

std::array<int64_t, 2> SolveResizeRatio(double height, double width, int patch_size,
                                        int downsample_ratio, int max_image_tokens) {
  double r = height / width;
  double max_w = std::sqrt((max_image_tokens - 2) / r + 0.25) - 0.5;
  double max_h = max_w * r;
  int64_t cell = int64_t{patch_size} * downsample_ratio;
  // Python's `//` on these non-negative ints is plain integer division.
  if (max_w < 1.0) return {(max_image_tokens - 2) / 2 * cell, cell};  // one column
  if (max_h < 1.0) return {cell, (max_image_tokens - 3) * cell};      // one row
  // floor(max) * cell is an exact integer in double, so each quotient is rounded once, as
  // Python's int / int (or int / float) is.
  double beta = std::min(std::floor(max_w) * cell / width, std::floor(max_h) * cell / height);
  return {static_cast<int64_t>(std::floor(height * beta / patch_size)) * patch_size,
          static_cast<int64_t>(std::floor(width * beta / patch_size)) * patch_size};
}

absl::StatusOr<ImageGridPlan> PlanImageGrid(int width, int height, const VisionKnobs& knobs) {
  DI_RETURN_IF_ERROR(CheckVisionKnobs(knobs));
  if (width < 1 || height < 1) {
    return InvalidArgumentError(util::codes::kInvalidImage,
                                absl::StrCat("zero-size image (", width, "x", height, ")"));
  }
  const int p = knobs.patch_size;
  // Sides are doubles because the max_wh_ratio cap makes the width a float in the reference; the
  // area test on ints is exact in int64 (a double could round an area above 2^53).
  double w = width;
  double h = height;
  bool capped = knobs.max_wh_ratio && w > h * *knobs.max_wh_ratio;
  if (capped) w = h * *knobs.max_wh_ratio;
  bool small = capped ? (w * h > 0 && w * h < static_cast<double>(knobs.min_pixels))
                      : int64_t{width} * height < knobs.min_pixels;
  if (small) {
    // `** 0.5` in Python is C pow(x, 0.5), not sqrt: kept, so that the last bit agrees.
    double ratio = std::pow(static_cast<double>(knobs.min_pixels) / (w * h), 0.5);
    w = std::trunc(w * ratio);
    h = std::trunc(h * ratio);
  }
  int64_t best_w = static_cast<int64_t>(std::ceil(w / p)) * p;
  int64_t best_h = static_cast<int64_t>(std::ceil(h / p)) * p;
  ImageGridPlan plan;
  int64_t n_h = LlmSide(best_h, p, knobs.downsample_ratio);
  int64_t n_w = LlmSide(best_w, p, knobs.downsample_ratio);
  if (NumImageTokens(n_h, n_w) > knobs.max_image_tokens) {
    auto [solved_h, solved_w] =
        SolveResizeRatio(h, w, p, knobs.downsample_ratio, knobs.max_image_tokens);
    best_h = solved_h;
    best_w = solved_w;
    n_h = LlmSide(best_h, p, knobs.downsample_ratio);
    n_w = LlmSide(best_w, p, knobs.downsample_ratio);
    plan.solve_resize_ratio_used = true;
  }
  // The reference asserts the bound after solving; a grid without a patch on a side would crash
  // its resize. Both are impossible for sane sizes, but a request must never abort the server.
  if (best_w < p || best_h < p || NumImageTokens(n_h, n_w) > knobs.max_image_tokens) {
    return InvalidArgumentError(
        util::codes::kInvalidImage,
        absl::StrCat("no patch grid fits a ", width, "x", height, " image in ",
                     knobs.max_image_tokens, " tokens"));
  }
  plan.best_width = static_cast<int>(best_w);
  plan.best_height = static_cast<int>(best_h);
  plan.n_vit_w = static_cast<int>(best_w / p);
  plan.n_vit_h = static_cast<int>(best_h / p);
  plan.n_llm_w = static_cast<int>(n_w);
  plan.n_llm_h = static_cast<int>(n_h);
  return plan;
}

PadGeometry PlanPad(int width, int height, int target_width, int target_height) {
  // ImageOps.contain compares the two aspect ratios as floats, then fixes the side that fits.
  double image_ratio = static_cast<double>(width) / height;
  double target_ratio = static_cast<double>(target_width) / target_height;
  PadGeometry g;
  g.fitted_width = target_width;
  g.fitted_height = target_height;
  if (image_ratio > target_ratio) {
    g.fitted_height = static_cast<int>(PyRound(static_cast<double>(height) / width * target_width));
  } else if (image_ratio < target_ratio) {
    g.fitted_width = static_cast<int>(PyRound(static_cast<double>(width) / height * target_height));
  }
  // ImageOps.pad centres along the side that differs only (the other offset stays 0).
  if (g.fitted_width != target_width) {
    g.pad_left = static_cast<int>(PyRound((target_width - g.fitted_width) * 0.5));
  } else if (g.fitted_height != target_height) {
    g.pad_top = static_cast<int>(PyRound((target_height - g.fitted_height) * 0.5));
  }
  g.pad_right = target_width - g.fitted_width - g.pad_left;
  g.pad_bottom = target_height - g.fitted_height - g.pad_top;
  return g;
}

RgbImage PadToSize(const RgbImage& image, int target_width, int target_height, uint8_t fill) {
  DI_CHECK(target_width >= 1 && target_height >= 1);
  PadGeometry g = PlanPad(image.width, image.height, target_width, target_height);
  if (g.fitted_width == target_width && g.fitted_height == target_height) {
    return ResizeBicubic(image, target_width, target_height);
  }
  RgbImage out;
  out.width = target_width;
  out.height = target_height;
  out.pixels.assign(static_cast<size_t>(target_width) * target_height * 3, fill);
  if (g.fitted_width < 1 || g.fitted_height < 1) return out;  // Pillow: an empty paste
  RgbImage fitted = ResizeBicubic(image, g.fitted_width, g.fitted_height);
  for (int y = 0; y < g.fitted_height; ++y) {
    std::memcpy(out.Row(g.pad_top + y) + static_cast<size_t>(g.pad_left) * 3, fitted.Row(y),
                static_cast<size_t>(g.fitted_width) * 3);
  }
  return out;
}

RgbImage ResizeForVision(const RgbImage& image, const ImageGridPlan& plan,
                         const VisionKnobs& knobs) {
  // The reference tests the decoded size here (>=), where the plan tested the width cap (>).
  if (knobs.max_wh_ratio &&
      static_cast<double>(image.width) >= *knobs.max_wh_ratio * image.height) {
    return ResizeBicubic(image, plan.best_width, plan.best_height);
  }
  return PadToSize(image, plan.best_width, plan.best_height, 127);
}

const std::array<float, 256>& PixelValueTable() {
  static const std::array<float, 256> table = MakePixelValueTable();
  return table;
}

std::vector<float> PixelValues(const RgbImage& resized, int patch_size) {
  const int p = patch_size;
  DI_CHECK(p >= 1 && resized.width % p == 0 && resized.height % p == 0);
  const int n_w = resized.width / p;
  const int n_h = resized.height / p;
  const std::array<float, 256>& table = PixelValueTable();
  std::vector<float> out(static_cast<size_t>(n_h) * n_w * 3 * p * p);
  float* dst = out.data();
  for (int ph = 0; ph < n_h; ++ph) {
    for (int pw = 0; pw < n_w; ++pw) {
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < p; ++i) {
          const uint8_t* src = resized.Row(ph * p + i) + static_cast<size_t>(pw) * p * 3 + c;
          for (int j = 0; j < p; ++j) *dst++ = table[src[j * 3]];
        }
      }
    }
  }
  return out;
}

absl::StatusOr<PreprocessedImage> PreprocessImage(const RgbImage& image,
                                                  const VisionKnobs& knobs) {
  PreprocessedImage out;
  DI_ASSIGN_OR_RETURN(out.plan, PlanImageGrid(image.width, image.height, knobs));
  out.resized = ResizeForVision(image, out.plan, knobs);
  out.pixel_values = PixelValues(out.resized, knobs.patch_size);
  return out;
}

}  // namespace deepinfer::image
