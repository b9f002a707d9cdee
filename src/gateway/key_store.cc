#include "gateway/key_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>

#include "fmt/format.h"
#include "openssl/crypto.h"
#include "openssl/rand.h"
#include "util/json.h"
#include "util/mapped_file.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::gateway {
namespace {

using util::Json;

absl::Status BadStore(const std::string& message) {
  return InvalidArgumentError(util::codes::kBadKeyStore, message);
}

bool ParseHexDigest(const std::string& hex, Digest* out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

// Reads a non-negative integer field that fits `max`.
bool GetCount(const Json& value, int64_t max, int64_t* out) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(max)) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < 0 || v > max) return false;
    *out = v;
    return true;
  }
  return false;
}

absl::StatusOr<KeyRecord> ParseRecord(const Json& entry, size_t index) {
  if (!entry.is_object()) return BadStore(fmt::format("keys[{}] is not an object", index));
  KeyRecord record;
  bool have_id = false;
  bool have_digest = false;
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    const std::string& field = it.key();
    const Json& value = it.value();
    if (field == "id") {
      if (!value.is_string() || !IsValidKeyId(value.get<std::string>())) {
        return BadStore(fmt::format("keys[{}].id must match [A-Za-z0-9._-]{{1,64}}", index));
      }
      record.id = value.get<std::string>();
      have_id = true;
    } else if (field == "sha256") {
      if (!value.is_string() || !ParseHexDigest(value.get<std::string>(), &record.sha256)) {
        return BadStore(fmt::format("keys[{}].sha256 must be 64 hex digits", index));
      }
      have_digest = true;
    } else if (field == "max_concurrent") {
      int64_t v = 0;
      if (!GetCount(value, 1 << 20, &v)) {
        return BadStore(fmt::format("keys[{}].max_concurrent must be an integer >= 0", index));
      }
      record.max_concurrent = static_cast<int>(v);
    } else if (field == "expires_unix") {
      if (!GetCount(value, int64_t{1} << 40, &record.expires_unix)) {
        return BadStore(fmt::format("keys[{}].expires_unix must be an integer >= 0", index));
      }
    } else if (field == "admin") {
      if (!value.is_boolean())
        return BadStore(fmt::format("keys[{}].admin must be a boolean", index));
      record.admin = value.get<bool>();
    } else if (field == "comment" || field == "created_unix") {
      // Informational fields written by add-key.
    } else {
      return BadStore(fmt::format("keys[{}] has unknown field '{}'", index, field));
    }
  }
  if (!have_id) return BadStore(fmt::format("keys[{}] has no id", index));
  if (!have_digest) return BadStore(fmt::format("keys[{}] has no sha256", index));
  return record;
}

}  // namespace

bool IsValidKeyId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string ToHex(const uint8_t* data, size_t size) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 15];
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const KeyStore>> KeyStore::Parse(std::string_view text) {
  auto json = util::ParseJson(text);
  if (!json.ok()) return BadStore("not valid JSON (syntax, encoding or nesting)");
  if (!json->is_object()) return BadStore("the key store must be a JSON object");
  auto store = std::make_shared<KeyStore>();
  std::set<std::string> ids;
  std::set<Digest> digests;
  for (auto it = json->begin(); it != json->end(); ++it) {
    if (it.key() == "version") {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() != 1) {
        return BadStore("unsupported version (expected 1)");
      }
    } else if (it.key() == "keys") {
      if (!it.value().is_array()) return BadStore("'keys' must be an array");
      size_t index = 0;
      for (const Json& entry : it.value()) {
        DI_ASSIGN_OR_RETURN(KeyRecord record, ParseRecord(entry, index));
        if (!ids.insert(record.id).second) {
          return BadStore(fmt::format("key id '{}' appears twice", record.id));
        }
        if (!digests.insert(record.sha256).second) {
          return BadStore(fmt::format("keys[{}] repeats the digest of another key", index));
        }
        store->records_.push_back(std::move(record));
        ++index;
      }
    } else {
      return BadStore(fmt::format("unknown top-level field '{}'", it.key()));
    }
  }
  return std::shared_ptr<const KeyStore>(std::move(store));
}

std::shared_ptr<const KeyStore> KeyStore::Empty() { return std::make_shared<KeyStore>(); }

