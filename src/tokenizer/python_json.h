#pragma once

// JSON written the way Python's json.dumps(value, ensure_ascii=False) writes it, for chat
// encodings whose reference implementations embed JSON in prompts (DeepSeek V3.2 / V4 / V4.1).

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace deepinfer::tokenizer {

// How floats are spelled. kPython is repr(): fixed notation for decimal exponents in [-4, 16),
// otherwise "1e-05" / "1e+16" (exponent at least two digits). kDeepseekV4 is what DeepSeek's
// V4 reference encoder writes: fixed for exponents in [-5, 16), otherwise "1e-6" / "1e+16" (no
// zero padding).
enum class JsonFloatStyle { kPython, kDeepseekV4 };

// Parses JSON keeping object keys in document order (as Python dicts do). Integers beyond 64
// bits become doubles, as in nlohmann::json.
// Errors: InvalidArgument "bad_json".
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text);

// Writes `value` with ", " and ": " separators, keys in stored order, non-ASCII characters as
// they are, and \" \\ \n \r \t \b \f or \u00XX for the other control characters.
std::string DumpPythonJson(const nlohmann::ordered_json& value,
                           JsonFloatStyle style = JsonFloatStyle::kPython);

// Appends one float in `style` (shortest digits that read back to the same double).
void AppendPythonFloat(double value, JsonFloatStyle style, std::string* out);

}  // namespace deepinfer::tokenizer
