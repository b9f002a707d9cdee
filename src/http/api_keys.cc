#include "http/api_keys.h"

#include <openssl/crypto.h>

#include "boost/beast/core/string.hpp"

namespace deepinfer::http {
namespace {

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view PresentedKey(std::string_view authorization, std::string_view x_api_key) {
  authorization = TrimBlanks(authorization);
  if (!authorization.empty()) {
    if (!(authorization.size() >= 7 &&
          boost::beast::iequals(authorization.substr(0, 7), "bearer ")))
      return {};
    return TrimBlanks(authorization.substr(7));
  }
  return TrimBlanks(x_api_key);
}

ApiKeySet::ApiKeySet(const std::vector<std::string>& keys) {
  digests_.reserve(keys.size());
  for (const std::string& key : keys) digests_.push_back(util::Sha256(key));
}

bool ApiKeySet::Contains(std::string_view presented) const {
  if (presented.empty()) return false;
  const util::Sha256Digest digest = util::Sha256(presented);
  bool found = false;
  for (const util::Sha256Digest& d : digests_) {
    // No early exit: the time taken does not say which key matched, or how many were tried.
    found |= CRYPTO_memcmp(d.data(), digest.data(), digest.size()) == 0;
  }
  return found;
}

}  // namespace deepinfer::http
