#include "tools/verify_model.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "openssl/evp.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/paths.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

namespace fs = std::filesystem;
using util::Json;
using Clock = std::chrono::steady_clock;

constexpr char kManifestFormat[] = "deepinfer-manifest/1";
// Big enough that syscalls cost nothing next to hashing, small enough to stay in L2.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

bool IsHexDigest(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool Excluded(const std::string& rel, const std::vector<std::string>& excludes) {
  std::string name =
      rel.substr(rel.find_last_of('/') == std::string::npos ? 0 : rel.find_last_of('/') + 1);
  for (const std::string& pattern : excludes) {
    if (fnmatch(pattern.c_str(), rel.c_str(), 0) == 0) return true;
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

// Runs fn(i) for i in [0, n) on `num_threads` threads, calling `tick` about four times a second
// on the calling thread until all are done.
void ParallelRun(size_t n, int num_threads, const std::function<void(size_t)>& fn,
                 const std::function<void()>& tick) {
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  const int num_workers = std::max(1, std::min<int>(num_threads, static_cast<int>(n)));
  int running = num_workers;  // under mu; workers count it down as they finish
  std::vector<std::thread> threads;
  for (int t = 0; t < num_workers; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
      absl::MutexLock lock(&mu);
      --running;
    });
  }
  auto all_done = [&running] { return running == 0; };
  for (bool done = false; !done;) {
    {
      absl::MutexLock lock(&mu);
      done = mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Milliseconds(250));
    }
    if (tick && !done) tick();
  }
  for (std::thread& t : threads) t.join();
  // The final state once more: when every worker ended before the first wait (a small or
  // cached folder), no tick ran in the loop and the progress bar was never drawn.
  if (tick) tick();
}

int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace

const char* FindingKindName(FindingKind kind) {
  switch (kind) {
    case FindingKind::kMissing:
      return "missing";
    case FindingKind::kExtra:
      return "extra";
    case FindingKind::kSizeMismatch:
      return "size_mismatch";
    case FindingKind::kHashMismatch:
      return "hash_mismatch";
    case FindingKind::kUnreadable:
      return "unreadable";
  }
  return "unknown";
}

