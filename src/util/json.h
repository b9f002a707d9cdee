#pragma once

// nlohmann-json behind a non-throwing boundary, for every layer: project code calls these helpers
// and never sees a JSON exception. Requests and files are parsed with ParseJson (depth-limited,
// with a stable error code); answers from servers under test (bench, smoke) are read with the
// Member helpers, which check the type before they convert.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::util {

using Json = nlohmann::ordered_json;  // keeps fields in insertion (OpenAI's) order

// Deepest array/object nesting a request may have. Requests need about 5 levels; the limit keeps
// recursive code (dump, destruction, templates) far from the stack's end on connection threads.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value.
// Errors: InvalidArgument "invalid_json" (syntax, invalid UTF-8 in strings, trailing bytes,
//   nesting deeper than kMaxJsonDepth).
// Cost: O(text.size()).
absl::StatusOr<Json> ParseJson(std::string_view text);

// Parses `text`; returns a discarded value (is_discarded()) on any error, including nesting
// deeper than kMaxJsonDepth. For answers of servers under test, where the reason does not matter.
Json ParseJsonOrDiscarded(std::string_view text);

// Serialization, compact unless `indent` >= 0. Invalid UTF-8 in strings (a token piece that ends
// inside a character) becomes U+FFFD instead of an exception.
std::string DumpJson(const Json& value, int indent = -1);

// The member `key` of object `j`, or nullptr (j not an object, key absent).
const Json* Member(const Json& j, const char* key);
// Member `key` as an integer (a float is truncated), or nullopt when absent, not a number, or a
// float outside int64's range (or NaN).
std::optional<int64_t> IntMember(const Json& j, const char* key);
// Member `key` as a string, or nullopt when absent or not a string.
std::optional<std::string> StringMember(const Json& j, const char* key);
// The first element of array member `key`, or nullptr (absent, not an array, empty).
const Json* FirstOf(const Json& j, const char* key);

}  // namespace deepinfer::util
