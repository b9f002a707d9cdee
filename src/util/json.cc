#include "util/json.h"

#include <exception>

#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::util {
namespace {

// Nesting depth of `text`, counting brackets outside strings. Runs before the parser so that a
// body like "[[[[..." is refused in O(n) without building anything.
bool DepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<Json> ParseJson(std::string_view text) {
  if (!DepthWithin(text, kMaxJsonDepth)) {
    return InvalidArgumentError(codes::kInvalidJson, "JSON nesting is too deep.");
  }
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false,
                        /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    // The non-throwing mode still throws from allocation failure; keep it at the boundary.
    return InvalidArgumentError(codes::kInvalidJson, "Could not parse the request body as JSON.");
  }
  if (value.is_discarded()) {
    return InvalidArgumentError(codes::kInvalidJson,
                                "We could not parse the JSON body of your request.");
  }
  return value;
}

Json ParseJsonOrDiscarded(std::string_view text) {
  absl::StatusOr<Json> value = ParseJson(text);
  if (!value.ok()) return Json(Json::value_t::discarded);
  return *std::move(value);
}

std::string DumpJson(const Json& value, int indent) {
  try {
    return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return "null";
  }
}

const Json* Member(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::optional<int64_t> IntMember(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  if (!v->is_number_float()) return v->get<int64_t>();
  // Casting a double outside int64's range (or NaN) is undefined behaviour: not an integer.
  const double d = v->get<double>();
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return std::nullopt;
  return static_cast<int64_t>(d);
}

std::optional<std::string> StringMember(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

const Json* FirstOf(const Json& j, const char* key) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_array() || v->empty()) return nullptr;
  return &(*v)[0];
}

}  // namespace deepinfer::util
