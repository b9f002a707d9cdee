#pragma once

// nlohmann-json behind a non-throwing boundary: project code calls these helpers and never sees a
// JSON exception.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::api {

using Json = nlohmann::ordered_json;  // keeps fields in OpenAI's order

// Deepest array/object nesting a request may have. Requests need about 5 levels; the limit keeps
// recursive code (dump, destruction, templates) far from the stack's end on connection threads.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value.
// Errors: InvalidArgument "invalid_json" (syntax, invalid UTF-8 in strings, trailing bytes,
//   nesting deeper than kMaxJsonDepth).
// Cost: O(text.size()).
absl::StatusOr<Json> ParseJson(std::string_view text);

// Compact serialization. Invalid UTF-8 in strings (a token piece that ends inside a character)
// becomes U+FFFD instead of an exception.
std::string DumpJson(const Json& value);

}  // namespace deepinfer::api
