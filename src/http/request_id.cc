#include "http/request_id.h"

#include <cstdint>
#include <random>

namespace deepinfer::http {

bool UsableRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::string NewRequestId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id.resize(prefix.size() + 16);
  uint64_t v = rng();
  for (size_t i = id.size(); i-- > prefix.size(); v >>= 4) id[i] = kHex[v & 15];
  return id;
}

std::string RequestIdFor(const Request& request, std::string_view prefix) {
  const std::string_view sent = request.Header("x-request-id");
  return UsableRequestId(sent) ? std::string(sent) : NewRequestId(prefix);
}

}  // namespace deepinfer::http
