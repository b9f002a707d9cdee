#include "engine/prefix_checkpoint.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <optional>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

namespace codes = util::codes;
namespace fs = std::filesystem;

// Bounds a reader enforces before it multiplies anything.
constexpr int64_t kMaxBlockSize = 1 << 16;
constexpr int64_t kMaxLayers = 1 << 12;
constexpr int64_t kMaxLayerBytes = int64_t{1} << 24;  // per token slot
constexpr int64_t kMaxTokens = int64_t{1} << 24;

util::Json LayoutJson(const CheckpointLayout& l) {
  return util::Json{{"architecture", l.architecture},   {"kv_dtype", l.kv_dtype},
                    {"numerics", l.numerics},           {"block_size", l.block_size},
                    {"layer_bytes", l.layer_bytes},     {"window_layer_bytes", l.window_layer_bytes},
                    {"window_tokens", l.window_tokens}};
}

// The payload size the layout implies for `blocks` blocks of which the window keeps
// [window_first, blocks); -1 when it would overflow.
int64_t PayloadBytes(const CheckpointLayout& l, int64_t blocks, int64_t window_first) {
  int64_t total = 0;
  auto add = [&](const std::vector<int64_t>& per_layer, int64_t n) {
    for (int64_t b : per_layer) {
      if (b < 0 || b > kMaxLayerBytes) return false;
      const int64_t part = b * l.block_size * n;  // each factor bounded: no overflow
      if (total > std::numeric_limits<int64_t>::max() - part) return false;
      total += part;
    }
    return true;
  };
  if (!add(l.layer_bytes, blocks) || !add(l.window_layer_bytes, blocks - window_first)) return -1;
  return total;
}

absl::Status Reject(CheckpointReject r, CheckpointReject* out, std::string_view detail) {
  if (out != nullptr) *out = r;
  return DataLossError(codes::kBadPrefixCheckpoint,
                       fmt::format("{}: {}", CheckpointRejectName(r), detail));
}

bool IntField(const util::Json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  const util::Json* v = util::Member(j, key);
  if (v == nullptr || !v->is_number_integer()) return false;
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return false;
  *out = x;
  return true;
}

bool StringField(const util::Json& j, const char* key, std::string* out) {
  const util::Json* v = util::Member(j, key);
  if (v == nullptr || !v->is_string()) return false;
  *out = v->get<std::string>();
  return true;
}

bool LayerArray(const util::Json& j, const char* key, std::vector<int64_t>* out) {
  const util::Json* v = util::Member(j, key);
  if (v == nullptr || !v->is_array() || v->size() > static_cast<size_t>(kMaxLayers)) return false;
  out->clear();
  for (const auto& e : *v) {
    if (!e.is_number_integer()) return false;
    const int64_t x = e.get<int64_t>();
    if (x < 0 || x > kMaxLayerBytes) return false;
    out->push_back(x);
  }
  return true;
}

// More than any prompt can hold (the API accepts at most 999 images per request).
constexpr size_t kMaxImages = 1 << 16;

util::Json ImagesJson(const std::vector<CheckpointImage>& images) {
  util::Json out = util::Json::array();
  for (const CheckpointImage& im : images) {
    out.push_back({{"position", im.position},
                   {"length", im.length},
                   {"content_hash", fmt::format("{:016x}", im.content_hash)}});
  }
  return out;
}

// The header's images, each a span of at least one position starting inside the prefix, in
// order and disjoint.
bool ParseImages(const util::Json& j, int64_t num_tokens, std::vector<CheckpointImage>* out) {
  if (!j.is_array() || j.size() > kMaxImages) return false;
  int64_t end = 0;
  for (const auto& e : j) {
    int64_t position = 0, length = 0;
    std::string hash;
    if (!e.is_object() || !IntField(e, "position", end, num_tokens - 1, &position) ||
        !IntField(e, "length", 1, kMaxTokens, &length) || !StringField(e, "content_hash", &hash) ||
        hash.size() != 16) {
      return false;
    }
    uint64_t h = 0;
    for (char ch : hash) {
      const int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      if (v < 0) return false;
      h = h << 4 | static_cast<uint64_t>(v);
    }
    out->push_back({static_cast<int32_t>(position), static_cast<int32_t>(length), h});
    end = position + length;
  }
  return true;
}

