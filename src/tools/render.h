#pragma once

// `deepinfer render`: a pinned recipe plus one machine's host file become a reviewed bash launch
// script. The script runs read-only preflight checks and refuses to start on any failure or
// unknown answer, then starts `deepinfer serve` bound to loopback, as a plain process, as a
// docker container, or (the host file's `expert_parallel` section) as an mpirun group of
// `deepinfer serve --expert-parallel` ranks over several hosts. The renderer itself never starts
// or stops anything.

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
  int32_t data_parallel_size = 1;  // serve --data-parallel-size
  bool prefix_caching = true;      // false: serve --no-prefix-caching
};

// Where devices are probed and what counts as idle.
struct DeviceSpec {
  std::string kind;                 // "cpu" or "nvidia"; anything else fails preflight
  std::vector<int32_t> ids;         // nvidia: GPU indices
  double max_load = 0.5;            // cpu: highest 1-minute load average that counts as idle
  int32_t max_utilization_pct = 5;  // nvidia: per GPU
  int32_t max_memory_used_mib = 1024;
};

// One host of an expert-parallel group. File format: deploy/host.ep.example.json.
struct EpHost {
  std::string name;     // label in preflight lines: [A-Za-z0-9][A-Za-z0-9_.-]{0,62}
  std::string address;  // what mpirun and ssh reach: a host name or an IP address
  int32_t slots = 1;    // ranks on this host
  int32_t threads = -1;      // serve --threads of its ranks; -1: the recipe's
  std::string model_dir;     // absolute; empty: the host file's paths.model (same checkpoint)
  std::string runtime_dir;   // absolute; empty: the host file's paths.runtime
};

// `mpirun ... deepinfer serve --expert-parallel`: the group's hosts and MPI transport.
struct ExpertParallelSpec {
  // Empty: no expert parallelism. hosts[0] is this machine: it runs rank 0, which serves HTTP;
  // the others are reached over ssh (mpirun's launcher and the preflight alike).
  std::vector<EpHost> hosts;
  std::string transport = "auto";  // auto (OpenMPI picks), tcp (ob1 + btl tcp), ucx (pml ucx)
  std::string network;      // interface or CIDR for btl_tcp_if_include and oob_tcp_if_include
  std::string ucx_devices;  // ucx: UCX_NET_DEVICES, e.g. "mlx5_0:1"
  int32_t ssh_timeout_s = 5;  // preflight's ssh ConnectTimeout

  int32_t NumRanks() const;
};

// Prefill/decode disaggregation: serve --pd-role with its shared folder.
struct PdSpec {
  std::string role;            // empty (combined), "prefill" or "decode"
  std::string checkpoint_dir;  // --pd-checkpoint-dir: the folder both sides share (absolute)
  std::string prefill_url;     // decode: --pd-prefill-url, http://host:port
  std::string api_key_file;    // holds DEEPINFER_PD_API_KEY; read by the script at start only
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
  std::string prefix_checkpoint_dir;  // optional: serve --prefix-checkpoint-dir (absolute)
  PdSpec pd;
  ExpertParallelSpec expert_parallel;
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

// Whether the recipe, host file and launcher make a deployment serve accepts.
// Errors: InvalidArgument "bad_recipe" (docker launcher without an image, checkpoint or
//   expert-parallel settings of the recipe with nothing in the host file to apply them to) or
//   "bad_host" (combinations serve refuses: expert parallelism with P/D roles, prefix
//   checkpoints, data_parallel_size > 1 or the docker launcher; P/D with prefix checkpoints or
//   without the prefix cache).
absl::Status CheckDeployment(const Recipe& recipe, const HostConfig& host, Launcher launcher);

// Returns the script text. Every value from the inputs appears single-quoted.
// Errors: those of CheckDeployment.
absl::StatusOr<std::string> RenderLaunchScript(const Recipe& recipe, const HostConfig& host,
                                               Launcher launcher,
                                               const RenderProvenance& provenance);

// The `deepinfer watch` binding of a rendered instance:
// {"format": "deepinfer-instance/1", "name", "script", "script_sha256", "binary",
//  "binary_sha256", "port", "artifacts", "launcher", "device_kind"}.
std::string InstanceJson(const Recipe& recipe, const HostConfig& host, Launcher launcher,
                         const std::string& script_path, const std::string& script_sha256);

// The names of the preflight checks, in the order the script runs them.
std::vector<std::string> PreflightCheckNames(const HostConfig& host, Launcher launcher);

// The arguments of `mpirun` for an expert-parallel host (shell words, each value quoted): one
// app context `--host a:N,b:M -np N+M <binary> serve ...` when every host runs the same
// command, else mpirun's MPMD form, one `-np N --host a:N <binary> serve ... :` per host.
// `serve_args` are the quoted serve arguments without --model and --threads; `model_arg` is
// the model path relative to the model folder ("" for the folder itself).
std::vector<std::string> MpirunArgs(const Recipe& recipe, const HostConfig& host,
                                    const std::vector<std::string>& serve_args,
                                    const std::string& model_arg);

// Single-quotes `value` for bash ('it'\''s').
std::string ShellQuote(const std::string& value);

// The absolute binary path of a host: <runtime>/bin/deepinfer.
std::string BinaryPath(const HostConfig& host);

}  // namespace deepinfer::tools
