// Decoding: every format's modes as Pillow's convert("RGB") gives them (the expected values were
// checked once with Pillow 13.0.0), and hostile input (empty, unknown, truncated, corrupt,
// header bombs) answered with a stable error code, never a crash.

#include <gtest/gtest.h>
#include <webp/encode.h>
#include <zlib.h>

#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "image/image.h"
#include "util/status.h"

namespace deepinfer::image {
namespace {

using Bytes = std::vector<uint8_t>;

void Append(Bytes* out, std::string_view s) { out->insert(out->end(), s.begin(), s.end()); }
void AppendBe32(Bytes* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}
void AppendLe16(Bytes* out, int v) {
  out->push_back(static_cast<uint8_t>(v & 255));
  out->push_back(static_cast<uint8_t>(v >> 8));
}

void AppendChunk(Bytes* png, std::string_view type, const Bytes& data) {
  AppendBe32(png, static_cast<uint32_t>(data.size()));
  Bytes body(type.begin(), type.end());
  body.insert(body.end(), data.begin(), data.end());
  png->insert(png->end(), body.begin(), body.end());
  AppendBe32(png, static_cast<uint32_t>(crc32(0, body.data(), body.size())));
}

// A PNG of `width` x `height`, colour type and bit depth as given, whose filtered rows (filter
// byte included) are `raw`; `extra` chunks (PLTE, tRNS) go before IDAT.
Bytes MakePng(uint32_t width, uint32_t height, int color_type, int bit_depth, const Bytes& raw,
              const std::vector<std::pair<std::string, Bytes>>& extra = {}) {
  Bytes png;
  Append(&png, "\x89PNG\r\n\x1a\n");
  Bytes ihdr;
  AppendBe32(&ihdr, width);
  AppendBe32(&ihdr, height);
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(bit_depth), static_cast<uint8_t>(color_type), 0,
                           0, 0});
  AppendChunk(&png, "IHDR", ihdr);
  for (const auto& [type, data] : extra) AppendChunk(&png, type, data);
  uLongf size = compressBound(raw.size());
  Bytes z(size);
  compress(z.data(), &size, raw.data(), raw.size());
  z.resize(size);
  AppendChunk(&png, "IDAT", z);
  AppendChunk(&png, "IEND", {});
  return png;
}

absl::StatusOr<RgbImage> Decode(const Bytes& bytes, const DecodeLimits& limits = {}) {
  return DecodeImage(std::span(bytes.data(), bytes.size()), limits);
}

void ExpectCode(const absl::StatusOr<RgbImage>& result, std::string_view code) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(ErrorCodeOf(result.status()), code) << result.status();
}

Bytes Rgb(std::initializer_list<int> values) { return Bytes(values.begin(), values.end()); }

TEST(DecodeImageTest, RgbPngDecodesExactly) {
  Bytes raw = {0, 1, 2, 3, 4, 5, 6, 0, 7, 8, 9, 10, 11, 12};
  absl::StatusOr<RgbImage> image = Decode(MakePng(2, 2, 2, 8, raw));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 2);
  EXPECT_EQ(image->height, 2);
  EXPECT_EQ(image->pixels, Rgb({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST(DecodeImageTest, RgbaPngDropsAlphaWithoutCompositing) {
  Bytes raw = {0, 10, 20, 30, 0, 40, 50, 60, 128};
  absl::StatusOr<RgbImage> image = Decode(MakePng(2, 1, 6, 8, raw));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->pixels, Rgb({10, 20, 30, 40, 50, 60}));
}

TEST(DecodeImageTest, PalettePngExpandsAndIgnoresTransparency) {
  Bytes raw = {0, 0b00011011};  // 2-bit indices 0, 1, 2, 3
  Bytes plte = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  Bytes trns = {0, 0, 0, 0};
  absl::StatusOr<RgbImage> image =
      Decode(MakePng(4, 1, 3, 2, raw, {{"PLTE", plte}, {"tRNS", trns}}));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->pixels, plte);
}

TEST(DecodeImageTest, GrayPngsReplicateAndScaleAsPillowDoes) {
  // 2-bit grey scales to 0, 85, 170, 255; 1-bit to 0 / 255 (Pillow modes "L" and "1").
  absl::StatusOr<RgbImage> two = Decode(MakePng(4, 1, 0, 2, {0, 0b00011011}));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->pixels, Rgb({0, 0, 0, 85, 85, 85, 170, 170, 170, 255, 255, 255}));
  absl::StatusOr<RgbImage> one = Decode(MakePng(4, 1, 0, 1, {0, 0b10100000}));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->pixels, Rgb({255, 255, 255, 0, 0, 0, 255, 255, 255, 0, 0, 0}));
}