bool ParseLayout(const util::Json& j, CheckpointLayout* l) {
  if (!j.is_object()) return false;
  int64_t block_size = 0, window_tokens = 0;
  if (!StringField(j, "architecture", &l->architecture) ||
      !StringField(j, "kv_dtype", &l->kv_dtype) || !StringField(j, "numerics", &l->numerics) ||
      !IntField(j, "block_size", 1, kMaxBlockSize, &block_size) ||
      !IntField(j, "window_tokens", 0, kMaxTokens, &window_tokens) ||
      !LayerArray(j, "layer_bytes", &l->layer_bytes) ||
      !LayerArray(j, "window_layer_bytes", &l->window_layer_bytes)) {
    return false;
  }
  l->block_size = static_cast<int32_t>(block_size);
  l->window_tokens = static_cast<int32_t>(window_tokens);
  return true;
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  std::string hex;
  hex.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) fmt::format_to(std::back_inserter(hex), "{:02x}", md[i]);
  return hex;
}

std::string TokensSha256(const int32_t* tokens, size_t n) {
  // The host is little endian (x86-64, aarch64), so the in-memory bytes are the file's bytes.
  static_assert(std::endian::native == std::endian::little);
  return Sha256Hex(std::string_view(reinterpret_cast<const char*>(tokens), n * sizeof(int32_t)));
}

std::string CheckpointFileName(uint64_t chain_hash) {
  return fmt::format("{:016x}{}", chain_hash, kCheckpointSuffix);
}

absl::StatusOr<std::string> EncodeCheckpoint(PrefixCheckpoint& c) {
  CheckpointHeader& h = c.header;
  const int64_t bs = h.layout.block_size;
  if (bs <= 0 || c.tokens.empty() || c.tokens.size() % static_cast<size_t>(bs) != 0 ||
      static_cast<int64_t>(c.tokens.size()) > kMaxTokens) {
    return DataLossError(codes::kBadPrefixCheckpoint,
                         "a checkpoint holds a positive whole number of blocks");
  }
  h.num_tokens = static_cast<int32_t>(c.tokens.size());
  const int64_t blocks = h.num_blocks();
  if (h.window_first_block < 0 || h.window_first_block > blocks ||
      PayloadBytes(h.layout, blocks, h.window_first_block) !=
          static_cast<int64_t>(c.payload.size())) {
    return DataLossError(codes::kBadPrefixCheckpoint,
                         "the payload size does not match the layout");
  }
  int64_t image_end = 0;
  for (const CheckpointImage& im : h.images) {
    if (im.position < image_end || im.position >= h.num_tokens || im.length < 1) {
      return DataLossError(codes::kBadPrefixCheckpoint,
                           "a checkpoint's images start inside it, in order, without overlap");
    }
    image_end = int64_t{im.position} + im.length;
  }
  h.tokens_sha256 = TokensSha256(c.tokens.data(), c.tokens.size());
  h.payload_bytes = static_cast<int64_t>(c.payload.size());
  h.payload_sha256 = Sha256Hex(c.payload);
  util::Json header{{"format", "deepinfer-prefix-checkpoint"},
                    {"version", h.images.empty() ? 1 : 2},
                    {"model_revision", h.model_revision},
                    {"layout", LayoutJson(h.layout)},
                    {"cache_salt", std::to_string(h.cache_salt)},
                    {"num_tokens", h.num_tokens},
                    {"window_first_block", h.window_first_block},
                    {"tokens_sha256", h.tokens_sha256},
                    {"payload_bytes", h.payload_bytes},
                    {"payload_sha256", h.payload_sha256}};
  if (!h.images.empty()) header["images"] = ImagesJson(h.images);
  const std::string json = util::DumpJson(header);
  std::string out;
  out.reserve(kCheckpointMagic.size() + 4 + json.size() + 4 * c.tokens.size() + c.payload.size());
  out.append(kCheckpointMagic);
  PutU32(out, static_cast<uint32_t>(json.size()));
  out.append(json);
  out.append(reinterpret_cast<const char*>(c.tokens.data()), 4 * c.tokens.size());
  out.append(c.payload);
  return out;
}

