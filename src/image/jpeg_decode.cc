// JPEG through libjpeg-turbo. libjpeg reports fatal errors through error_exit, which we turn into
// a longjmp back to RunJpeg: that frame holds no object with a destructor and destroys the
// decompressor on both paths; the output buffer is owned by the caller's frame.

#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "image/decoders.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image::internal {
namespace {

// A progressive JPEG may hold any number of scans, each a pass over the whole coefficient buffer
// (a known CPU amplification); real encoders write about 10.
constexpr int kMaxScans = 1000;

enum class JpegOutcome { kOk, kInvalid, kTooLarge, kUnsupported };

struct JpegJob {
  jpeg_error_mgr error_manager;  // first member: libjpeg hands back a pointer to it
  jmp_buf jump;
  jpeg_progress_mgr progress;
  const DecodeLimits* limits = nullptr;
  std::vector<uint8_t>* samples = nullptr;  // caller's frame: [height, width, components]
  int width = 0;
  int height = 0;
  int components = 0;  // 1 gray, 3 RGB, 4 CMYK
  JpegOutcome outcome = JpegOutcome::kOk;
  char message[JMSG_LENGTH_MAX] = {};
};

JpegJob* JobOf(j_common_ptr cinfo) { return reinterpret_cast<JpegJob*>(cinfo->err); }

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  JpegJob* job = JobOf(cinfo);
  (*cinfo->err->format_message)(cinfo, job->message);
  std::longjmp(job->jump, 1);
}

// Warnings: libjpeg-turbo decodes a truncated file by inventing an EOI (JWRN_JPEG_EOF) and
// filling grey. Pillow refuses truncated files ("image file is truncated"), so that warning is
// an error here; the other warnings (stray bytes before a marker, ...) are ignored as Pillow does.
void OnJpegMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) OnJpegError(cinfo);
}

void OnJpegProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) {
    std::snprintf(JobOf(cinfo)->message, JMSG_LENGTH_MAX, "more than %d scans", kMaxScans);
    std::longjmp(JobOf(cinfo)->jump, 1);
  }
}

// Pillow opens CMYK files as mode "CMYK" with rawmode "CMYK;I" (it always assumes Adobe's
// inverted convention), and YCbCr/gray as RGB/L; libjpeg converts colour spaces the same way
// (YCCK -> CMYK, YCbCr -> RGB).
bool ChooseColorSpace(jpeg_decompress_struct* cinfo, JpegJob* job) {
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = JCS_GRAYSCALE;
      return true;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      return true;
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_RGB;
      return true;
    default:
      return false;
  }
}

bool RunJpeg(JpegJob* job, const uint8_t* data, size_t size) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&job->error_manager);
  job->error_manager.error_exit = OnJpegError;
  job->error_manager.emit_message = OnJpegMessage;
  if (setjmp(job->jump)) {
    jpeg_destroy_decompress(&cinfo);
    if (job->outcome == JpegOutcome::kOk) job->outcome = JpegOutcome::kInvalid;
    return false;
  }
  jpeg_create_decompress(&cinfo);
  job->progress.progress_monitor = OnJpegProgress;
  cinfo.progress = &job->progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  job->width = static_cast<int>(cinfo.image_width);
  job->height = static_cast<int>(cinfo.image_height);
  if (!CheckDimensions(cinfo.image_width, cinfo.image_height, *job->limits, "jpeg").ok()) {
    job->outcome = JpegOutcome::kTooLarge;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (!ChooseColorSpace(&cinfo, job)) {
    job->outcome = JpegOutcome::kUnsupported;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  job->components = cinfo.output_components;
  size_t row_bytes = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  job->samples->resize(row_bytes * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = job->samples->data() + row_bytes * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // No jpeg_finish_decompress: what follows the last scanline (trailing markers, a missing EOI)
  // changes no pixel, and Pillow does not read it either.
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpeg(std::span<const uint8_t> data, const DecodeLimits& limits) {
  std::vector<uint8_t> samples;
  JpegJob job;
  job.limits = &limits;
  job.samples = &samples;
  if (!RunJpeg(&job, data.data(), data.size())) {
    switch (job.outcome) {
      case JpegOutcome::kTooLarge:
        return CheckDimensions(job.width, job.height, limits, "jpeg");
      case JpegOutcome::kUnsupported:
        return InvalidArgumentError(util::codes::kUnsupportedImageFormat,
                                    "jpeg: an unknown colour space");
      default:
        return InvalidImage("jpeg", job.message);
    }
  }
  RgbImage out;
  out.width = job.width;
  out.height = job.height;
  size_t n = static_cast<size_t>(job.width) * job.height;
  out.pixels.resize(n * 3);
  const uint8_t* in = samples.data();
  uint8_t* px = out.pixels.data();
  for (size_t i = 0; i < n; ++i, px += 3) {
    if (job.components == 1) {
      px[0] = px[1] = px[2] = in[i];
    } else if (job.components == 3) {
      std::memcpy(px, in + i * 3, 3);
    } else {
      // Pillow's cmyk2rgb on its CMYK values (the stored bytes inverted, "CMYK;I"): each
      // channel nk - c * nk / 255, rounded the way its MULDIV255 rounds, nk = 255 - k.
      const uint8_t* s = in + i * 4;
      int c[4];
      for (int j = 0; j < 4; ++j) c[j] = 255 - s[j];
      int nk = 255 - c[3];
      for (int j = 0; j < 3; ++j) {
        int t = c[j] * nk + 128;
        int v = nk - (((t >> 8) + t) >> 8);
        px[j] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
      }
    }
  }
  return out;
}

}  // namespace deepinfer::image::internal