TEST(DecodeImageTest, SixteenBitGrayClipsWhileSixteenBitColourKeepsTheHighByte) {
  // Pillow: grey 16 is mode "I;16", whose RGB conversion clips at 255; RGB 16 / LA 16 take the
  // high byte. Values 0x0012, 0x00ff, 0x0100, 0x1234, 0xffff.
  Bytes gray = {0, 0x00, 0x12, 0x00, 0xff, 0x01, 0x00, 0x12, 0x34, 0xff, 0xff};
  absl::StatusOr<RgbImage> g = Decode(MakePng(5, 1, 0, 16, gray));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->pixels, Rgb({18, 18, 18, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
                            255}));
  Bytes la = {0, 0x00, 0x12, 0x80, 0x00, 0x12, 0x34, 0x80, 0x00};
  absl::StatusOr<RgbImage> a = Decode(MakePng(2, 1, 4, 16, la));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->pixels, Rgb({0, 0, 0, 18, 18, 18}));
}

TEST(DecodeImageTest, EmptyInputIsInvalidImage) { ExpectCode(Decode({}), "invalid_image"); }

TEST(DecodeImageTest, UnknownMagicIsUnsupportedImageFormat) {
  Bytes bmp = {'B', 'M', 0, 0, 0, 0, 0, 0};
  ExpectCode(Decode(bmp), "unsupported_image_format");
  ExpectCode(Decode(Bytes{0x89}), "unsupported_image_format");
}

TEST(DecodeImageTest, InputOverTheByteLimitIsTooLargeBeforeSniffing) {
  Bytes png = MakePng(1, 1, 2, 8, {0, 1, 2, 3});
  ExpectCode(Decode(png, {.max_bytes = 10}), "image_too_large");
}

TEST(DecodeImageTest, TruncatedPngIsInvalidImage) {
  Bytes raw(1 + 64 * 3, 7);
  std::vector<Bytes> cuts;
  Bytes png = MakePng(64, 1, 2, 8, raw);
  for (size_t n : {size_t{8}, size_t{20}, size_t{33}, png.size() - 20}) {
    ExpectCode(Decode(Bytes(png.begin(), png.begin() + n)), "invalid_image");
  }
}

TEST(DecodeImageTest, CorruptPngIsInvalidImage) {
  Bytes png = MakePng(2, 2, 2, 8, Bytes(14, 9));
  png[png.size() - 20] ^= 0xff;  // inside IDAT: its CRC no longer matches
  ExpectCode(Decode(png), "invalid_image");
  Bytes bad_depth = MakePng(2, 2, 2, 3, Bytes(14, 9));  // RGB at 3 bits does not exist
  ExpectCode(Decode(bad_depth), "invalid_image");
}

TEST(DecodeImageTest, ZeroSizePngIsInvalidImage) {
  ExpectCode(Decode(MakePng(0, 5, 2, 8, {0})), "invalid_image");
}

TEST(DecodeImageTest, APngHeaderOf100000SquaredIsTooLargeBeforeAllocating) {
  // Only a few bytes of IDAT: decoding would fail; the header check must answer first.
  Bytes png = MakePng(100000, 100000, 2, 8, {0, 0, 0, 0});
  ExpectCode(Decode(png), "image_too_large");
  ExpectCode(Decode(MakePng(2, 2, 2, 8, Bytes(14, 0)), {.max_pixels = 3}), "image_too_large");
}

