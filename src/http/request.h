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

  // First header named `name` (lower case), or "".
  std::string_view Header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (key == name) return value;
    }
    return {};
  }
};

}  // namespace deepinfer::http
