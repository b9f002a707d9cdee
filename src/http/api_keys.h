#pragma once

// API keys as clients present them (OpenAI's Bearer token, Anthropic's x-api-key) and the fixed
// key set `serve --api-key` checks them against. The gateway's key store (expiry, admin rights,
// files it reloads) is its own; both read the presented key here.

#include <string>
#include <string_view>
#include <vector>

#include "util/sha256.h"

namespace deepinfer::http {

// The key from "Authorization: Bearer <key>" (scheme case-insensitive), else from the Anthropic
// style "x-api-key" header, else "". An Authorization header of another scheme presents none.
std::string_view PresentedKey(std::string_view authorization, std::string_view x_api_key);

// A fixed set of keys, kept only as SHA-256 digests.
// Threads: const methods are safe from any thread.
class ApiKeySet {
 public:
  ApiKeySet() = default;
  explicit ApiKeySet(const std::vector<std::string>& keys);

  bool empty() const { return digests_.empty(); }
  size_t size() const { return digests_.size(); }

  // True when `presented` is one of the keys. Constant time in which key matched: the presented
  // key is hashed once and every digest is compared with CRYPTO_memcmp, with no early exit.
  // Cost: one SHA-256 of `presented` plus 32 bytes compared per key.
  bool Contains(std::string_view presented) const;

 private:
  std::vector<util::Sha256Digest> digests_;
};

}  // namespace deepinfer::http