std::shared_ptr<const KeyStore> KeyStore::FromRecords(std::vector<KeyRecord> records) {
  auto store = std::make_shared<KeyStore>();
  store->records_ = std::move(records);
  return store;
}

AuthOutcome KeyStore::Authenticate(std::string_view presented, int64_t now_unix) const {
  AuthOutcome outcome;
  if (presented.empty()) return outcome;
  const Digest digest = Sha256(presented);
  const KeyRecord* match = nullptr;
  for (const KeyRecord& record : records_) {
    // No early exit: every record costs the same whether or not an earlier one matched.
    bool equal = CRYPTO_memcmp(record.sha256.data(), digest.data(), digest.size()) == 0;
    if (equal) match = &record;
  }
  if (match == nullptr) {
    outcome.result = AuthResult::kInvalid;
    return outcome;
  }
  outcome.key = *match;
  bool expired = match->expires_unix != 0 && now_unix >= match->expires_unix;
  outcome.result = expired ? AuthResult::kExpired : AuthResult::kOk;
  return outcome;
}

std::string KeyStore::Serialize() const {
  std::string out = "{\"version\": 1, \"keys\": [\n";
  for (size_t i = 0; i < records_.size(); ++i) {
    const KeyRecord& r = records_[i];
    Json entry = Json::object();
    entry["id"] = r.id;
    entry["sha256"] = ToHex(r.sha256.data(), r.sha256.size());
    if (r.max_concurrent > 0) entry["max_concurrent"] = r.max_concurrent;
    if (r.expires_unix > 0) entry["expires_unix"] = r.expires_unix;
    if (r.admin) entry["admin"] = true;
    out += "  " + util::DumpJson(entry) + (i + 1 < records_.size() ? ",\n" : "\n");
  }
  out += "]}\n";
  return out;
}

absl::StatusOr<std::string> GenerateKey() {
  uint8_t bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return InternalError(util::codes::kRngFailed, "RAND_bytes failed");
  }
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out = "sk-di-";
  uint32_t acc = 0;
  int bits = 0;
  for (uint8_t b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      out += kAlphabet[(acc >> (bits - 6)) & 63];
      bits -= 6;
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return out;
}

absl::StatusOr<std::string> AddKeyToFile(const std::string& path, const NewKeyOptions& options) {
  if (!IsValidKeyId(options.id)) {
    return InvalidArgumentError(util::codes::kBadKeyId, "key id must match [A-Za-z0-9._-]{1,64}");
  }
  std::shared_ptr<const KeyStore> store = KeyStore::Empty();
  auto text = util::ReadFile(path);
  if (text.ok()) {
    DI_ASSIGN_OR_RETURN(store, KeyStore::Parse(*text));
  } else if (text.status().code() != absl::StatusCode::kNotFound) {
    return text.status();
  }
  for (const KeyRecord& r : store->records()) {
    if (r.id == options.id) {
      return MakeError(absl::StatusCode::kAlreadyExists, util::codes::kKeyIdExists,
                       fmt::format("key id '{}' already exists in {}", options.id, path));
    }
  }
  DI_ASSIGN_OR_RETURN(std::string key, GenerateKey());
  KeyRecord record;
  record.id = options.id;
  record.sha256 = Sha256(key);
  record.max_concurrent = options.max_concurrent;
  record.expires_unix = options.expires_unix;
  record.admin = options.admin;
  std::vector<KeyRecord> records = store->records();
  records.push_back(record);
  std::string serialized = KeyStore::FromRecords(std::move(records))->Serialize();
  // Only a file that loads is written.
  DI_RETURN_IF_ERROR(KeyStore::Parse(serialized).status());
  // An existing store keeps its owner, group and mode (the gateway's service user may read it
  // through its group); a new one is private to its creator.
  struct stat before {};
  util::FileMode mode{0600};
  if (::stat(path.c_str(), &before) == 0) {
    mode = {static_cast<int>(before.st_mode & 07777), static_cast<int>(before.st_uid),
            static_cast<int>(before.st_gid)};
  }
  DI_RETURN_IF_ERROR(util::WriteFileAtomically(path, serialized, /*overwrite=*/true, mode));
  return key;
}

}  // namespace deepinfer::gateway
