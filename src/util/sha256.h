#pragma once

// SHA-256 (OpenSSL) for keys and digests that are compared, never for speed-critical hashing
// (prefix-cache blocks use xxHash).

#include <array>
#include <cstdint>
#include <string_view>

namespace deepinfer::util {

using Sha256Digest = std::array<uint8_t, 32>;

// SHA-256 of `data`.
// Cost: about 50 ns plus 2 ns per byte (OpenSSL's SHA256_* calls, no allocation).
// Threads: any.
Sha256Digest Sha256(std::string_view data);

}  // namespace deepinfer::util
