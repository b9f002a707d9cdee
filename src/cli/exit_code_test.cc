#include "cli/exit_code.h"

#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

TEST(ExitCodeTest, InputTheUserCanFixIsExitStatusTwo) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
                    absl::StatusCode::kAlreadyExists, absl::StatusCode::kDataLoss,
                    absl::StatusCode::kOutOfRange, absl::StatusCode::kUnimplemented}) {
    EXPECT_EQ(ExitCodeFor(MakeError(code, "x", "y")), kExitBadInput)
        << absl::StatusCodeToString(code);
  }
}

TEST(ExitCodeTest, FailuresOfTheWorkAreExitStatusOne) {
  for (auto code : {absl::StatusCode::kInternal, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kResourceExhausted, absl::StatusCode::kFailedPrecondition,
                    absl::StatusCode::kUnknown, absl::StatusCode::kDeadlineExceeded}) {
    EXPECT_EQ(ExitCodeFor(MakeError(code, "x", "y")), kExitFailure)
        << absl::StatusCodeToString(code);
  }
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
}

}  // namespace
}  // namespace deepinfer::cli
