#pragma once

// API keys of the gateway. The key store file holds only SHA-256 digests of keys, each with a key
// id (the name used in logs and metrics), an optional per-key concurrency limit, an optional
// expiry and an admin flag:
//
//   {"version": 1, "keys": [{"id": "alice", "sha256": "<64 hex digits>", "max_concurrent": 4,
//                            "expires_unix": 1893456000, "admin": false}]}
//
// A key itself exists only in the output of `deepinfer gateway add-key`.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "util/sha256.h"

namespace deepinfer::gateway {

using Digest = util::Sha256Digest;
using util::Sha256;

struct KeyRecord {
  std::string id;  // [A-Za-z0-9._-]{1,64}: safe in metric labels and logs
  Digest sha256{};
  int max_concurrent = 0;    // requests in flight at once with this key; 0: no limit
  int64_t expires_unix = 0;  // Units: seconds since the epoch; 0: never
  bool admin = false;        // may read /gateway/status
};

enum class AuthResult { kOk, kMissing, kInvalid, kExpired };

struct AuthOutcome {
  AuthResult result = AuthResult::kMissing;
  KeyRecord key;  // set when result is kOk or kExpired
};

// One parsed key store. Immutable; a reload builds a new one.
// Threads: safe to share once built.
class KeyStore {
 public:
  // Parses the JSON form above. Unknown fields are errors, so that a misspelt limit is not
  // silently ignored.
  // Errors: InvalidArgument "bad_key_store" with the offending entry.
  static absl::StatusOr<std::shared_ptr<const KeyStore>> Parse(std::string_view text);
  static std::shared_ptr<const KeyStore> Empty();
  // A store of `records` as given (no validation; Serialize + Parse validates).
  static std::shared_ptr<const KeyStore> FromRecords(std::vector<KeyRecord> records);

  // Checks a presented key ("" when none was sent). Every stored digest is compared with
  // CRYPTO_memcmp and the scan never stops early, so the time taken does not depend on which
  // digest (if any) matches.
  // Units: now_unix in seconds since the epoch.
  // Cost: one SHA-256 of the key plus 32 bytes compared per stored key.
  AuthOutcome Authenticate(std::string_view presented, int64_t now_unix) const;

  const std::vector<KeyRecord>& records() const { return records_; }
  // The JSON form, one key per line.
  std::string Serialize() const;

 private:
  std::vector<KeyRecord> records_;
};

std::string ToHex(const uint8_t* data, size_t size);

// A new random key: "sk-di-" followed by 43 base64url characters (32 bytes from RAND_bytes).
// Errors: Internal "rng_failed".
absl::StatusOr<std::string> GenerateKey();

struct NewKeyOptions {
  std::string id;
  int max_concurrent = 0;
  int64_t expires_unix = 0;
  bool admin = false;
};

// Creates a key, adds its digest to the store at `path` and returns the key, which is stored
// nowhere. A missing store is created with mode 0600; an existing one is rewritten atomically
// and keeps its owner, group and mode.
// Errors: InvalidArgument "bad_key_id" / "bad_key_store"; AlreadyExists "key_id_exists";
//   errors of util::WriteFileAtomically.
absl::StatusOr<std::string> AddKeyToFile(const std::string& path, const NewKeyOptions& options);

// Whether `id` is a valid key id.
bool IsValidKeyId(std::string_view id);

}  // namespace deepinfer::gateway
