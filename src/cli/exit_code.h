#pragma once

// The process exit status of every subcommand, in one place.

#include <string_view>

#include "absl/status/status.h"

namespace deepinfer::cli {

inline constexpr int kExitOk = 0;
// The work itself failed: I/O, the network, the engine, a check that found problems.
inline constexpr int kExitFailure = 1;
// Bad input: flags, files (missing, malformed, corrupt), requests, names already taken.
inline constexpr int kExitBadInput = 2;

// The exit status for a failed `status`: kExitBadInput for InvalidArgument, NotFound,
// AlreadyExists, DataLoss, OutOfRange and Unimplemented (what the user can fix in what they
// gave), kExitFailure for every other code (FailedPrecondition included: the state of the machine,
// such as another watcher holding the lock, is not the input's fault). kExitOk for OK.
int ExitCodeFor(const absl::Status& status);

// Prints "deepinfer <command>: [<what>: ]<error_code>: <message>" on one line to stderr and
// returns ExitCodeFor(status).
int ReportFailure(std::string_view command, const absl::Status& status, std::string_view what = "");

}  // namespace deepinfer::cli
