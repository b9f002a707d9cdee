#include "http/errors.h"

#include <set>
#include <string_view>

#include "gtest/gtest.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

util::Json BodyOf(const ApiError& error) {
  auto json = util::ParseJson(ErrorBody(error));
  EXPECT_TRUE(json.ok());
  return *json;
}

TEST(ApiErrorTest, InvalidArgumentIsBadRequestWithParam) {
  ApiError e = ApiErrorFromStatus(RequestError("temperature", "invalid_value", "too hot"));
  EXPECT_EQ(e.http_status, 400);
  util::Json body = BodyOf(e);
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "temperature");
  EXPECT_EQ(body["error"]["code"], "invalid_value");
  EXPECT_EQ(body["error"]["message"], "too hot");
}

TEST(ApiErrorTest, MissingParamIsNull) {
  util::Json body = BodyOf(ApiErrorFromStatus(InvalidArgumentError("invalid_json", "bad")));
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_FALSE(body["error"].contains("n_ctx"));
}

TEST(ApiErrorTest, ContextLengthCarriesTokenCounts) {
  ApiError e = ApiErrorFromStatus(ContextLengthError("messages", 300, 16, 256));
  EXPECT_EQ(e.http_status, 400);
  util::Json body = BodyOf(e);
  EXPECT_EQ(body["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "messages");
  EXPECT_EQ(body["error"]["n_prompt_tokens"], 300);
  EXPECT_EQ(body["error"]["n_ctx"], 256);
}

TEST(ApiErrorTest, MapsEveryHttpClass) {
  EXPECT_EQ(ApiErrorFromStatus(ModelNotFoundError("x")).http_status, 404);
  EXPECT_EQ(ApiErrorFromStatus(ModelNotFoundError("x")).code, "model_not_found");
  EXPECT_EQ(ApiErrorFromStatus(ModelNotFoundError("x")).param, "model");
  EXPECT_EQ(ApiErrorFromStatus(RouteNotFoundError("/x")).http_status, 404);
  EXPECT_EQ(ApiErrorFromStatus(RouteNotFoundError("/x")).code, "not_found");
  // A base URL without /v1, or with it twice, gets the path it meant.
  auto message = [](std::string_view path) {
    return std::string(ApiErrorFromStatus(RouteNotFoundError(path)).message);
  };
  EXPECT_NE(message("/chat/completions").find("Did you mean `/v1/chat/completions`?"),
            std::string::npos);
  EXPECT_NE(message("/v1/v1/messages").find("Did you mean `/v1/messages`?"), std::string::npos);
  EXPECT_EQ(message("/v1/nothing").find("Did you mean"), std::string::npos);
  EXPECT_EQ(message("/x").find("Did you mean"), std::string::npos);
  EXPECT_NE(std::string(ApiErrorFromStatus(ModelNotFoundError("gpt-4o", "tiny")).message)
                .find("This server serves `tiny`."),
            std::string::npos);
  EXPECT_EQ(ApiErrorFromStatus(MethodNotAllowedError("GET", "/v1/completions")).http_status, 405);
  EXPECT_EQ(ApiErrorFromStatus(RequestTooLargeError(10)).http_status, 413);
  EXPECT_EQ(ApiErrorFromStatus(RequestTooLargeError(10)).code, "request_too_large");
  EXPECT_EQ(
      ApiErrorFromStatus(MakeError(absl::StatusCode::kUnauthenticated, "bad_key", "k")).http_status,
      401);
  EXPECT_EQ(ApiErrorFromStatus(ResourceExhaustedError("busy", "b")).http_status, 429);
  EXPECT_EQ(ApiErrorFromStatus(ResourceExhaustedError("kv_cache_too_small", "b")).http_status, 400);
  EXPECT_EQ(ApiErrorFromStatus(UnavailableError("shutting_down", "s")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(InternalError("boom", "b")).http_status, 500);
  EXPECT_EQ(ApiErrorFromStatus(InternalError("boom", "b")).type, "server_error");
  EXPECT_EQ(ApiErrorFromStatus(absl::UnknownError("x")).http_status, 500);
}

TEST(ApiErrorTest, BodyStaysValidJsonWithInvalidUtf8InMessage) {
  ApiError e = ApiErrorFromStatus(InvalidArgumentError("x", std::string("bad \xff byte")));
  EXPECT_TRUE(util::ParseJson(ErrorBody(e)).ok());
}

}  // namespace
}  // namespace deepinfer::http

namespace deepinfer::http {
namespace {

TEST(ErrorCodeRegistryTest, EveryCodeIsAnsweredWithItsRegisteredHttpStatus) {
  for (const util::ErrorCode& code : util::AllErrorCodes()) {
    ApiError error = ApiErrorFromStatus(util::CodedError(code, "m"));
    EXPECT_EQ(error.code, code.name);
    EXPECT_EQ(error.http_status, code.http_status) << code.name;
    EXPECT_EQ(error.type.empty(), false) << code.name;
  }
}

TEST(ErrorCodeRegistryTest, NamesAreUniqueSnakeCaseAndFindable) {
  std::set<std::string_view> seen;
  for (const util::ErrorCode& code : util::AllErrorCodes()) {
    EXPECT_TRUE(seen.insert(code.name).second) << code.name;
    for (char c : code.name) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << code.name;
    EXPECT_EQ(util::FindErrorCode(code.name), &code);
    EXPECT_FALSE(code.meaning.empty()) << code.name;
  }
  EXPECT_EQ(util::FindErrorCode("no_such_code"), nullptr);
}

TEST(ErrorCodeRegistryTest, AnUnregisteredCodeOrAnotherStatusFallsBackToTheCanonicalCode) {
  EXPECT_EQ(ApiErrorFromStatus(MakeError(absl::StatusCode::kNotFound, "x_y", "m")).http_status,
            404);
  // io_error raised as Unavailable (a socket) keeps Unavailable's 503, not the registry's 500.
  EXPECT_EQ(ApiErrorFromStatus(UnavailableError(util::codes::kIoError, "m")).http_status, 503);
  EXPECT_EQ(ApiErrorFromStatus(util::CodedError(util::codes::kBackendError, "m")).type,
            "server_error");
  EXPECT_EQ(ApiErrorFromStatus(util::CodedError(util::codes::kModelNotFound, "m")).type,
            "invalid_request_error");
}

}  // namespace
}  // namespace deepinfer::http
