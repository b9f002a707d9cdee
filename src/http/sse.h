#pragma once

// Server-sent events and HTTP/1.1 chunk framing for streamed responses.
//
// Source: WHATWG HTML "Server-sent events" (event stream format); RFC 9112 section 7.1 (chunked
//   transfer coding); OpenAI streaming (`data: {json}` frames ending with `data: [DONE]`).

#include <string>
#include <string_view>

#include "http/errors.h"
#include "http/response_writer.h"

namespace deepinfer::http {

// Commits a 200 event stream: Content-Type text/event-stream, Cache-Control no-cache,
// X-Accel-Buffering no (so that nginx passes each event on at once), chunked on HTTP/1.1 (the
// connection stays reusable after the stream), else ended by the close. Returns false when the
// client is gone.
bool BeginEventStream(ResponseWriter& writer);

// One event carrying `payload`: "data: <payload>\n\n". A payload with line breaks becomes one
// "data:" line per line, which SSE clients join back with "\n".
std::string SseData(std::string_view payload);

// The OpenAI end-of-stream marker, "data: [DONE]\n\n".
std::string SseDone();

// The in-band error of a stream that already started: one `data: {"error": {...}}` frame
// followed by `data: [DONE]`.
std::string SseErrorAndDone(const ApiError& error);

// The in-band error of a stream on `path`, in the shape of its API: SseErrorAndDone on the
// OpenAI routes; on the Anthropic routes (IsAnthropicPath) one `event: error` frame with
// AnthropicErrorJson as its data, Anthropic's streams having no [DONE].
// Source: Anthropic API reference, "Streaming Messages" (error events).
std::string SseErrorForPath(const ApiError& error, std::string_view path);

// One HTTP/1.1 chunk: "<hex size>\r\n<data>\r\n". Empty data yields "" (an empty chunk would
// end the body).
std::string HttpChunk(std::string_view data);

// The chunk that ends a chunked body.
inline constexpr std::string_view kHttpLastChunk = "0\r\n\r\n";

}  // namespace deepinfer::http
