#include "util/status.h"

#include <cctype>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace deepinfer {
namespace {
constexpr absl::string_view kErrorCodeUrl = "deepinfer/error_code";

// Debian's abseil is built without the std::string_view alias, so views are converted here.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string CanonicalName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);  // e.g. "INVALID_ARGUMENT"
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}
}  // namespace

absl::Status MakeError(absl::StatusCode code, std::string_view error_code,
                       std::string_view message) {
  absl::Status status(code, Av(message));
  status.SetPayload(kErrorCodeUrl, absl::Cord(Av(error_code)));
  return status;
}

absl::Status InvalidArgumentError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kInvalidArgument, e, m);
}
absl::Status NotFoundError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kNotFound, e, m);
}
absl::Status DataLossError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kDataLoss, e, m);
}
absl::Status UnimplementedError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kUnimplemented, e, m);
}
absl::Status ResourceExhaustedError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kResourceExhausted, e, m);
}
absl::Status UnavailableError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kUnavailable, e, m);
}
absl::Status InternalError(std::string_view e, std::string_view m) {
  return MakeError(absl::StatusCode::kInternal, e, m);
}

std::string ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return "ok";
  if (auto payload = status.GetPayload(kErrorCodeUrl)) return std::string(*payload);
  return CanonicalName(status.code());
}

std::string OneLineError(const absl::Status& status) {
  std::string line = absl::StrCat(ErrorCodeOf(status), ": ", status.message());
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

absl::Status WithContext(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return MakeError(status.code(), ErrorCodeOf(status),
                   absl::StrCat(Av(context), ": ", status.message()));
}

}  // namespace deepinfer
