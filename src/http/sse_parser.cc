#include "http/sse_parser.h"

namespace deepinfer::http {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> events;
  Feed(bytes, &events);
  return events;
}

void SseParser::Feed(std::string_view bytes, std::vector<SseEvent>* events) {
  if (overflowed_) return;
  size_t i = 0;
  if (skip_lf_ && !bytes.empty()) {
    skip_lf_ = false;
    if (bytes[0] == '\n') i = 1;
  }
  while (i < bytes.size()) {
    // Whole runs of line bytes at a time: a token's event is a few dozen bytes, one line.
    const size_t end = bytes.find_first_of("\r\n", i);
    const std::string_view run =
        bytes.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    if (line_.size() + run.size() > max_event_bytes_) {
      overflowed_ = true;
      return;
    }
    if (end == std::string_view::npos) {
      line_.append(run);
      return;
    }
    if (line_.empty()) {
      Line(run, events);
    } else {
      line_.append(run);
      Line(line_, events);
      line_.clear();
    }
    if (overflowed_) return;
    i = end + 1;
    if (bytes[end] == '\r') {
      if (i == bytes.size()) {
        skip_lf_ = true;
      } else if (bytes[i] == '\n') {
        ++i;
      }
    }
  }
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* events) {
  if (line.empty()) {
    // A blank line dispatches the event.
    if (has_data_) events->push_back({std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // a comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (data_.size() + value.size() + 1 > max_event_bytes_) {
      overflowed_ = true;
      return;
    }
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
}

}  // namespace deepinfer::http
