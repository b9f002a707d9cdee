// `deepinfer render`: flag parsing and file handling; the script text lives in tools/render.h.

#include "tools/render.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "fmt/format.h"
#include "tools/verify_model.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

struct RenderFlags {
  std::string recipe;
  std::string host;
  std::string output;
  std::string launcher = "plain";
  std::string instance_file;
  bool json = false;
};

int Fail(const absl::Status& status) { return ReportFailure("render", status); }

std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char* cwd = ::getcwd(nullptr, 0);
  std::string out = cwd != nullptr ? std::string(cwd) + "/" + path : path;
  std::free(cwd);
  return out;
}

int Run(const RenderFlags& f) {
  auto recipe_text = util::ReadFile(f.recipe);
  if (!recipe_text.ok()) return Fail(recipe_text.status());
  auto host_text = util::ReadFile(f.host);
  if (!host_text.ok()) return Fail(host_text.status());
  auto recipe = tools::ParseRecipe(*recipe_text);
  if (!recipe.ok()) return Fail(recipe.status());
  auto host = tools::ParseHost(*host_text);
  if (!host.ok()) return Fail(host.status());
  tools::Launcher launcher =
      f.launcher == "docker" ? tools::Launcher::kDocker : tools::Launcher::kPlain;

  // Refuse before rendering anything: the output and the binding are never overwritten.
  struct stat st;
  for (const std::string* path : {&f.output, &f.instance_file}) {
    if (!path->empty() && ::lstat(path->c_str(), &st) == 0) {
      return Fail(MakeError(absl::StatusCode::kAlreadyExists, util::codes::kFileExists,
                            fmt::format("{} exists; refusing to overwrite it", *path)));
    }
  }
  tools::RenderProvenance provenance;
  provenance.renderer_version = DEEPINFER_VERSION;
  provenance.recipe_path = Absolute(f.recipe);
  provenance.recipe_sha256 = tools::Sha256Hex(*recipe_text);
  provenance.host_path = Absolute(f.host);
  provenance.host_sha256 = tools::Sha256Hex(*host_text);
  auto script = tools::RenderLaunchScript(*recipe, *host, launcher, provenance);
  if (!script.ok()) return Fail(script.status());
  absl::Status written = util::WriteFileAtomically(f.output, *script, /*overwrite=*/false);
  if (!written.ok()) return Fail(written);
  ::chmod(f.output.c_str(), 0755);
  const std::string script_sha = tools::Sha256Hex(*script);
  const std::string script_path = Absolute(f.output);
  if (!f.instance_file.empty()) {
    written = util::WriteFileAtomically(
        f.instance_file, tools::InstanceJson(*recipe, *host, launcher, script_path, script_sha),
        /*overwrite=*/false);
    if (!written.ok()) return Fail(written);
  }

  std::vector<std::string> checks = tools::PreflightCheckNames(*host, launcher);
  if (f.json) {
    util::Json out = util::Json{
        {"output", script_path},
        {"sha256", script_sha},
        {"instance", host->instance},
        {"instance_file",
         f.instance_file.empty() ? util::Json(nullptr) : util::Json(Absolute(f.instance_file))},
        {"launcher", f.launcher},
        {"port", host->port},
        {"model", recipe->model_id},
        {"revision", recipe->model_revision},
        {"preflight_checks", checks},
        {"expert_parallel_ranks", host->expert_parallel.NumRanks()},
        {"pd_role", host->pd.role.empty() ? util::Json(nullptr) : util::Json(host->pd.role)}};
    std::printf("%s\n", util::DumpJson(out).c_str());
    return 0;
  }
  std::string serve;
  for (const auto& [flag, value] : recipe->serve_flags) {
    serve += " " + flag + (value.empty() ? "" : " " + value);
  }
  std::printf("%-16s %s\n", "script", script_path.c_str());
  std::printf("%-16s %s\n", "sha256", script_sha.c_str());
  if (!f.instance_file.empty()) {
    std::printf("%-16s %s\n", "watch binding", Absolute(f.instance_file).c_str());
  }
  std::printf("%-16s %s (%s)\n", "instance", host->instance.c_str(), f.launcher.c_str());
  std::printf("%-16s %s @ %s\n", "model", recipe->model_id.c_str(), recipe->model_revision.c_str());
  std::printf("%-16s 127.0.0.1:%d\n", "listens on", host->port);
  if (!host->expert_parallel.hosts.empty()) {
    std::string hosts;
    for (const tools::EpHost& h : host->expert_parallel.hosts) {
      hosts += fmt::format(" {}:{}", h.address, h.slots);
    }
    std::printf("%-16s %d ranks over mpirun:%s (rank 0 here)\n", "expert parallel",
                host->expert_parallel.NumRanks(), hosts.c_str());
  }
  if (!host->pd.role.empty()) {
    std::printf("%-16s %s, shared folder %s\n", "P/D role", host->pd.role.c_str(),
                host->pd.checkpoint_dir.c_str());
  }
  std::printf("%-16s%s\n", "serve flags", serve.c_str());
  std::printf("%-16s %s\n", "preflight", fmt::format("{}", fmt::join(checks, ", ")).c_str());
  // A bare file name would be looked up in PATH, not here.
  std::string run = f.output.find('/') == std::string::npos ? "./" + f.output : f.output;
  std::printf("review it, then run: %s (or `%s preflight` to check only)\n", run.c_str(),
              run.c_str());
  return 0;
}

}  // namespace

void RegisterRender(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<RenderFlags>();
  CLI::App* cmd = app.add_subcommand(
      "render",
      "Render a recipe and a host file into a launch script with read-only preflight checks. "
      "Starts nothing; never overwrites.");
  cmd->add_option("--recipe", flags->recipe, "pinned recipe (JSON, see deploy/)")->required();
  cmd->add_option("--host", flags->host, "this machine's host file (JSON, see deploy/)")
      ->required();
  cmd->add_option("--output", flags->output, "script to write; must not exist")->required();
  cmd->add_option("--launcher", flags->launcher, "plain process or docker container")
      ->check(CLI::IsMember({"plain", "docker"}))
      ->capture_default_str();
  cmd->add_option("--instance-file", flags->instance_file,
                  "also write the deepinfer watch binding here (must not exist)");
  cmd->add_flag("--json", flags->json, "print the summary as JSON");
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
