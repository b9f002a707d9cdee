#include "image/resample.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "util/status.h"

namespace deepinfer::image {
namespace {

// Fixed-point precision of the coefficients: 32 bits less 8 for the sample and 2 headroom bits
// for the kernel's negative lobes and overshoot (Pillow's PRECISION_BITS).
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr double kCubicSupport = 2.0;

double Cubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output index: the first input index, the tap count, and `ksize` fixed-point taps.
struct Coefficients {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> taps;  // [out_size, ksize]
};

// The taps of one axis, in the order and precision Pillow computes them (double arithmetic, the
// same expression order, then round-half-away-from-zero to 22 bits), so that every tap, and hence
// every output byte, is identical.
Coefficients ComputeCoefficients(int in_size, int out_size) {
  double scale = static_cast<double>(in_size) / out_size;
  double filter_scale = scale < 1.0 ? 1.0 : scale;
  double support = kCubicSupport * filter_scale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.taps.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    double center = (xx + 0.5) * scale;
    double ss = 1.0 / filter_scale;
    // (int) truncates toward zero, as Pillow's C cast does; "+ 0.5" rounds the bound.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = Cubic((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      double w = ww != 0.0 ? k[x] / ww : k[x];
      double fixed = w * (1 << kPrecisionBits);
      c.taps[static_cast<size_t>(xx) * c.ksize + x] =
          static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

// The accumulator starts at one half (rounding), is shifted down arithmetically and clipped to
// 0..255 (Pillow's clip8 lookup table does the same for the range it covers).
inline uint8_t Clip8(int64_t acc) {
  int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Rows [row0, row0 + out.height) of `in`, resized horizontally to out.width.
void Horizontal(const RgbImage& in, int row0, const Coefficients& c, RgbImage* out) {
  for (int y = 0; y < out->height; ++y) {
    const uint8_t* src = in.Row(row0 + y);
    uint8_t* dst = out->Row(y);
    for (int xx = 0; xx < out->width; ++xx) {
      const int32_t* k = &c.taps[static_cast<size_t>(xx) * c.ksize];
      const uint8_t* s = src + static_cast<size_t>(c.first[xx]) * 3;
      int64_t r = 1 << (kPrecisionBits - 1), g = r, b = r;
      for (int x = 0; x < c.count[xx]; ++x) {
        r += s[x * 3] * k[x];
        g += s[x * 3 + 1] * k[x];
        b += s[x * 3 + 2] * k[x];
      }
      dst[xx * 3] = Clip8(r);
      dst[xx * 3 + 1] = Clip8(g);
      dst[xx * 3 + 2] = Clip8(b);
    }
  }
}

// `in` resized vertically to out.height; c.first is relative to in's first row.
void Vertical(const RgbImage& in, const Coefficients& c, RgbImage* out) {
  size_t stride = static_cast<size_t>(in.width) * 3;
  for (int yy = 0; yy < out->height; ++yy) {
    const int32_t* k = &c.taps[static_cast<size_t>(yy) * c.ksize];
    const uint8_t* base = in.Row(c.first[yy]);
    uint8_t* dst = out->Row(yy);
    for (size_t i = 0; i < stride; ++i) {
      int64_t acc = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < c.count[yy]; ++y) acc += base[y * stride + i] * k[y];
      dst[i] = Clip8(acc);
    }
  }
}

RgbImage Blank(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  return image;
}

}  // namespace

RgbImage ResizeBicubic(const RgbImage& in, int out_width, int out_height) {
  DI_CHECK(in.width >= 1 && in.height >= 1 && out_width >= 1 && out_height >= 1);
  bool horizontal = out_width != in.width;
  bool vertical = out_height != in.height;
  if (!horizontal && !vertical) return in;
  // The pass order changes the bytes (each pass rounds to 8 bits). Pillow runs the vertical pass
  // first when the height shrinks by more than twice as many pixels as the width does (to make
  // the horizontal pass cheaper), else the horizontal pass first.
  int64_t dh = int64_t{in.height} - out_height;
  int64_t dw = int64_t{in.width} - out_width;
  bool horizontal_first = !(dh > 0 && dh > dw * 2);
  Coefficients cv = ComputeCoefficients(in.height, out_height);
  if (!horizontal) {
    RgbImage out = Blank(out_width, out_height);
    Vertical(in, cv, &out);
    return out;
  }
  Coefficients ch = ComputeCoefficients(in.width, out_width);
  if (!horizontal_first) {
    RgbImage temp = Blank(in.width, out_height);
    Vertical(in, cv, &temp);
    RgbImage out = Blank(out_width, out_height);
    Horizontal(temp, 0, ch, &out);
    return out;
  }
  // The horizontal pass only computes the input rows the vertical pass reads (Pillow does the
  // same; the bytes do not depend on it, the time does).
  int row0 = vertical ? cv.first.front() : 0;
  int row_end = vertical ? cv.first.back() + cv.count.back() : in.height;
  RgbImage temp = Blank(out_width, row_end - row0);
  Horizontal(in, row0, ch, &temp);
  if (!vertical) return temp;
  for (int& first : cv.first) first -= row0;
  RgbImage out = Blank(out_width, out_height);
  Vertical(temp, cv, &out);
  return out;
}

}  // namespace deepinfer::image