// A GIF whose LZW stream sends every index as a literal, with a clear code before every second
// one so that the code size never grows (any decoder must accept it).
Bytes MakeGif(int screen_w, int screen_h, const Bytes& palette, int left, int top, int w, int h,
              const Bytes& indices, int transparent = -1) {
  Bytes gif;
  Append(&gif, "GIF89a");
  AppendLe16(&gif, screen_w);
  AppendLe16(&gif, screen_h);
  int entries = static_cast<int>(palette.size() / 3);
  int bits = 1;
  while ((1 << bits) < entries) ++bits;
  gif.insert(gif.end(), {static_cast<uint8_t>(0x80 | (bits - 1)), 0, 0});
  gif.insert(gif.end(), palette.begin(), palette.end());
  gif.insert(gif.end(), 3 * (1 << bits) - palette.size(), 0);
  if (transparent >= 0) {
    gif.insert(gif.end(), {0x21, 0xf9, 4, 1, 0, 0, static_cast<uint8_t>(transparent), 0});
  }
  gif.push_back(0x2c);
  for (int v : {left, top, w, h}) AppendLe16(&gif, v);
  gif.push_back(0);
  const int min_size = 2, clear = 4, eoi = 5, code_bits = 3;
  Bytes lzw;
  uint32_t acc = 0;
  int n = 0;
  auto put = [&](int code) {
    acc |= static_cast<uint32_t>(code) << n;
    for (n += code_bits; n >= 8; n -= 8, acc >>= 8) lzw.push_back(acc & 255);
  };
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i % 2 == 0) put(clear);
    put(indices[i]);
  }
  put(eoi);
  if (n > 0) lzw.push_back(acc & 255);
  gif.push_back(min_size);
  for (size_t i = 0; i < lzw.size(); i += 255) {
    size_t len = std::min<size_t>(255, lzw.size() - i);
    gif.push_back(static_cast<uint8_t>(len));
    gif.insert(gif.end(), lzw.begin() + i, lzw.begin() + i + len);
  }
  gif.push_back(0);
  gif.push_back(0x3b);
  return gif;
}

const Bytes kGifPalette = {10, 20, 30, 200, 0, 0, 0, 200, 0, 0, 0, 200};

TEST(DecodeImageTest, GifFirstFrameSitsOnTheScreenFilledWithTheTransparentIndex) {
  absl::StatusOr<RgbImage> image = Decode(MakeGif(4, 3, kGifPalette, 1, 1, 2, 2, {1, 2, 3, 0}, 2));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 4);
  EXPECT_EQ(image->height, 3);
  // Pillow 13: every pixel outside the frame is palette[2]; the transparent index inside the
  // frame shows its colour too (transparency is ignored).
  EXPECT_EQ(image->pixels,
            Rgb({0, 200, 0, 0, 200, 0, 0, 200, 0, 0, 200, 0, 0, 200, 0, 200, 0, 0,
                 0, 200, 0, 0, 200, 0, 0, 200, 0, 0, 0, 200, 10, 20, 30, 0, 200, 0}));
}

TEST(DecodeImageTest, GifWithoutTransparencyFillsIndexZero) {
  absl::StatusOr<RgbImage> image = Decode(MakeGif(4, 3, kGifPalette, 1, 1, 2, 2, {1, 2, 3, 0}));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->pixels,
            Rgb({10, 20, 30, 10, 20, 30, 10, 20, 30, 10, 20, 30, 10, 20, 30, 200, 0, 0,
                 0, 200, 0, 10, 20, 30, 10, 20, 30, 0, 0, 200, 10, 20, 30, 10, 20, 30}));
}

TEST(DecodeImageTest, GifFrameLargerThanTheScreenGrowsTheCanvasAndMissingEntriesAreBlack) {
  Bytes two_colours = {10, 20, 30, 200, 0, 0};
  absl::StatusOr<RgbImage> image =
      Decode(MakeGif(2, 2, two_colours, 1, 0, 2, 3, {1, 3, 0, 1, 3, 2}));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 3);
  EXPECT_EQ(image->height, 3);
  EXPECT_EQ(image->pixels, Rgb({10, 20, 30, 200, 0, 0, 0, 0, 0, 10, 20, 30, 10, 20, 30,
                                200, 0, 0, 10, 20, 30, 0, 0, 0, 0, 0, 0}));
}

