#pragma once

// Persistent prefix checkpoints: the KV blocks of one cached prefix chain in an immutable file,
// so that a restarted server (or the decode half of a prefill/decode pair) restores a long prefix
// instead of recomputing it.
//
// File (`<name, 16 hex digits>.dipc`; the engine names a file by its chain hash mixed with a
// key of the model revision and layout, so servers of different revisions can share a folder):
//   8 bytes  magic "DIPFXCK1"
//   4 bytes  header length H (little endian), at most kMaxCheckpointHeaderBytes
//   H bytes  header JSON (CheckpointHeader)
//   4 * num_tokens bytes  the prefix's token ids (int32, little endian)
//   payload  for each main-cache layer l, for each block b in [0, num_blocks):
//              block_size * layout.layer_bytes[l] bytes (the block's rows as the cache holds
//              them); then for each window-cache layer l, for each block b in
//              [window_first_block, num_blocks): block_size * layout.window_layer_bytes[l]
// The header carries the model revision, the layout, the cache salt, the SHA-256 of the token
// ids (their fingerprint) and the SHA-256 of the payload; a reader checks all of them before it
// trusts a byte. Files are written atomically (temp, fsync, link) and never overwritten.
// Source: llama.cpp slot save/restore and vLLM/SGLang KV connectors for the idea
// (../shared/research/engine-anchors.md 2.7); the format is deepinfer's own.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace deepinfer::engine {

inline constexpr std::string_view kCheckpointMagic = "DIPFXCK1";
inline constexpr uint32_t kMaxCheckpointHeaderBytes = 1 << 20;
inline constexpr std::string_view kCheckpointSuffix = ".dipc";

// What must match between the writer's KV cache and the reader's for the blocks to mean the
// same thing. Units: bytes per token slot per layer.
struct CheckpointLayout {
  std::string architecture;  // arch::CausalLm's name ("llama", "deepseek_v3", ...)
  std::string kv_dtype;      // "f32", "f16", "bf16"
  std::string numerics;      // "fast", "ggml", "deepseek-qat", with "+" and the model's
                             // kv_packing() where it packs values ("deepseek-qat+fp4-index-keys")
  int32_t block_size = 0;    // tokens per block
  std::vector<int64_t> layer_bytes;         // main cache, [num_layers]
  std::vector<int64_t> window_layer_bytes;  // window cache; empty without one
  int32_t window_tokens = 0;                // positions a step reads back in the window cache

  bool operator==(const CheckpointLayout&) const = default;
};

// An image whose span lies (at least partly) in a checkpoint's prefix: the span's positions and
// the image's content hash. The prefix cache salts every block a span overlaps with the hash
// (engine/image_spans.h, BlockSalt), so a checkpoint must carry them to be named, found and
// installed under the same block hashes; a file with images never serves another image.
struct CheckpointImage {
  int32_t position = 0;
  int32_t length = 0;
  uint64_t content_hash = 0;

  bool operator==(const CheckpointImage&) const = default;
};

struct CheckpointHeader {
  std::string model_revision;
  CheckpointLayout layout;
  uint64_t cache_salt = 0;
  // In prompt order, non-overlapping, each starting inside the prefix. A file with images is
  // version 2 ("images": [{"position", "length", "content_hash": 16 hex digits}]), so that a
  // server that predates images rejects it instead of installing it unsalted; without images
  // the file is version 1, byte for byte as before.
  std::vector<CheckpointImage> images;
  int32_t num_tokens = 0;          // a whole number of blocks
  int32_t window_first_block = 0;  // window blocks kept: [window_first_block, num_blocks)
  std::string tokens_sha256;       // lowercase hex of the token ids' bytes
  int64_t payload_bytes = 0;
  std::string payload_sha256;      // lowercase hex

  int32_t num_blocks() const {
    return layout.block_size > 0 ? num_tokens / layout.block_size : 0;
  }
};

