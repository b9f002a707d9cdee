#include "util/paths.h"

namespace deepinfer::util {

bool IsSafeRelativePath(std::string_view path) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string JoinPath(std::string_view root, std::string_view relative) {
  std::string out(root);
  if (!out.empty() && out.back() != '/') out += '/';
  out += relative;
  return out;
}

}  // namespace deepinfer::util
