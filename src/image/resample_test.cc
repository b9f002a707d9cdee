#include "image/resample.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/sha256.h"

namespace deepinfer::image {
namespace {

// A 5x3 RGB image and what Pillow 13.0.0 `Image.fromarray(a).resize(size, Image.BICUBIC)` gives
// for it (computed once with Pillow; every size exercises a different pass combination).
RgbImage Source() {
  RgbImage image;
  image.width = 5;
  image.height = 3;
  image.pixels = {0,   255, 0,   241, 169, 65,  6,   160, 149, 106, 38,  175, 188, 205, 175,
                  229, 98,  249, 10,  148, 95,  255, 0,   255, 66,  39,  106, 213, 171, 45,
                  167, 57,  69,  81,  55,  14,  153, 178, 215, 76,  52,  39,  250, 72,  215};
  return image;
}

void ExpectResize(int width, int height, const std::vector<uint8_t>& expected) {
  RgbImage out = ResizeBicubic(Source(), width, height);
  EXPECT_EQ(out.width, width);
  EXPECT_EQ(out.height, height);
  EXPECT_EQ(out.pixels, expected);
}

TEST(ResizeBicubicTest, UpscalingBothSidesMatchesPillow) {
  ExpectResize(8, 4, {0,   255, 0,   106, 227, 13,  251, 168, 69,  65,  176, 121, 2,   127,
                      159, 102, 38,  177, 162, 134, 182, 192, 219, 182, 159, 157, 173, 121,
                      166, 131, 93,  158, 92,  153, 79,  186, 147, 34,  207, 80,  34,  141,
                      149, 130, 99,  211, 201, 78,  235, 69,  205, 131, 90,  138, 23,  111,
                      70,  182, 73,  206, 200, 48,  213, 69,  42,  82,  156, 97,  82,  238,
                      137, 101, 169, 55,  63,  129, 46,  30,  85,  56,  16,  133, 160, 169,
                      128, 160, 173, 74,  57,  37,  179, 55,  141, 255, 67,  238});
}

TEST(ResizeBicubicTest, DownscalingWidensTheKernelAsPillowDoes) {
  ExpectResize(2, 2, {114, 157, 111, 131, 106, 151, 131, 83, 121, 155, 83, 130});
  ExpectResize(3, 3, {104, 223, 24,  82,  127, 139, 150, 132, 178, 136, 122, 185, 151, 36,
                      187, 154, 113, 71,  131, 56,  45,  112, 125, 127, 178, 64,  143});
}

TEST(ResizeBicubicTest, AVerticalOnlyResizeSkipsTheHorizontalPass) {
  ExpectResize(5, 7, {0,   255, 0,   255, 171, 62,  0,   175, 139, 110, 38,  182, 186, 208, 187,
                      22,  241, 25,  219, 168, 68,  30,  143, 159, 102, 38,  169, 190, 203, 161,
                      132, 170, 151, 107, 163, 87,  152, 59,  211, 83,  38,  141, 200, 193, 91,
                      229, 98,  249, 10,  148, 95,  255, 0,   255, 66,  39,  106, 213, 171, 45,
                      217, 70,  186, 26,  106, 61,  227, 68,  244, 68,  45,  72,  231, 125, 111,
                      175, 60,  88,  72,  64,  22,  165, 160, 220, 75,  51,  45,  247, 81,  198,
                      161, 53,  52,  88,  46,  6,   143, 195, 211, 77,  53,  33,  254, 62,  231});
}

TEST(ResizeBicubicTest, UpscalingOneSideWhileShrinkingTheOtherMatchesPillow) {
  ExpectResize(11, 1, {144, 134, 123, 135, 132, 109, 112, 130, 71,  103, 125,
                       68,  130, 117, 148, 148, 103, 211, 114, 69,  173, 80,
                       42,  112, 125, 78,  110, 199, 137, 131, 230, 161, 139});
}

// A deterministic source image (the same formula generated the Pillow results below).
RgbImage Pattern(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        image.pixels.push_back(static_cast<uint8_t>((x * 31 + y * 17 + c * 7 + (x * y) % 13) % 256));
      }
    }
  }
  return image;
}

std::string Sha256Hex(const std::vector<uint8_t>& bytes) {
  util::Sha256Digest d =
      util::Sha256(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  std::string hex;
  for (uint8_t b : d) {
    hex += "0123456789abcdef"[b >> 4];
    hex += "0123456789abcdef"[b & 15];
  }
  return hex;
}

TEST(ResizeBicubicTest, PassOrderFollowsPillow13ForEveryDirectionMix) {
  // sha256 of Pillow 13.0.0's `Image.fromarray(pattern).resize((w, h), Image.BICUBIC)`.
  struct Case {
    int in_w, in_h, out_w, out_h;
    const char* sha256;
  };
  const Case cases[] = {
      // width grows, height shrinks: vertical pass first
      {37, 23, 50, 9, "fdc14dd4ec9428b500c0f8474b62a31be65f5d4d5c1ed29d4d049b1aeb4199bb"},
      // both shrink, the height by more than twice as many pixels: vertical first
      {64, 48, 60, 20, "9413733554250d66fa13b6e4bb46384692de043385722b7c92fa8716cdeb9410"},
      // both shrink otherwise, or a side grows: horizontal first
      {64, 48, 30, 40, "4fddc04dc557281fde91531df96e941b30eee38d1beb161c17892a260c7fc45f"},
      {40, 10, 70, 42, "00145df423e013c31e8e8fdb51d8f11f1dd301f143293b6f43ac7ab15e1deb3b"},
      {300, 200, 97, 61, "cffcb07746e7d5e5ffbee4c9fbd00e5ba5dbf7fb471e5c247af6961880050eaa"},
  };
  for (const Case& c : cases) {
    RgbImage out = ResizeBicubic(Pattern(c.in_w, c.in_h), c.out_w, c.out_h);
    EXPECT_EQ(Sha256Hex(out.pixels), c.sha256)
        << c.in_w << "x" << c.in_h << " -> " << c.out_w << "x" << c.out_h;
  }
}

TEST(ResizeBicubicTest, TheSameSizeIsACopy) {
  RgbImage out = ResizeBicubic(Source(), 5, 3);
  EXPECT_EQ(out.pixels, Source().pixels);
}

TEST(ResizeBicubicTest, AFlatImageStaysFlatAtAnySize) {
  RgbImage flat;
  flat.width = 37;
  flat.height = 500;
  flat.pixels.assign(37 * 500 * 3, 200);
  for (auto [w, h] : {std::pair{148, 2002}, {9, 17}, {1, 1}, {1000, 3}}) {
    RgbImage out = ResizeBicubic(flat, w, h);
    ASSERT_EQ(out.pixels.size(), static_cast<size_t>(w) * h * 3);
    for (uint8_t v : out.pixels) ASSERT_EQ(v, 200) << w << "x" << h;
  }
}

}  // namespace
}  // namespace deepinfer::image