struct PrefixCheckpoint {
  CheckpointHeader header;
  std::vector<int32_t> tokens;  // [num_tokens]
  std::string payload;          // the layout above
};

// Why a checkpoint was not used; the label of the rejected-checkpoint counter.
enum class CheckpointReject {
  kTruncated,         // shorter than its header says
  kBadFormat,         // magic, header JSON, field ranges, sizes, trailing bytes
  kCorrupt,           // token ids or payload differ from their SHA-256 in the header
  kWrongRevision,     // written by another model revision
  kWrongLayout,       // another architecture, dtype, numerics, block size or layer shapes
  kWrongFingerprint,  // the token ids (or cache salt, or images) are not the requested prefix's
};
inline constexpr int kNumCheckpointRejects = 6;
// "truncated", "bad_format", "corrupt", "wrong_revision", "wrong_layout", "wrong_fingerprint"
// (the metrics' reason label). Inline: the metrics text is built without engine code.
inline const char* CheckpointRejectName(CheckpointReject reason) {
  constexpr const char* kNames[kNumCheckpointRejects] = {
      "truncated", "bad_format", "corrupt", "wrong_revision", "wrong_layout", "wrong_fingerprint"};
  const int i = static_cast<int>(reason);
  return i >= 0 && i < kNumCheckpointRejects ? kNames[i] : "bad_format";
}

// What the reader requires. An empty `tokens_sha256` skips the fingerprint check (listing).
// The images are part of the fingerprint: checked only with it.
struct CheckpointExpect {
  std::string model_revision;
  CheckpointLayout layout;
  uint64_t cache_salt = 0;
  std::string tokens_sha256;
  std::vector<CheckpointImage> images;
};

// Lowercase hex SHA-256 of `bytes` (OpenSSL).
std::string Sha256Hex(std::string_view bytes);
// The fingerprint of a prefix: Sha256Hex of its token ids as little-endian int32.
std::string TokensSha256(const int32_t* tokens, size_t n);

// Fills header.num_tokens, tokens_sha256, payload_bytes and payload_sha256 from `checkpoint`'s
// tokens and payload and returns the file's bytes.
// Errors: DataLoss "bad_prefix_checkpoint" when the tokens are not whole blocks or the payload
//   size does not match the layout.
absl::StatusOr<std::string> EncodeCheckpoint(PrefixCheckpoint& checkpoint);

// Parses and verifies a checkpoint file's bytes against `expect`: format, then revision, layout,
// fingerprint and salt, then both SHA-256 sums (the costly part last). On failure returns
// DataLoss "bad_prefix_checkpoint" with the reason in the message and in `*reason` (if given).
// Never trusts a length before checking it against `bytes.size()`; allocates at most
// bytes.size() plus the header.
// Threads: pure function.
absl::StatusOr<PrefixCheckpoint> DecodeCheckpoint(std::string_view bytes,
                                                  const CheckpointExpect& expect,
                                                  CheckpointReject* reason = nullptr);

// "<hash as 16 lowercase hex digits>.dipc".
std::string CheckpointFileName(uint64_t chain_hash);
// The hash a CheckpointFileName names; nullopt for anything else (other lengths, upper case,
// paths: a name from outside never reaches the file system unchecked). Inline: the API layer's
// protocol code checks names without linking engine code.
inline std::optional<uint64_t> ParseCheckpointFileName(std::string_view name) {
  if (name.size() != 16 + kCheckpointSuffix.size() || !name.ends_with(kCheckpointSuffix)) {
    return std::nullopt;
  }
  uint64_t h = 0;
  for (char ch : name.substr(0, 16)) {
    const int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (v < 0) return std::nullopt;
    h = h << 4 | static_cast<uint64_t>(v);
  }
  return h;
}

