// `deepinfer verify-model`: flag parsing and the progress bar; the work lives in
// tools/verify_model.h.

#include "tools/verify_model.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "fmt/format.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct VerifyFlags {
  std::string root;
  std::string manifest;
  std::string write_manifest;
  std::string model_id;
  std::string revision;
  bool full = false;
  int threads = 0;
  std::vector<std::string> excludes;
  bool json = false;
  bool progress = false;
  bool no_progress = false;
};

// "[########------------]  40.0%  1.2 GiB / 3.0 GiB  950.3 MiB/s  ETA 0:02"
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), start_(Clock::now()) {}
  void Update(uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    double rate = seconds > 0 ? done / seconds : 0;
    double fraction = static_cast<double>(done) / static_cast<double>(total);
    int filled = static_cast<int>(fraction * 24);
    std::string bar(filled, '#');
    bar.resize(24, '-');
    std::string eta = "--:--";
    if (rate > 0) {
      int64_t left = static_cast<int64_t>((total - done) / rate);
      eta = fmt::format("{}:{:02d}", left / 60, left % 60);
    }
    std::fprintf(stderr, "\r[%s] %5.1f%%  %s / %s  %s/s  ETA %s   ", bar.c_str(), fraction * 100,
                 tools::HumanBytes(done).c_str(), tools::HumanBytes(total).c_str(),
                 tools::HumanBytes(rate).c_str(), eta.c_str());
    drawn_ = true;
  }
  void Finish() {
    if (drawn_) std::fputs("\n", stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
};

int Run(const VerifyFlags& f) {
  bool show = f.progress || (!f.no_progress && !f.json && ::isatty(2));
  ProgressBar bar(show);
  tools::VerifyOptions options;
  options.full = f.full;
  options.num_threads = f.threads;
  options.excludes = f.excludes;
  options.progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };

  if (!f.write_manifest.empty()) {
    auto manifest = tools::BuildManifest(f.root, f.model_id, f.revision, options);
    bar.Finish();
    if (!manifest.ok()) {
      return ReportFailure("verify-model", manifest.status());
    }
    absl::Status written = util::WriteFileAtomically(
        f.write_manifest, tools::ManifestJson(*manifest), /*overwrite=*/false);
    if (!written.ok()) {
      return ReportFailure("verify-model", written);
    }
    uint64_t total = 0;
    for (const auto& file : manifest->files) total += file.size_bytes;
    std::printf("wrote %s: %zu files, %s\n", f.write_manifest.c_str(), manifest->files.size(),
                tools::HumanBytes(static_cast<double>(total)).c_str());
    return 0;
  }

  if (f.manifest.empty()) {
    std::fprintf(stderr,
                 "deepinfer verify-model: bad_flags: give --manifest or --write-manifest\n");
    return kExitBadInput;
  }
  auto text = util::ReadFile(f.manifest);
  if (!text.ok()) {
    return ReportFailure("verify-model", text.status());
  }
  auto manifest = tools::ParseManifest(*text);
  if (!manifest.ok()) {
    return ReportFailure("verify-model", manifest.status());
  }
  // A manifest kept inside the model folder is not an extra file.
  char* root_real = ::realpath(f.root.c_str(), nullptr);
  char* manifest_real = ::realpath(f.manifest.c_str(), nullptr);
  if (root_real != nullptr && manifest_real != nullptr) {
    std::string r = std::string(root_real) + "/";
    std::string m = manifest_real;
    if (m.rfind(r, 0) == 0) options.excludes.push_back(m.substr(r.size()));
  }
  std::free(root_real);
  std::free(manifest_real);
  auto report = tools::VerifyModel(f.root, *manifest, options);
  bar.Finish();
  if (!report.ok()) {
    return ReportFailure("verify-model", report.status());
  }
  std::string out = f.json ? tools::VerifyReportJson(*report) : tools::FormatVerifyReport(*report);
  std::fputs(out.c_str(), stdout);
  return report->ok() ? 0 : 1;
}

}  // namespace

void RegisterVerifyModel(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "verify-model",
      "Check a model folder against its manifest (presence and sizes; --full: sha256 of every "
      "byte). Exit 0 only when everything matches.");
  cmd->add_option("--root", flags->root, "the model folder")->required();
  cmd->add_option("--manifest", flags->manifest, "manifest of the model revision (JSON)");
  cmd->add_option("--write-manifest", flags->write_manifest,
                  "hash a trusted copy under --root into a new manifest (never overwrites)");
  cmd->add_option("--model-id", flags->model_id, "model id recorded by --write-manifest");
  cmd->add_option("--revision", flags->revision, "revision recorded by --write-manifest");
  cmd->add_flag("--full", flags->full, "hash every byte (parallel, one thread per file)");
  cmd->add_option("--threads", flags->threads, "hashing threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--exclude", flags->excludes,
                  "shell pattern of paths to ignore (repeatable), e.g. '.cache/*'");
  cmd->add_flag("--json", flags->json, "print the report as JSON");
  cmd->add_flag("--progress", flags->progress, "draw the progress bar even when not a terminal");
  cmd->add_flag("--no-progress", flags->no_progress, "never draw the progress bar");
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
