#include "util/status.h"

#include "gtest/gtest.h"

namespace deepinfer {
namespace {

TEST(StatusTest, ErrorCarriesStableCode) {
  absl::Status s = DataLossError("truncated_file", "tensor data ends early");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ErrorCodeOf(s), "truncated_file");
  EXPECT_EQ(OneLineError(s), "truncated_file: tensor data ends early");
}

TEST(StatusTest, PlainStatusFallsBackToCanonicalName) {
  EXPECT_EQ(ErrorCodeOf(absl::NotFoundError("x")), "not_found");
  EXPECT_EQ(ErrorCodeOf(absl::OkStatus()), "ok");
}

TEST(StatusTest, WithContextKeepsBothCodes) {
  absl::Status s = WithContext(NotFoundError("missing_tensor", "no tensor 'x'"), "/m/a.gguf");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorCodeOf(s), "missing_tensor");
  EXPECT_EQ(s.message(), "/m/a.gguf: no tensor 'x'");
  EXPECT_TRUE(WithContext(absl::OkStatus(), "/m/a.gguf").ok());
}

absl::StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd", "odd input");
  return x / 2;
}
absl::StatusOr<int> Quarter(int x) {
  DI_ASSIGN_OR_RETURN(int h, Half(x));
  DI_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, AssignOrReturnPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(ErrorCodeOf(Quarter(6).status()), "odd");
}

}  // namespace
}  // namespace deepinfer