// A folder of checkpoint files with a byte budget, and a writer thread.
//
// Save() queues a checkpoint for the writer (bounded: a full queue drops it and counts it); the
// writer encodes it (the SHA-256 sums are computed there, not on the engine thread), skips
// chains that already have a file (immutable: never overwritten, also against another process
// sharing the folder), removes the oldest files (by modification time) until the new one fits
// in `max_bytes`, and writes it atomically. A folder that is read-only or full costs the save
// and a count, never a crash. Files are named by chain hash; the store keeps the set of names it
// listed at Open or wrote since, so Longest() needs no I/O, and Load() reads and verifies one.
// Threads: all methods are thread-safe. The destructor finishes queued writes.
class CheckpointStore {
 public:
  struct Counters {
    int64_t saved = 0;
    int64_t saved_bytes = 0;
    int64_t skipped_existing = 0;  // a file for the chain was already there
    int64_t dropped = 0;           // queue full or larger than the budget
    int64_t failed = 0;            // write errors (read-only or full folder, ...)
    int64_t evicted = 0;           // removed to stay within max_bytes
    int64_t restored = 0;          // checkpoints loaded and verified
    int64_t restored_tokens = 0;
    double restore_seconds = 0;    // reading and verifying them
    int64_t rejected[kNumCheckpointRejects] = {};  // by CheckpointReject
  };

  // Errors: InvalidArgument "bad_option" when `dir` is not an existing folder or max_bytes <= 0.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(std::string dir, int64_t max_bytes,
                                                               size_t queue_capacity = 4);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  const std::string& dir() const { return dir_; }
  std::string PathOf(uint64_t chain_hash) const;
  // Whether a file for the chain exists now (a stat; another process may have written it).
  bool Exists(uint64_t chain_hash) const;
  // The chain hashes of the folder's checkpoint files with their sizes in bytes, newest first
  // (a directory listing).
  std::vector<std::pair<uint64_t, int64_t>> NewestFirst() const;
  // Whether a file for the chain is known (listed at Open or written since); no I/O.
  bool Known(uint64_t chain_hash) const;
  // The largest k >= min_blocks such that a file for chain_hashes[k - 1] is known; 0 if none.
  // No I/O (the set of names listed at Open or written since).
  int32_t Longest(const std::vector<uint64_t>& chain_hashes, int32_t min_blocks) const;
  // Reads and verifies the file of `chain_hash` (DecodeCheckpoint), counting a restore or a
  // rejection. A missing file: NotFound "file_not_found" (forgotten from the known set, not
  // counted as a rejection). A truncated, malformed or corrupt file is removed (so that the
  // prefix can be saved again); one of another revision, layout or prefix stays.
  absl::StatusOr<PrefixCheckpoint> Load(uint64_t chain_hash, const CheckpointExpect& expect);
  // Queues `checkpoint` (header.model_revision, layout, cache_salt, window_first_block, tokens
  // and payload set) under `chain_hash`. Returns false when dropped.
  bool Save(uint64_t chain_hash, PrefixCheckpoint checkpoint);
  // Blocks until every queued checkpoint has been written or given up (tests, shutdown).
  void Flush();
  // Blocks until no write of `chain_hash` is queued or in progress (at once when there is none):
  // its file is then written, was there already, or could not be written.
  void WaitWritten(uint64_t chain_hash);
  Counters counters() const;
  // Sum of the sizes of the checkpoint files in the folder, as last scanned or written.
  int64_t bytes() const;

 private:
  CheckpointStore(std::string dir, int64_t max_bytes, size_t queue_capacity);
  void WriterLoop();
  void WriteOne(uint64_t chain_hash, PrefixCheckpoint& checkpoint);
  // Lists the folder's checkpoint files, oldest first, with their sizes.
  std::vector<std::pair<std::string, int64_t>> ListOldestFirst() const;

  const std::string dir_;
  const int64_t max_bytes_;
  const size_t queue_capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // queue changed or stopping
  std::deque<std::pair<uint64_t, PrefixCheckpoint>> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> known_ ABSL_GUARDED_BY(mu_);  // chain hashes with a file
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t writing_hash_ ABSL_GUARDED_BY(mu_) = 0;  // with writing_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace deepinfer::engine
