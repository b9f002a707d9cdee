#pragma once

// How a handler answers one request (ResponseWriter), and what the request log of `serve` says
// about the answer (RequestLog).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/request.h"

namespace deepinfer::http {

// What the request log says about one answer beyond method, path, status and duration. Route
// handlers fill it through ResponseWriter::log(); the server's observer reads it. Never holds
// prompt or answer text. Units: tokens; times are steady_clock points (default: never happened).
struct RequestLog {
  std::chrono::steady_clock::time_point received;     // the whole request was read (the server
                                                      // sets it when it has an observer)
  std::chrono::steady_clock::time_point first_token;  // the first generated token arrived
  std::string id;  // the response id ("chatcmpl-…", "cmpl-…", "msg_…"), when there is one
  // The request id every answer header carries (ServerOptions::request_ids), else empty.
  std::string request_id;
  bool stream = false;
  bool generated = false;  // a generation ran: the token counts and `end` are meaningful
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::string end;    // "stop", "length", "client_gone", "error" (with generated)
  std::string error;  // the error code of an error answer ("invalid_value", ...), else empty
};

// How a handler answers: Respond once, or BeginBody (or BeginBodyHeld), Write..., End (or
// Abort). Headers given here must not carry framing headers (Content-Length, Transfer-Encoding,
// Connection); the content type is a header like any other.
// Threads: used only by the thread that serves the request.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // The request log entry of this answer (see RequestLog).
  RequestLog& log() { return log_; }
  const RequestLog& log() const { return log_; }

  // A whole response with Content-Length. Returns false when the client is gone.
  virtual bool Respond(int status, const Headers& headers, std::string_view body) = 0;
  // Commits status and headers. With `content_length` the body is exactly that long; without,
  // it is chunked (HTTP/1.1, so that the connection stays reusable after it) or ends with the
  // connection (HTTP/1.0).
  virtual bool BeginBody(int status, const Headers& headers,
                         std::optional<uint64_t> content_length) = 0;
  // Like BeginBody, but the head is held until the first Write, End, Flush or Abort, so that it
  // leaves in one send with the first body bytes (one packet and one wakeup of the client less
  // per answer). The caller must Flush before it waits for body bytes. Returns false when the
  // client is already known to be gone.
  virtual bool BeginBodyHeld(int status, const Headers& headers,
                             std::optional<uint64_t> content_length) {
    return BeginBody(status, headers, content_length);
  }
  // Sends a held head now (nothing when none is held). Returns false when the client is gone.
  virtual bool Flush() { return !PeerClosed(); }
  // Sends `data` at once (no buffering beyond a held head); as one chunk of a chunked body.
  virtual bool Write(std::string_view data) = 0;
  // Ends the body (the last chunk for chunked bodies).
  virtual bool End() = 0;
  // Ends the connection without completing the body, so the client sees a truncated response.
  virtual void Abort() {}
  // True when the client closed the connection (or shut down its sending side) or a write
  // failed. Never blocks. Cost: one poll() and at most one recv(MSG_PEEK).
  virtual bool PeerClosed() = 0;
  // True once the server is stopping: a long answer (a generation) should end now, as a 503
  // "shutting_down".
  virtual bool stopping() const { return false; }
  // Whether anything was committed yet, and the status of the response (0 before any).
  virtual bool started() const = 0;
  virtual int status() const = 0;
  // The client's socket, for waits that must end when the client leaves (-1: none).
  virtual int client_fd() const { return -1; }
  // The path of the request being answered (error bodies take the shape of its API).
  virtual std::string_view request_path() const { return {}; }

 private:
  RequestLog log_;
};

}  // namespace deepinfer::http
