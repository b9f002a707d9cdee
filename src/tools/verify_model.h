#pragma once

// `deepinfer verify-model`: checks a model folder against a manifest that lists every file of one
// model revision with its size and SHA-256. One manifest per revision is shared by all machines;
// BuildManifest makes one from a trusted copy.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

struct ManifestFile {
  std::string path;  // relative to the model root, '/'-separated, no "." or ".." parts
  uint64_t size_bytes = 0;
  std::string sha256;  // 64 lower-case hex digits
};

// Manifest file format (JSON):
//   {"format": "deepinfer-manifest/1", "model": "...", "revision": "...",
//    "files": [{"path": "config.json", "size": 1234, "sha256": "..."}, ...]}
struct Manifest {
  std::string model;
  std::string revision;
  std::vector<ManifestFile> files;  // sorted by path, unique
};

// Errors: InvalidArgument "bad_manifest" (not JSON, wrong format tag, a path that is absolute or
//   climbs out of the root, a duplicate path, a negative size, a malformed digest).
absl::StatusOr<Manifest> ParseManifest(std::string_view text);
std::string ManifestJson(const Manifest& manifest);

// Returns the SHA-256 of a file's bytes as lower-case hex, adding each chunk's size to
// `*bytes_done` as it goes (for progress bars; may be null).
// Errors: NotFound "file_not_found", Internal "io_error".
// Cost: one sequential read; OpenSSL's SHA-256 (SHA-NI where the CPU has it).
absl::StatusOr<std::string> Sha256File(const std::string& path,
                                       std::atomic<uint64_t>* bytes_done = nullptr);

// SHA-256 of `bytes` as lower-case hex.
std::string Sha256Hex(std::string_view bytes);

// Lists the regular files under `root` (following symbolic links to files, as in Hugging Face
// snapshot folders), relative and sorted. Entries matching one of `excludes` (shell patterns
// matched against the relative path and against the file name) are left out.
// Errors: NotFound "root_not_found", Internal "io_error".
absl::StatusOr<std::vector<std::string>> ListModelFiles(const std::string& root,
                                                        const std::vector<std::string>& excludes);

enum class FindingKind { kMissing, kExtra, kSizeMismatch, kHashMismatch, kUnreadable };
const char* FindingKindName(FindingKind kind);

struct Finding {
  FindingKind kind;
  std::string path;
  std::string expected;  // size or digest from the manifest ("" for extra files)
  std::string actual;    // what was found ("" for missing files)
};

// Progress of a long run, reported about four times a second from the calling thread.
// Units: bytes.
using ProgressFn = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

struct VerifyOptions {
  bool full = false;    // hash every byte, not only sizes
  int num_threads = 0;  // hashing threads; 0: one per core
  std::vector<std::string> excludes;
  ProgressFn progress;  // may be empty
};

struct VerifyReport {
  int64_t num_files = 0;      // files in the manifest
  uint64_t total_bytes = 0;   // bytes in the manifest
  uint64_t hashed_bytes = 0;  // bytes hashed (--full)
  double seconds = 0;
  bool full = false;
  std::vector<Finding> findings;  // sorted by path

  bool ok() const { return findings.empty(); }
};

// Compares the folder with the manifest: presence, extra files and sizes, and with `full` the
// SHA-256 of every listed file whose size matches. Files are hashed in parallel, the largest
// first, one thread per file.
// Errors: NotFound "root_not_found"; mismatches are findings, not errors.
// Threads: spawns options.num_threads workers and joins them before returning.
absl::StatusOr<VerifyReport> VerifyModel(const std::string& root, const Manifest& manifest,
                                         const VerifyOptions& options);

// Hashes every file under `root` into a manifest.
// Errors: as ListModelFiles and Sha256File.
absl::StatusOr<Manifest> BuildManifest(const std::string& root, const std::string& model,
                                       const std::string& revision, const VerifyOptions& options);

// Table of findings and a verdict line; JSON with the same content.
std::string FormatVerifyReport(const VerifyReport& report);
std::string VerifyReportJson(const VerifyReport& report);

// "1.5 GiB", "512 B".
std::string HumanBytes(double bytes);

}  // namespace deepinfer::tools
