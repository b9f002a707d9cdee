#pragma once

// nlohmann-json behind a non-throwing boundary for the bench: servers under test may send
// anything, so every read checks the type before it converts.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace deepinfer::tools {

using Json = nlohmann::ordered_json;

// Parses `text`; returns a discarded value (is_discarded()) on any syntax error.
inline Json ParseJsonOrDiscarded(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// Compact text; invalid UTF-8 in strings becomes U+FFFD instead of an exception.
inline std::string DumpJson(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// The member `key` of object `j`, or nullptr (j not an object, key absent).
inline const Json* Member(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline std::optional<int64_t> IntMember(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
}

inline std::optional<std::string> StringMember(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

// The first element of array member `key`, or nullptr.
inline const Json* FirstOf(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_array() || v->empty()) return nullptr;
  return &(*v)[0];
}

}  // namespace deepinfer::tools
