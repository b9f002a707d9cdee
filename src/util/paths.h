#pragma once

// Path rules shared by the tools that take paths from files an operator or a model publisher
// wrote (manifests, recipes): what may be joined under a root without leaving it.

#include <string>
#include <string_view>

namespace deepinfer::util {

// True when `path` is a relative path that stays inside whatever root it is joined to: not
// empty, no leading '/', no NUL byte, and no empty, "." or ".." component ("a//b", "a/",
// "./a" and "a/../b" are all refused). Symbolic links are not resolved: callers that must not
// follow them check with lstat.
// Threads: pure function.
bool IsSafeRelativePath(std::string_view path);

// `root` + "/" + `relative`, without doubling a trailing '/' of `root`.
std::string JoinPath(std::string_view root, std::string_view relative);

}  // namespace deepinfer::util