std::string HumanBytes(double bytes) {
  const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

absl::StatusOr<Manifest> ParseManifest(std::string_view text) {
  auto bad = [](const std::string& why) {
    return InvalidArgumentError(util::codes::kBadManifest, why);
  };
  auto parsed = util::ParseJson(text);
  if (!parsed.ok()) return bad("the manifest is not valid JSON");
  util::Json& json = *parsed;
  if (!json.is_object()) return bad("the manifest must be a JSON object");
  if (!json.contains("format") || json["format"] != kManifestFormat) {
    return bad(fmt::format("\"format\" must be \"{}\"", kManifestFormat));
  }
  Manifest m;
  if (json["model"].is_string()) m.model = json["model"].get<std::string>();
  if (json["revision"].is_string()) m.revision = json["revision"].get<std::string>();
  if (!json["files"].is_array()) return bad("\"files\" must be an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < json["files"].size(); ++i) {
    util::Json& f = json["files"][i];
    if (!f.is_object() || !f["path"].is_string() || !f["size"].is_number_integer() ||
        !f["sha256"].is_string()) {
      return bad(
          fmt::format("files[{}] needs a string path, an integer size and a string sha256", i));
    }
    ManifestFile file;
    file.path = f["path"].get<std::string>();
    if (!util::IsSafeRelativePath(file.path)) {
      return bad(fmt::format("files[{}]: path '{}' is not a plain relative path", i, file.path));
    }
    if (f["size"].is_number_unsigned()) {
      file.size_bytes = f["size"].get<uint64_t>();
    } else {
      int64_t size = f["size"].get<int64_t>();
      if (size < 0) return bad(fmt::format("files[{}]: negative size", i));
      file.size_bytes = static_cast<uint64_t>(size);
    }
    file.sha256 = f["sha256"].get<std::string>();
    if (!IsHexDigest(file.sha256)) {
      return bad(fmt::format("files[{}]: sha256 must be 64 lower-case hex digits", i));
    }
    if (!seen.insert(file.path).second) {
      return bad(fmt::format("files[{}]: duplicate path '{}'", i, file.path));
    }
    m.files.push_back(std::move(file));
  }
  std::sort(m.files.begin(), m.files.end(),
            [](const ManifestFile& a, const ManifestFile& b) { return a.path < b.path; });
  return m;
}

std::string ManifestJson(const Manifest& manifest) {
  util::Json files = util::Json::array();
  for (const ManifestFile& f : manifest.files) {
    files.push_back(util::Json{{"path", f.path}, {"size", f.size_bytes}, {"sha256", f.sha256}});
  }
  util::Json out = util::Json{{"format", kManifestFormat},
                              {"model", manifest.model},
                              {"revision", manifest.revision},
                              {"files", std::move(files)}};
  // One file per line keeps manifests reviewable in diffs.
  std::string text = "{\"format\": " + util::DumpJson(out["format"]) +
                     ", \"model\": " + util::DumpJson(out["model"]) +
                     ", \"revision\": " + util::DumpJson(out["revision"]) + ",\n \"files\": [";
  for (size_t i = 0; i < out["files"].size(); ++i) {
    text += (i == 0 ? "\n  " : ",\n  ") + util::DumpJson(out["files"][i]);
  }
  text += "\n ]}\n";
  return text;
}

absl::StatusOr<std::string> Sha256File(const std::string& path, std::atomic<uint64_t>* bytes_done) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return NotFoundError(util::codes::kFileNotFound, path + ": no such file");
    return InternalError(util::codes::kIoError, fmt::format("{}: {}", path, std::strerror(err)));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    ::close(fd);
    return InternalError(util::codes::kIoError, "OpenSSL SHA-256 is unavailable");
  }
  std::unique_ptr<unsigned char[]> buffer(new unsigned char[kReadChunkBytes]);
  for (;;) {
    ssize_t n = ::read(fd, buffer.get(), kReadChunkBytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return InternalError(util::codes::kIoError,
                           fmt::format("{}: read: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buffer.get(), static_cast<size_t>(n));
    if (bytes_done != nullptr) bytes_done->fetch_add(static_cast<uint64_t>(n));
  }
  ::close(fd);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

absl::StatusOr<std::vector<std::string>> ListModelFiles(const std::string& root,
                                                        const std::vector<std::string>& excludes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return NotFoundError(util::codes::kRootNotFound, root + ": not a directory");
  }
  std::vector<std::string> out;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return InternalError(util::codes::kIoError, fmt::format("{}: {}", root, ec.message()));
  const fs::path base(root);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return InternalError(util::codes::kIoError, fmt::format("{}: {}", root, ec.message()));
    std::string rel = it->path().lexically_relative(base).generic_string();
    if (Excluded(rel, excludes)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) it.disable_recursion_pending();
      continue;
    }
    // status() follows links: a link to a file counts as that file; links to folders are not
    // followed (recursion) and do not count.
    if (it->is_regular_file(ec)) out.push_back(rel);
  }
  if (ec) return InternalError(util::codes::kIoError, fmt::format("{}: {}", root, ec.message()));
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<VerifyReport> VerifyModel(const std::string& root, const Manifest& manifest,
                                         const VerifyOptions& options) {
  const auto start = Clock::now();
  DI_ASSIGN_OR_RETURN(std::vector<std::string> present, ListModelFiles(root, options.excludes));
  VerifyReport report;
  report.full = options.full;
  report.num_files = static_cast<int64_t>(manifest.files.size());
  std::set<std::string> listed;
  std::vector<size_t> to_hash;
  for (size_t i = 0; i < manifest.files.size(); ++i) {
    const ManifestFile& f = manifest.files[i];
    listed.insert(f.path);
    report.total_bytes += f.size_bytes;
    std::string path = util::JoinPath(root, f.path);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      report.findings.push_back({FindingKind::kMissing, f.path, std::to_string(f.size_bytes), ""});
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) != f.size_bytes) {
      report.findings.push_back({FindingKind::kSizeMismatch, f.path, std::to_string(f.size_bytes),
                                 std::to_string(st.st_size)});
      continue;
    }
    if (options.full) {
      to_hash.push_back(i);
    } else if (::access(path.c_str(), R_OK) != 0) {
      report.findings.push_back({FindingKind::kUnreadable, f.path, "", std::strerror(errno)});
    }
  }
  for (const std::string& rel : present) {
    if (!listed.count(rel)) report.findings.push_back({FindingKind::kExtra, rel, "", "present"});
  }

  if (!to_hash.empty()) {
    // Largest first, so that one big shard does not start last and leave the other threads idle.
    std::sort(to_hash.begin(), to_hash.end(), [&](size_t a, size_t b) {
      return manifest.files[a].size_bytes > manifest.files[b].size_bytes;
    });
    uint64_t hash_total = 0;
    for (size_t i : to_hash) hash_total += manifest.files[i].size_bytes;
    std::atomic<uint64_t> done{0};
    std::vector<absl::StatusOr<std::string>> digests(to_hash.size(), std::string());
    ParallelRun(
        to_hash.size(), ResolveThreads(options.num_threads),
        [&](size_t k) {
          digests[k] = Sha256File(util::JoinPath(root, manifest.files[to_hash[k]].path), &done);
        },
        [&] {
          if (options.progress) options.progress(done.load(), hash_total);
        });
    report.hashed_bytes = done.load();
    for (size_t k = 0; k < to_hash.size(); ++k) {
      const ManifestFile& f = manifest.files[to_hash[k]];
      if (!digests[k].ok()) {
        report.findings.push_back({FindingKind::kUnreadable, f.path, f.sha256,
                                   std::string(digests[k].status().message())});
      } else if (*digests[k] != f.sha256) {
        report.findings.push_back({FindingKind::kHashMismatch, f.path, f.sha256, *digests[k]});
      }
    }
  }
  std::sort(report.findings.begin(), report.findings.end(),
            [](const Finding& a, const Finding& b) { return a.path < b.path; });
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