absl::StatusOr<PrefixCheckpoint> DecodeCheckpoint(std::string_view bytes,
                                                  const CheckpointExpect& expect,
                                                  CheckpointReject* reason) {
  const size_t fixed = kCheckpointMagic.size() + 4;
  if (bytes.size() < fixed) {
    return Reject(bytes.substr(0, std::min(bytes.size(), kCheckpointMagic.size())) ==
                          kCheckpointMagic.substr(0, std::min(bytes.size(), kCheckpointMagic.size()))
                      ? CheckpointReject::kTruncated
                      : CheckpointReject::kBadFormat,
                  reason, "shorter than the fixed header");
  }
  if (bytes.substr(0, kCheckpointMagic.size()) != kCheckpointMagic) {
    return Reject(CheckpointReject::kBadFormat, reason, "not a deepinfer prefix checkpoint");
  }
  const uint32_t hlen = GetU32(bytes.data() + kCheckpointMagic.size());
  if (hlen > kMaxCheckpointHeaderBytes) {
    return Reject(CheckpointReject::kBadFormat, reason, "header length out of range");
  }
  if (bytes.size() - fixed < hlen) {
    return Reject(CheckpointReject::kTruncated, reason, "ends inside the header");
  }
  auto json = util::ParseJson(bytes.substr(fixed, hlen));
  if (!json.ok() || !json->is_object()) {
    return Reject(CheckpointReject::kBadFormat, reason, "the header is not a JSON object");
  }
  PrefixCheckpoint c;
  CheckpointHeader& h = c.header;
  std::string format, salt;
  int64_t version = 0, num_tokens = 0, window_first = 0, payload_bytes = 0;
  const util::Json* layout = util::Member(*json, "layout");
  if (!StringField(*json, "format", &format) || format != "deepinfer-prefix-checkpoint" ||
      !IntField(*json, "version", 1, 2, &version) ||
      !StringField(*json, "model_revision", &h.model_revision) || layout == nullptr ||
      !ParseLayout(*layout, &h.layout) || !StringField(*json, "cache_salt", &salt) ||
      !IntField(*json, "num_tokens", 1, kMaxTokens, &num_tokens) ||
      !IntField(*json, "window_first_block", 0, kMaxTokens, &window_first) ||
      !IntField(*json, "payload_bytes", 0, std::numeric_limits<int64_t>::max(), &payload_bytes) ||
      !StringField(*json, "tokens_sha256", &h.tokens_sha256) ||
      !StringField(*json, "payload_sha256", &h.payload_sha256)) {
    return Reject(CheckpointReject::kBadFormat, reason, "a header field is missing or invalid");
  }
  if (salt.empty() || salt.size() > 20 ||
      !std::all_of(salt.begin(), salt.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return Reject(CheckpointReject::kBadFormat, reason, "cache_salt is not a number");
  }
  errno = 0;
  const unsigned long long salt_value = std::strtoull(salt.c_str(), nullptr, 10);
  if (errno == ERANGE) return Reject(CheckpointReject::kBadFormat, reason, "cache_salt overflows");
  h.cache_salt = salt_value;
  h.num_tokens = static_cast<int32_t>(num_tokens);
  h.window_first_block = static_cast<int32_t>(window_first);
  h.payload_bytes = payload_bytes;
  // Version 2 has images, version 1 none.
  const util::Json* images = util::Member(*json, "images");
  if ((version == 2) != (images != nullptr) ||
      (images != nullptr && (!ParseImages(*images, num_tokens, &h.images) || h.images.empty()))) {
    return Reject(CheckpointReject::kBadFormat, reason, "images are invalid or do not match the version");
  }
  const int64_t bs = h.layout.block_size;
  const int64_t blocks = num_tokens / bs;
  if (num_tokens % bs != 0 || window_first > blocks ||
      PayloadBytes(h.layout, blocks, window_first) != payload_bytes) {
    return Reject(CheckpointReject::kBadFormat, reason, "sizes do not match the layout");
  }
  const size_t body = bytes.size() - fixed - hlen;
  const uint64_t need = 4 * static_cast<uint64_t>(num_tokens) + static_cast<uint64_t>(payload_bytes);
  if (body < need) return Reject(CheckpointReject::kTruncated, reason, "ends inside the payload");
  if (body > need) return Reject(CheckpointReject::kBadFormat, reason, "bytes after the payload");

  if (h.model_revision != expect.model_revision) {
    return Reject(CheckpointReject::kWrongRevision, reason,
                  fmt::format("written by model revision '{}', this server runs '{}'",
                              h.model_revision, expect.model_revision));
  }
  if (!(h.layout == expect.layout)) {
    return Reject(CheckpointReject::kWrongLayout, reason,
                  fmt::format("layout {} differs from this server's {}",
                              util::DumpJson(LayoutJson(h.layout)),
                              util::DumpJson(LayoutJson(expect.layout))));
  }
  if (h.cache_salt != expect.cache_salt ||
      (!expect.tokens_sha256.empty() &&
       (h.tokens_sha256 != expect.tokens_sha256 || h.images != expect.images))) {
    return Reject(CheckpointReject::kWrongFingerprint, reason,
                  "its tokens are not the requested prefix");
  }
  const std::string_view tokens = bytes.substr(fixed + hlen, 4 * static_cast<size_t>(num_tokens));
  const std::string_view payload = bytes.substr(fixed + hlen + tokens.size());
  if (Sha256Hex(tokens) != h.tokens_sha256) {
    return Reject(CheckpointReject::kCorrupt, reason, "token ids differ from their SHA-256");
  }
  if (Sha256Hex(payload) != h.payload_sha256) {
    return Reject(CheckpointReject::kCorrupt, reason, "payload differs from its SHA-256");
  }
  c.tokens.resize(static_cast<size_t>(num_tokens));
  std::memcpy(c.tokens.data(), tokens.data(), tokens.size());
  c.payload.assign(payload);
  return c;
}

// ---- CheckpointStore ----

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(std::string dir,
                                                                        int64_t max_bytes,
                                                                        size_t queue_capacity) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) {
    return InvalidArgumentError(codes::kBadOption,
                                fmt::format("checkpoint folder {} is not an existing folder", dir));
  }
  if (max_bytes <= 0) {
    return InvalidArgumentError(codes::kBadOption, "--checkpoint-max-bytes must be positive");
  }
  auto store = std::unique_ptr<CheckpointStore>(
      new CheckpointStore(std::move(dir), max_bytes, std::max<size_t>(1, queue_capacity)));
  int64_t total = 0;
  absl::MutexLock lock(&store->mu_);
  for (const auto& [path, size] : store->ListOldestFirst()) {
    total += size;
    if (auto h = ParseCheckpointFileName(fs::path(path).filename().string())) store->known_.insert(*h);
  }
  store->bytes_ = total;
  return store;
}

