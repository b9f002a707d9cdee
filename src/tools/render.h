#pragma once

// `deepinfer render`: a pinned recipe plus one machine's host file become a reviewed bash launch
// script. The script runs read-only preflight checks and refuses to start on any failure or
// unknown answer, then starts `deepinfer serve` bound to loopback, as a plain process or as a
// docker container. The renderer itself never starts or stops anything.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tools {

// The pinned part, shared by every machine that runs this deployment.
// File format: deploy/recipe.example.json.
struct Recipe {
  std::string name;
  std::string architecture;  // `uname -m`: "x86_64", "aarch64"
  std::string model_id;
  std::string model_revision;
  std::string model_file;         // relative to the host's model folder; "." for the folder itself
  std::string tokenizer_file;     // relative to the model folder; empty: serve's default
  std::string deepinfer_version;  // `deepinfer --version` prints "deepinfer <version>"
  std::string binary_sha256;
  std::string docker_image;  // for --launcher docker (a digest-pinned reference)
  // `deepinfer serve` flags in a fixed order, e.g. {"--max-model-len", "2048"}; a flag without
  // a value has an empty second.
  std::vector<std::pair<std::string, std::string>> serve_flags;
  int32_t threads = 0;  // serve --threads (0: all cores); the CPU probe needs this many cores
};

// Where devices are probed and what counts as idle.
struct DeviceSpec {
  std::string kind;                 // "cpu" or "nvidia"; anything else fails preflight
  std::vector<int32_t> ids;         // nvidia: GPU indices
  double max_load = 0.5;            // cpu: highest 1-minute load average that counts as idle
  int32_t max_utilization_pct = 5;  // nvidia: per GPU
  int32_t max_memory_used_mib = 1024;
};

// The private part of one machine. File format: deploy/host.example.json.
struct HostConfig {
  std::string instance;  // [A-Za-z0-9][A-Za-z0-9_.-]{0,62}
  int32_t port = 0;
  std::string model_dir;      // absolute paths
  std::string runtime_dir;    // holds bin/deepinfer
  std::string artifacts_dir;  // logs, pid file, last exit status
  std::string warmup_file;    // optional: request bodies (JSON lines or one object) that the
                              // rendered script passes as `serve --warmup-file`
  DeviceSpec devices;
};

enum class Launcher { kPlain, kDocker };

// Errors: InvalidArgument "bad_recipe" / "bad_host" naming the field (unknown fields, unknown
//   serve parameters, wrong types, unsafe paths, bad digests, ports or names).
absl::StatusOr<Recipe> ParseRecipe(std::string_view json);
absl::StatusOr<HostConfig> ParseHost(std::string_view json);

// Where the rendered script came from; goes into its header comment.
struct RenderProvenance {
  std::string renderer_version;
  std::string recipe_path;
  std::string recipe_sha256;
  std::string host_path;
  std::string host_sha256;
};

// Returns the script text. Every value from the inputs appears single-quoted.
// Errors: InvalidArgument "bad_recipe" when the docker launcher has no image.
absl::StatusOr<std::string> RenderLaunchScript(const Recipe& recipe, const HostConfig& host,
                                               Launcher launcher,
                                               const RenderProvenance& provenance);

// The `deepinfer watch` binding of a rendered instance:
// {"format": "deepinfer-instance/1", "name", "script", "script_sha256", "binary",
//  "binary_sha256", "port", "artifacts", "launcher", "device_kind"}.
std::string InstanceJson(const Recipe& recipe, const HostConfig& host, Launcher launcher,
                         const std::string& script_path, const std::string& script_sha256);

// The names of the preflight checks, in the order the script runs them.
std::vector<std::string> PreflightCheckNames(Launcher launcher);

// Single-quotes `value` for bash ('it'\''s').
std::string ShellQuote(const std::string& value);

// The absolute binary path of a host: <runtime>/bin/deepinfer.
std::string BinaryPath(const HostConfig& host);

}  // namespace deepinfer::tools