absl::StatusOr<Manifest> BuildManifest(const std::string& root, const std::string& model,
                                       const std::string& revision, const VerifyOptions& options) {
  DI_ASSIGN_OR_RETURN(std::vector<std::string> files, ListModelFiles(root, options.excludes));
  Manifest m;
  m.model = model;
  m.revision = revision;
  uint64_t total = 0;
  for (const std::string& rel : files) {
    struct stat st;
    if (::stat(util::JoinPath(root, rel).c_str(), &st) != 0) {
      return InternalError(util::codes::kIoError, fmt::format("{}: {}", rel, std::strerror(errno)));
    }
    m.files.push_back({rel, static_cast<uint64_t>(st.st_size), ""});
    total += static_cast<uint64_t>(st.st_size);
  }
  std::atomic<uint64_t> done{0};
  std::vector<absl::Status> errors(files.size());
  std::vector<size_t> order(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return m.files[a].size_bytes > m.files[b].size_bytes; });
  ParallelRun(
      order.size(), ResolveThreads(options.num_threads),
      [&](size_t k) {
        size_t i = order[k];
        auto digest = Sha256File(util::JoinPath(root, m.files[i].path), &done);
        if (digest.ok()) {
          m.files[i].sha256 = *digest;
        } else {
          errors[i] = digest.status();
        }
      },
      [&] {
        if (options.progress) options.progress(done.load(), total);
      });
  for (const absl::Status& s : errors) DI_RETURN_IF_ERROR(s);
  // A file that changed size while it was hashed cannot describe a trusted copy.
  for (const ManifestFile& f : m.files) {
    struct stat st;
    if (::stat(util::JoinPath(root, f.path).c_str(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != f.size_bytes) {
      return InternalError(util::codes::kIoError, f.path + ": changed while it was hashed");
    }
  }
  return m;
}

std::string FormatVerifyReport(const VerifyReport& report) {
  std::string out;
  if (!report.findings.empty()) {
    out += fmt::format("{:<14} {:<40} {}\n", "finding", "path", "expected -> actual");
    for (const Finding& f : report.findings) {
      std::string detail;
      switch (f.kind) {
        case FindingKind::kMissing:
          detail = fmt::format("{} bytes -> absent", f.expected);
          break;
        case FindingKind::kExtra:
          detail = "not in the manifest";
          break;
        case FindingKind::kSizeMismatch:
          detail = fmt::format("{} bytes -> {} bytes", f.expected, f.actual);
          break;
        case FindingKind::kHashMismatch:
          detail = fmt::format("{}... -> {}...", f.expected.substr(0, 16), f.actual.substr(0, 16));
          break;
        case FindingKind::kUnreadable:
          detail = f.actual;
          break;
      }
      out += fmt::format("{:<14} {:<40} {}\n", FindingKindName(f.kind), f.path, detail);
    }
  }
  std::string what = report.full ? "sizes and sha256 of every byte" : "presence and sizes only";
  double rate = report.seconds > 0 ? report.hashed_bytes / report.seconds : 0;
  std::string speed = report.full ? fmt::format(", {}/s", HumanBytes(rate)) : std::string();
  if (report.ok()) {
    out += fmt::format("OK: {} files, {} match the manifest ({}) in {:.1f} s{}\n", report.num_files,
                       HumanBytes(static_cast<double>(report.total_bytes)), what, report.seconds,
                       speed);
  } else {
    std::map<std::string, int> counts;
    for (const Finding& f : report.findings) ++counts[FindingKindName(f.kind)];
    std::vector<std::string> parts;
    for (const auto& [kind, n] : counts) parts.push_back(fmt::format("{} {}", n, kind));
    out += fmt::format("FAIL: {} ({} files in the manifest; {})\n", fmt::join(parts, ", "),
                       report.num_files, what);
  }
  return out;
}

std::string VerifyReportJson(const VerifyReport& report) {
  util::Json findings = util::Json::array();
  for (const Finding& f : report.findings) {
    findings.push_back(util::Json{{"kind", FindingKindName(f.kind)},
                                  {"path", f.path},
                                  {"expected", f.expected},
                                  {"actual", f.actual}});
  }
  util::Json out = util::Json{{"ok", report.ok()},
                              {"full", report.full},
                              {"num_files", report.num_files},
                              {"total_bytes", report.total_bytes},
                              {"hashed_bytes", report.hashed_bytes},
                              {"seconds", report.seconds},
                              {"findings", std::move(findings)}};
  return util::DumpJson(out) + "\n";
}

}  // namespace deepinfer::tools
