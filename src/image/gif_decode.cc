// GIF (first frame) through giflib's record-level API: only the records up to the first image
// are read, never the whole animation (DGifSlurp would decode every frame, a bomb of its own).
// The first frame is placed as Pillow's GifImagePlugin places it: on a canvas of the logical
// screen size, grown when the frame sticks out; the rest of the canvas holds the frame's
// transparent index when its Graphic Control Extension names one, else index 0; then the palette
// (the frame's local table, else the global one) maps indices to RGB. Transparency is ignored.

#include <gif_lib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "image/decoders.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image::internal {
namespace {

struct MemoryReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

int ReadFromMemory(GifFileType* gif, GifByteType* out, int n) {
  auto* reader = static_cast<MemoryReader*>(gif->UserData);
  size_t take = std::min(static_cast<size_t>(n < 0 ? 0 : n), reader->size - reader->pos);
  std::memcpy(out, reader->data + reader->pos, take);
  reader->pos += take;
  return static_cast<int>(take);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};
using GifPtr = std::unique_ptr<GifFileType, GifCloser>;

absl::Status GifError(const GifFileType* gif, std::string_view what) {
  const char* reason = GifErrorString(gif->Error);
  return InvalidImage("gif", absl::StrCat(std::string(what), ": ", reason ? reason : "corrupt data"));
}

// Index -> RGB. A file without any colour table is read as Pillow's mode "L": the index is the
// grey level. With a table, indices past its end are black (Pillow's palette is zero-filled).
std::array<uint8_t, 256 * 3> Palette(const ColorMapObject* map) {
  std::array<uint8_t, 256 * 3> rgb{};
  if (map == nullptr || map->Colors == nullptr) {
    for (int i = 0; i < 256; ++i) rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = i;
    return rgb;
  }
  for (int i = 0; i < std::min(map->ColorCount, 256); ++i) {
    rgb[i * 3] = map->Colors[i].Red;
    rgb[i * 3 + 1] = map->Colors[i].Green;
    rgb[i * 3 + 2] = map->Colors[i].Blue;
  }
  return rgb;
}

// Reads extension records up to the first image descriptor; `transparent` gets the last Graphic
// Control Extension's transparent index (-1: none).
absl::Status SkipToFirstImage(GifFileType* gif, int* transparent) {
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return GifError(gif, "bad record");
    if (type == IMAGE_DESC_RECORD_TYPE) return absl::OkStatus();
    if (type == TERMINATE_RECORD_TYPE) return InvalidImage("gif", "no image in the file");
    if (type != EXTENSION_RECORD_TYPE) return InvalidImage("gif", "unknown record");
    int code = 0;
    GifByteType* block = nullptr;
    if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return GifError(gif, "bad extension");
    if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr && block[0] >= 4) {
      GraphicsControlBlock gcb;
      if (DGifExtensionToGCB(block[0], block + 1, &gcb) == GIF_OK) {
        *transparent = gcb.TransparentColor;  // NO_TRANSPARENT_COLOR is -1
      }
    }
    while (block != nullptr) {
      if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return GifError(gif, "bad extension");
    }
  }
}

// Decodes the frame's indices into `indices` ([canvas_h, canvas_w]) at its offset.
absl::Status ReadFrame(GifFileType* gif, int canvas_w, std::vector<uint8_t>* indices) {
  const GifImageDesc& d = gif->Image;
  std::vector<GifPixelType> line(d.Width);
  // Interlaced frames arrive in four passes: rows 0, 8, 16, ...; 4, 12, ...; 2, 6, ...; 1, 3, ...
  static constexpr int kStart[4] = {0, 4, 2, 1};
  static constexpr int kStep[4] = {8, 8, 4, 2};
  int passes = d.Interlace ? 4 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    int start = d.Interlace ? kStart[pass] : 0;
    int step = d.Interlace ? kStep[pass] : 1;
    for (int row = start; row < d.Height; row += step) {
      if (DGifGetLine(gif, line.data(), d.Width) == GIF_ERROR) {
        return GifError(gif, "truncated or corrupt image data");
      }
      uint8_t* dst = indices->data() + static_cast<size_t>(d.Top + row) * canvas_w + d.Left;
      std::memcpy(dst, line.data(), d.Width);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RgbImage> DecodeGif(std::span<const uint8_t> data, const DecodeLimits& limits) {
  MemoryReader reader{data.data(), data.size(), 0};
  int error = 0;
  GifPtr gif(DGifOpen(&reader, ReadFromMemory, &error));
  if (gif == nullptr) {
    const char* reason = GifErrorString(error);
    return InvalidImage("gif", reason ? reason : "bad header");
  }
  int transparent = -1;
  DI_RETURN_IF_ERROR(SkipToFirstImage(gif.get(), &transparent));
  if (DGifGetImageDesc(gif.get()) == GIF_ERROR) return GifError(gif.get(), "bad image descriptor");
  const GifImageDesc& d = gif->Image;
  int64_t canvas_w = std::max<int64_t>(gif->SWidth, int64_t{d.Left} + d.Width);
  int64_t canvas_h = std::max<int64_t>(gif->SHeight, int64_t{d.Top} + d.Height);
  DI_RETURN_IF_ERROR(CheckDimensions(canvas_w, canvas_h, limits, "gif"));
  if (d.Width < 1 || d.Height < 1 || d.Left < 0 || d.Top < 0) {
    return InvalidImage("gif", "empty or misplaced first frame");
  }
  std::vector<uint8_t> indices(static_cast<size_t>(canvas_w) * canvas_h,
                               static_cast<uint8_t>(transparent >= 0 ? transparent : 0));
  DI_RETURN_IF_ERROR(ReadFrame(gif.get(), static_cast<int>(canvas_w), &indices));
  std::array<uint8_t, 256 * 3> palette = Palette(d.ColorMap ? d.ColorMap : gif->SColorMap);
  RgbImage out;
  out.width = static_cast<int>(canvas_w);
  out.height = static_cast<int>(canvas_h);
  out.pixels.resize(indices.size() * 3);
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(&out.pixels[i * 3], &palette[indices[i] * 3], 3);
  }
  return out;
}

}  // namespace deepinfer::image::internal
