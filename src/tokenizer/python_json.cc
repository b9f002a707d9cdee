#include "tokenizer/python_json.h"

#include <charconv>
#include <cstdlib>

#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

void AppendString(const std::string& s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[(c >> 4) & 15]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void Append(const Json& v, JsonFloatStyle style, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null:
      *out += "null";
      break;
    case Json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      *out += std::to_string(v.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      *out += std::to_string(v.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      AppendPythonFloat(v.get<double>(), style, out);
      break;
    case Json::value_t::string:
      AppendString(v.get_ref<const std::string&>(), out);
      break;
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const Json& item : v) {
        if (!first) *out += ", ";
        first = false;
        Append(item, style, out);
      }
      out->push_back(']');
      break;
    }
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) *out += ", ";
        first = false;
        AppendString(it.key(), out);
        *out += ": ";
        Append(it.value(), style, out);
      }
      out->push_back('}');
      break;
    }
    default:  // binary values and discarded values do not come from parsing text
      *out += "null";
      break;
  }
}

}  // namespace

void AppendPythonFloat(double value, JsonFloatStyle style, std::string* out) {
  // Shortest round-trip digits in scientific form: "d[.ddd]e[+-]XX".
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int low = style == JsonFloatStyle::kPython ? -4 : -5;
  *out += sign;
  if (exponent >= low && exponent < 16) {
    if (exponent >= 0) {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        *out += digits;
        out->append(int_len - digits.size(), '0');
        *out += ".0";
      } else {
        *out += digits.substr(0, int_len);
        out->push_back('.');
        *out += digits.substr(int_len);
      }
    } else {
      *out += "0.";
      out->append(static_cast<size_t>(-exponent - 1), '0');
      *out += digits;
    }
    return;
  }
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    *out += digits.substr(1);
  }
  out->push_back('e');
  out->push_back(exponent < 0 ? '-' : '+');
  const int magnitude = exponent < 0 ? -exponent : exponent;
  if (style == JsonFloatStyle::kPython && magnitude < 10) out->push_back('0');
  *out += std::to_string(magnitude);
}

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text) {
  Json v = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return InvalidArgumentError(util::codes::kBadJson, "not valid JSON");
  return v;
}

std::string DumpPythonJson(const nlohmann::ordered_json& value, JsonFloatStyle style) {
  std::string out;
  Append(value, style, &out);
  return out;
}

}  // namespace deepinfer::tokenizer
