#include "http/sse.h"

#include "fmt/format.h"
#include "util/json.h"

namespace deepinfer::http {

bool BeginEventStream(ResponseWriter& writer) {
  static const Headers* const kHeaders = new Headers{{"Content-Type", "text/event-stream"},
                                                     {"Cache-Control", "no-cache"},
                                                     {"X-Accel-Buffering", "no"}};
  return writer.BeginBody(200, *kHeaders, std::nullopt);
}

std::string SseData(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  size_t start = 0;
  while (true) {
    size_t end = payload.find_first_of("\r\n", start);
    out += "data: ";
    out.append(payload.substr(start, end == std::string_view::npos ? end : end - start));
    out += '\n';
    if (end == std::string_view::npos) break;
    // "\r\n" counts as one line break.
    start =
        end +
        ((payload[end] == '\r' && end + 1 < payload.size() && payload[end + 1] == '\n') ? 2 : 1);
  }
  out += '\n';
  return out;
}

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string SseErrorAndDone(const ApiError& error) { return SseData(ErrorBody(error)) + SseDone(); }

std::string SseErrorForPath(const ApiError& error, std::string_view path) {
  if (!IsAnthropicPath(path)) return SseErrorAndDone(error);
  return "event: error\n" + SseData(util::DumpJson(AnthropicErrorJson(error)));
}

std::string HttpChunk(std::string_view data) {
  if (data.empty()) return {};
  std::string out = fmt::format("{:x}\r\n", data.size());
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace deepinfer::http
