#include "cli/exit_code.h"

#include <cstdio>
#include <string>

#include "util/status.h"

namespace deepinfer::cli {

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int ReportFailure(std::string_view command, const absl::Status& status, std::string_view what) {
  std::string prefix = what.empty() ? "" : std::string(what) + ": ";
  std::fprintf(stderr, "deepinfer %.*s: %s%s\n", static_cast<int>(command.size()), command.data(),
               prefix.c_str(), OneLineError(status).c_str());
  return ExitCodeFor(status);
}

}  // namespace deepinfer::cli