TEST(DecodeImageTest, TruncatedOrHugeGifIsRefused) {
  Bytes gif = MakeGif(4, 3, kGifPalette, 1, 1, 2, 2, {1, 2, 3, 0});
  for (size_t n : {size_t{6}, size_t{13}, size_t{30}, gif.size() - 4}) {
    ExpectCode(Decode(Bytes(gif.begin(), gif.begin() + n)), "invalid_image");
  }
  ExpectCode(Decode(MakeGif(65535, 65535, kGifPalette, 0, 0, 1, 1, {1}), {.max_pixels = 1 << 20}),
             "image_too_large");
}

Bytes EncodeWebp(int width, int height, const Bytes& rgb) {
  uint8_t* out = nullptr;
  size_t size = WebPEncodeLosslessRGB(rgb.data(), width, height, width * 3, &out);
  Bytes webp(out, out + size);
  WebPFree(out);
  return webp;
}

TEST(DecodeImageTest, LosslessWebpDecodesExactly) {
  Bytes rgb;
  for (int i = 0; i < 5 * 4 * 3; ++i) rgb.push_back(static_cast<uint8_t>(i * 37 % 256));
  absl::StatusOr<RgbImage> image = Decode(EncodeWebp(5, 4, rgb));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 5);
  EXPECT_EQ(image->height, 4);
  EXPECT_EQ(image->pixels, rgb);
}

TEST(DecodeImageTest, TruncatedOrHugeWebpIsRefused) {
  Bytes webp = EncodeWebp(5, 4, Bytes(60, 100));
  for (size_t n : {size_t{12}, size_t{20}, webp.size() - 3}) {
    ExpectCode(Decode(Bytes(webp.begin(), webp.begin() + n)), "invalid_image");
  }
  // A VP8X header announcing a 16384 x 16384 canvas (and nothing else).
  Bytes bomb;
  Append(&bomb, "RIFF");
  bomb.insert(bomb.end(), {22, 0, 0, 0});
  Append(&bomb, "WEBPVP8X");
  bomb.insert(bomb.end(), {10, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x3f, 0, 0xff, 0x3f, 0});
  ExpectCode(Decode(bomb), "image_too_large");
}

Bytes EncodeJpeg(int width, int height, const Bytes& rgb) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data()) + cinfo.next_scanline * width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes jpeg(out, out + size);
  free(out);
  return jpeg;
}

TEST(DecodeImageTest, JpegDecodesNearItsSource) {
  Bytes rgb(32 * 16 * 3, 90);
  absl::StatusOr<RgbImage> image = Decode(EncodeJpeg(32, 16, rgb));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 32);
  EXPECT_EQ(image->height, 16);
  for (uint8_t v : image->pixels) ASSERT_NEAR(v, 90, 2);
}

TEST(DecodeImageTest, TruncatedCorruptOrHugeJpegIsRefused) {
  Bytes rgb;
  for (int i = 0; i < 64 * 64 * 3; ++i) rgb.push_back(static_cast<uint8_t>(i * 7 % 251));
  Bytes jpeg = EncodeJpeg(64, 64, rgb);
  // Cut inside the headers, and inside the entropy-coded data (libjpeg-turbo would pad the
  // missing data with grey and warn; Pillow, and so this decoder, call it truncated).
  for (size_t n : {size_t{3}, size_t{40}, size_t{200}, jpeg.size() / 2, jpeg.size() - 40}) {
    ExpectCode(Decode(Bytes(jpeg.begin(), jpeg.begin() + n)), "invalid_image");
  }
  Bytes corrupt = {0xff, 0xd8, 0xff, 0x01, 0x00, 0x04, 0x00, 0x00, 0xff, 0xd9};
  ExpectCode(Decode(corrupt), "invalid_image");
  Bytes bad_sof = jpeg;
  for (size_t i = 2; i + 9 < bad_sof.size(); ++i) {
    if (bad_sof[i] == 0xff && bad_sof[i + 1] == 0xc0) {
      bad_sof[i + 9] = 0;  // zero components
      break;
    }
  }
  ExpectCode(Decode(bad_sof), "invalid_image");
  ExpectCode(Decode(jpeg, {.max_pixels = 64 * 64 - 1}), "image_too_large");
}

}  // namespace
}  // namespace deepinfer::image
