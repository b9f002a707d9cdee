#pragma once

// An HTTP/1.1 request as the server reads it (HttpRequestReader) and hands it to a handler.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::http {

// Header fields as (name, value) pairs in arrival order.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, with the query
  std::string path;    // target without the query
  std::string body;
  Headers headers;  // names lower-cased
  bool keep_alive = true;
  int version = 11;  // 10 or 11

  // First header named `name` (lower case), or "" (also for a header sent with no value).
  std::string_view Header(std::string_view name) const {
    const std::string* v = FindHeader(name);
    return v == nullptr ? std::string_view() : std::string_view(*v);
  }
  // First header named `name` (lower case), or nullptr when none was sent.
  const std::string* FindHeader(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (key == name) return &value;
    }
    return nullptr;
  }
};

}  // namespace deepinfer::http
