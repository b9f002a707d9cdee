#pragma once

// Error handling shared by every layer.
//
// What can fail for outside reasons returns absl::Status / absl::StatusOr<T>. Each such error
// carries a stable, machine-readable code string (for example "bad_magic" or
// "context_length_exceeded") as a payload, so that the CLI, the HTTP layer and tests can key on
// it without parsing messages. The mapping from status to HTTP lives in one place (api/).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deepinfer {

// Returns a status with canonical `code`, the stable machine-readable `error_code` and `message`.
//
// Threads: pure function.
absl::Status MakeError(absl::StatusCode code, std::string_view error_code,
                       std::string_view message);

// Shorthands for the common canonical codes.
absl::Status InvalidArgumentError(std::string_view error_code, std::string_view message);
absl::Status NotFoundError(std::string_view error_code, std::string_view message);
absl::Status DataLossError(std::string_view error_code, std::string_view message);
absl::Status UnimplementedError(std::string_view error_code, std::string_view message);
absl::Status ResourceExhaustedError(std::string_view error_code, std::string_view message);
absl::Status UnavailableError(std::string_view error_code, std::string_view message);
absl::Status InternalError(std::string_view error_code, std::string_view message);

// Returns the stable error code of `status`: its payload when set, else a name derived from the
// canonical code ("invalid_argument", "not_found", ...). Returns "ok" for an OK status.
std::string ErrorCodeOf(const absl::Status& status);

// Formats "<error_code>: <message>" on one line, for CLI output.
std::string OneLineError(const absl::Status& status);

// `status` with "<context>: " before its message (same canonical and stable code), to say which
// file or input an error is about; OK stays OK.
absl::Status WithContext(const absl::Status& status, std::string_view context);

}  // namespace deepinfer

#define DI_STATUS_CONCAT_INNER_(a, b) a##b
#define DI_STATUS_CONCAT_(a, b) DI_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define DI_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status di_status_ = (expr);      \
    if (!di_status_.ok()) return di_status_; \
  } while (0)

// DI_ASSIGN_OR_RETURN(lhs, expr): evaluates the absl::StatusOr `expr`; returns its status on error,
// else assigns the value to `lhs` (which may be a declaration such as `auto x`).
#define DI_ASSIGN_OR_RETURN(lhs, expr) \
  DI_ASSIGN_OR_RETURN_IMPL_(DI_STATUS_CONCAT_(di_statusor_, __LINE__), lhs, expr)
#define DI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// Always-on invariant check: programmer errors only, never conditions a client or file can cause.
#define DI_CHECK(cond)                                                              \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
