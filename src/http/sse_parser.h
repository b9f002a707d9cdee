#pragma once

// An incremental parser of Server-Sent-Events streams, for the clients of streamed answers
// (`deepinfer bench`, `deepinfer smoke`).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::http {

// One dispatched event.
struct SseEvent {
  std::string event;  // the `event:` field ("" when the event had none)
  std::string data;   // its `data:` lines joined by "\n"

  friend bool operator==(const SseEvent&, const SseEvent&) = default;
};

// Splits a byte stream, fed in chunks of any size, into events. Accepts "\n", "\r\n" and "\r"
// line ends (a "\r\n" split between two chunks is one line end), ignores comments (": ping") and
// the fields it does not keep (`id:`, `retry:`, unknown ones). An event without a `data:` line is
// not dispatched. One line or one event's data longer than `max_event_bytes` stops the parser:
// overflowed() turns true and later input is ignored, so that a peer cannot make it hold an
// endless event in memory.
// Source: WHATWG HTML, 9.2.6 "Interpreting an event stream".
// Threads: one stream's.
class SseParser {
 public:
  static constexpr size_t kDefaultMaxEventBytes = 16 << 20;

  explicit SseParser(size_t max_event_bytes = kDefaultMaxEventBytes)
      : max_event_bytes_(max_event_bytes) {}

  // Appends `bytes` and returns the events they completed, in order.
  std::vector<SseEvent> Feed(std::string_view bytes);
  // Appends `bytes` and adds the events they completed to `events`.
  void Feed(std::string_view bytes, std::vector<SseEvent>* events);

  // Whether bytes of an unfinished event are held (a stream that ends here did not end cleanly).
  bool has_partial() const { return !line_.empty() || has_data_ || !event_.empty(); }
  // Whether an over-long line or event stopped the parser.
  bool overflowed() const { return overflowed_; }

 private:
  void Line(std::string_view line, std::vector<SseEvent>* events);

  const size_t max_event_bytes_;
  std::string line_;   // the line being read
  std::string event_;  // the event type of the event being read
  std::string data_;   // its data so far
  bool has_data_ = false;
  bool skip_lf_ = false;  // the previous chunk ended in "\r"
  bool overflowed_ = false;
};

}  // namespace deepinfer::http