CheckpointStore::CheckpointStore(std::string dir, int64_t max_bytes, size_t queue_capacity)
    : dir_(std::move(dir)), max_bytes_(max_bytes), queue_capacity_(queue_capacity) {
  writer_ = std::thread([this] { WriterLoop(); });
}

CheckpointStore::~CheckpointStore() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  writer_.join();
}

std::string CheckpointStore::PathOf(uint64_t chain_hash) const {
  return absl::StrCat(dir_, "/", CheckpointFileName(chain_hash));
}

bool CheckpointStore::Exists(uint64_t chain_hash) const {
  struct stat st;
  return ::stat(PathOf(chain_hash).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::pair<uint64_t, int64_t>> CheckpointStore::NewestFirst() const {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (const auto& [path, size] : ListOldestFirst()) {
    if (auto h = ParseCheckpointFileName(fs::path(path).filename().string())) {
      out.emplace_back(*h, size);
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

bool CheckpointStore::Known(uint64_t chain_hash) const {
  absl::MutexLock lock(&mu_);
  return known_.contains(chain_hash);
}

int32_t CheckpointStore::Longest(const std::vector<uint64_t>& chain_hashes,
                                 int32_t min_blocks) const {
  absl::MutexLock lock(&mu_);
  for (int32_t k = static_cast<int32_t>(chain_hashes.size()); k >= std::max(1, min_blocks); --k) {
    if (known_.contains(chain_hashes[k - 1])) return k;
  }
  return 0;
}

absl::StatusOr<PrefixCheckpoint> CheckpointStore::Load(uint64_t chain_hash,
                                                       const CheckpointExpect& expect) {
  const auto start = std::chrono::steady_clock::now();
  auto bytes = util::ReadFile(PathOf(chain_hash));
  if (!bytes.ok()) {
    absl::MutexLock lock(&mu_);
    known_.erase(chain_hash);  // evicted by another process sharing the folder, or removed
    return bytes.status();
  }
  CheckpointReject reason = CheckpointReject::kBadFormat;
  auto checkpoint = DecodeCheckpoint(*bytes, expect, &reason);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::MutexLock lock(&mu_);
  if (!checkpoint.ok()) {
    ++counters_.rejected[static_cast<int>(reason)];
    if (reason == CheckpointReject::kTruncated || reason == CheckpointReject::kBadFormat ||
        reason == CheckpointReject::kCorrupt) {
      // Damaged: nobody can use it, and while it stands its name cannot be written again.
      std::error_code ec;
      const int64_t size = static_cast<int64_t>(bytes->size());
      if (fs::remove(PathOf(chain_hash), ec)) bytes_ = std::max<int64_t>(0, bytes_ - size);
      known_.erase(chain_hash);
    }
    return checkpoint.status();
  }
  ++counters_.restored;
  counters_.restored_tokens += checkpoint->header.num_tokens;
  counters_.restore_seconds += seconds;
  return checkpoint;
}

bool CheckpointStore::Save(uint64_t chain_hash, PrefixCheckpoint checkpoint) {
  absl::MutexLock lock(&mu_);
  if (stop_ || queue_.size() >= queue_capacity_ ||
      static_cast<int64_t>(checkpoint.payload.size()) > max_bytes_) {
    ++counters_.dropped;
    return false;
  }
  queue_.emplace_back(chain_hash, std::move(checkpoint));
  cv_.SignalAll();
  return true;
}

void CheckpointStore::WaitWritten(uint64_t chain_hash) {
  absl::MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ && writing_hash_ == chain_hash) return false;
    for (const auto& [hash, c] : queue_) {
      if (hash == chain_hash) return false;
    }
    return true;
  };
  while (!settled()) cv_.Wait(&mu_);
}

void CheckpointStore::Flush() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !writing_; };
  while (!idle()) cv_.Wait(&mu_);
}

CheckpointStore::Counters CheckpointStore::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

int64_t CheckpointStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void CheckpointStore::WriterLoop() {
  for (;;) {
    std::pair<uint64_t, PrefixCheckpoint> job;
    {
      absl::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) cv_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping with nothing left to write
      job = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      writing_hash_ = job.first;
    }
    WriteOne(job.first, job.second);
    job.second = {};  // free the payload before waiting for the next one
    absl::MutexLock lock(&mu_);
    writing_ = false;
    cv_.SignalAll();
  }
}

