// libFuzzer target for image inputs (image/image.h, deepseek_vision.h, resample.h): a client's
// image bytes are outside input, so any bytes must decode or give invalid_image /
// unsupported_image_format / image_too_large, never a crash, a leak (libpng's and libjpeg's
// longjmp error paths) or a huge allocation; a decoded image then goes through the DeepSeek
// plan, ImageOps.pad resize and pixel values with knobs taken from the input.
//
// Input layout: 4 option bytes, then the image file (PNG, JPEG, WebP, GIF, or anything).
//   byte 0: patch_size = 1 + (b & 15); downsample_ratio = 1 + (b >> 4 & 3); bit 6: max_wh_ratio
//           set (1 + byte 3 / 64, i.e. 1 to 4.98); bit 7: also plan a size read from byte 3
//   byte 1: max_image_tokens = 4 + b / 4 (4 to 67)
//   byte 2: min_pixels = b * 64 (0 to 16320)
//   byte 3: see above
// Bounds that keep one run small (rss limit 2 GB): decode limits 4 MiB / 2 MP; the planned pixel
// area is at most max_image_tokens * (patch * downsample)^2 <= 67 * 64^2 (about 275k pixels).
// Seeds: tests/fuzz/corpus/image (tests/fuzz/make_seeds.py; see README.md).

#include <cstddef>
#include <cstdint>
#include <span>

#include "image/deepseek_vision.h"
#include "image/image.h"
#include "image/resample.h"
#include "util/status.h"

namespace di = deepinfer::image;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  di::VisionKnobs knobs;
  knobs.patch_size = 1 + (data[0] & 15);
  knobs.downsample_ratio = 1 + ((data[0] >> 4) & 3);
  if (data[0] & 0x40) knobs.max_wh_ratio = 1.0 + data[3] / 64.0;
  knobs.max_image_tokens = 4 + data[1] / 4;
  knobs.min_pixels = int64_t{data[2]} * 64;
  if (data[0] & 0x80) {
    // The planner alone on sizes up to 2^31 - 1 (no resize): it must stay within the budget.
    int w = static_cast<int>((uint32_t{data[3]} << 23) | (size & 0x7fffff));
    int h = static_cast<int>((size * 2654435761u) & 0x7fffffff);
    auto plan = di::PlanImageGrid(w, h, knobs);
    if (plan.ok()) DI_CHECK(plan->num_image_tokens() <= knobs.max_image_tokens);
  }
  di::DecodeLimits limits{.max_bytes = size_t{4} << 20, .max_pixels = 2'000'000};
  auto image = di::DecodeImage(std::span(data + 4, size - 4), limits);
  if (!image.ok()) {
    std::string code = deepinfer::ErrorCodeOf(image.status());
    DI_CHECK(code == "invalid_image" || code == "unsupported_image_format" ||
             code == "image_too_large");
    return 0;
  }
  DI_CHECK(image->width >= 1 && image->height >= 1);
  DI_CHECK(image->pixels.size() == size_t(image->width) * image->height * 3);
  auto pre = di::PreprocessImage(*image, knobs);
  if (!pre.ok()) return 0;
  const di::ImageGridPlan& plan = pre->plan;
  DI_CHECK(plan.num_image_tokens() <= knobs.max_image_tokens);
  DI_CHECK(pre->resized.width == plan.best_width && pre->resized.height == plan.best_height);
  DI_CHECK(pre->pixel_values.size() ==
           size_t(plan.num_patches()) * 3 * knobs.patch_size * knobs.patch_size);
  // A free resize in both directions at once (the pass-order branch), on a small output.
  di::RgbImage small = di::ResizeBicubic(*image, 1 + data[3] % 97, 1 + data[2] % 89);
  DI_CHECK(small.pixels.size() == size_t(small.width) * small.height * 3);
  return 0;
}
