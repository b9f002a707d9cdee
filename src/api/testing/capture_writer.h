#pragma once

// A ResponseWriter for handler tests: records the status, headers and body a handler sends,
// and parses JSON bodies and SSE streams. Threads: one handler at a time.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "http/response_writer.h"
#include "util/json.h"

namespace deepinfer::api::testing {

// Records what a handler sends. `close_after_writes` simulates a client that disconnects.
class CaptureWriter : public http::ResponseWriter {
 public:
  explicit CaptureWriter(int close_after_writes = -1) : close_after_(close_after_writes) {}

  bool Respond(int status, const http::Headers& headers, std::string_view body) override {
    if (started_) return false;
    started_ = true;
    status_ = status;
    headers_ = headers;
    body_ = std::string(body);
    return true;
  }
  bool BeginBody(int status, const http::Headers& headers,
                 std::optional<uint64_t> content_length) override {
    if (started_) return false;
    started_ = streaming_ = true;
    status_ = status;
    headers_ = headers;
    return true;
  }
  bool Write(std::string_view data) override {
    if (closed()) return false;
    body_ += data;
    ++writes_;
    return true;
  }
  bool End() override {
    ended_ = true;
    return true;
  }
  // Like the server's writer: a stopping server is not a gone client (handlers ask stopping()).
  bool PeerClosed() override { return closed(); }
  bool stopping() const override { return stopping_; }
  void set_stopping(bool stopping) { stopping_ = stopping; }
  bool started() const override { return started_; }
  int status() const override { return status_; }

  bool closed() const { return close_after_ >= 0 && writes_ >= close_after_; }
  bool streaming() const { return streaming_; }
  bool ended() const { return ended_; }
  const std::string& body() const { return body_; }
  std::string content_type() const { return Header("Content-Type"); }
  // The value of the answer's header `name` ("" when absent).
  std::string Header(std::string_view name) const {
    for (const auto& [n, value] : headers_) {
      if (n == name) return value;
    }
    return "";
  }
  util::Json json() const {
    auto j = util::ParseJson(body_);
    EXPECT_TRUE(j.ok()) << body_;
    return j.ok() ? *j : util::Json();
  }
  // The payloads of the SSE events, in order ("[DONE]" included).
  std::vector<std::string> Events() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while (true) {
      size_t end = body_.find("\n\n", pos);
      if (end == std::string::npos) break;
      std::string event = body_.substr(pos, end - pos);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      out.push_back(event.substr(6));
      pos = end + 2;
    }
    EXPECT_EQ(pos, body_.size()) << "trailing bytes after the last event";
    return out;
  }

  // Anthropic's named events: (event name, data JSON), in order.
  std::vector<std::pair<std::string, util::Json>> NamedEvents() const {
    std::vector<std::pair<std::string, util::Json>> out;
    size_t pos = 0;
    while (true) {
      size_t end = body_.find("\n\n", pos);
      if (end == std::string::npos) break;
      std::string event = body_.substr(pos, end - pos);
      size_t nl = event.find('\n');
      EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
      EXPECT_NE(nl, std::string::npos) << event;
      if (nl == std::string::npos) break;
      EXPECT_EQ(event.compare(nl + 1, 6, "data: "), 0) << event;
      auto data = util::ParseJson(event.substr(nl + 7));
      EXPECT_TRUE(data.ok()) << event;
      std::string name = event.substr(7, nl - 7);
      EXPECT_EQ(data.ok() ? (*data)["type"].get<std::string>() : "", name) << event;
      out.emplace_back(name, data.ok() ? *data : util::Json());
      pos = end + 2;
    }
    EXPECT_EQ(pos, body_.size()) << "trailing bytes after the last event";
    return out;
  }

 private:
  int close_after_;
  int writes_ = 0;
  bool started_ = false, streaming_ = false, ended_ = false, stopping_ = false;
  int status_ = 0;
  http::Headers headers_;
  std::string body_;
};

}  // namespace deepinfer::api::testing