std::vector<std::pair<std::string, int64_t>> CheckpointStore::ListOldestFirst() const {
  struct Item {
    fs::file_time_type mtime;
    std::string path;
    int64_t size;
  };
  std::vector<Item> items;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!ParseCheckpointFileName(it->path().filename().string())) continue;
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const auto size = it->file_size(e2);
    if (e2) continue;
    const auto mtime = it->last_write_time(e2);
    if (e2) continue;
    items.push_back({mtime, it->path().string(), static_cast<int64_t>(size)});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.path < b.path;
  });
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(items.size());
  for (auto& i : items) out.emplace_back(std::move(i.path), i.size);
  return out;
}

void CheckpointStore::WriteOne(uint64_t chain_hash, PrefixCheckpoint& checkpoint) {
  if (Exists(chain_hash)) {
    absl::MutexLock lock(&mu_);
    ++counters_.skipped_existing;
    known_.insert(chain_hash);
    return;
  }
  auto file = EncodeCheckpoint(checkpoint);
  if (!file.ok()) {
    absl::MutexLock lock(&mu_);
    ++counters_.failed;
    return;
  }
  checkpoint.payload = {};
  const int64_t size = static_cast<int64_t>(file->size());
  // Make room: the folder may be shared (P/D), so its listing, not our own count, decides.
  const auto files = ListOldestFirst();
  int64_t total = 0;
  for (const auto& f : files) total += f.second;
  std::vector<uint64_t> evicted;
  for (const auto& [path, bytes] : files) {
    if (total + size <= max_bytes_) break;
    std::error_code ec;
    if (fs::remove(path, ec)) {
      total -= bytes;
      if (auto h = ParseCheckpointFileName(fs::path(path).filename().string())) evicted.push_back(*h);
    }
  }
  const absl::Status s = util::WriteFileAtomically(PathOf(chain_hash), *file, /*overwrite=*/false);
  absl::MutexLock lock(&mu_);
  counters_.evicted += static_cast<int64_t>(evicted.size());
  for (uint64_t h : evicted) known_.erase(h);
  if (s.ok()) {
    ++counters_.saved;
    counters_.saved_bytes += size;
    total += size;
    known_.insert(chain_hash);
  } else if (s.code() == absl::StatusCode::kAlreadyExists) {
    ++counters_.skipped_existing;  // another writer got there first
    known_.insert(chain_hash);
  } else {
    ++counters_.failed;
  }
  bytes_ = total;
}

}  // namespace deepinfer::engine
