// The bash text of rendered launch scripts. The body is fixed; only the readonly settings block
// at the top comes from the recipe and host file, every value single-quoted, so a reviewer reads
// one block of values and one unchanging program.
//
// The preflight is read-only: it reads /proc, runs uname, nproc, nvidia-smi queries, sha256sum,
// find and (docker) `docker ps` / `docker image inspect`; it writes nothing and never pulls.
// Each check prints one line; any failure or unknown answer fails the run before anything starts.

#include <string>
#include <vector>

#include "fmt/format.h"
#include "tools/render.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

constexpr char kBody[] = R"BASH(
failures=0
report() { printf '%-5s %-13s %s\n' "$1" "$2" "$3"; }
pass() { report ok "$1" "$2"; }
fail() {
  report FAIL "$1" "$2"
  failures=$((failures + 1))
}

check_architecture() {
  local arch
  if ! arch=$(uname -m 2>/dev/null) || [[ -z "$arch" ]]; then
    fail architecture "uname -m gave no answer"
  elif [[ "$arch" != "$ARCHITECTURE" ]]; then
    fail architecture "this machine is $arch; the recipe pins $ARCHITECTURE"
  else
    pass architecture "$arch"
  fi
}

probe_cpu() {
  local cores load rest
  if ! cores=$(nproc 2>/dev/null) || ! [[ "$cores" =~ ^[0-9]+$ ]] || ((cores < 1)); then
    fail devices "cpu: nproc gave no core count (state unknown)"
    return
  fi
  if ((CPU_THREADS > cores)); then
    fail devices "cpu: the recipe wants $CPU_THREADS threads; $cores cores are visible"
    return
  fi
  if ! read -r load rest 2>/dev/null </proc/loadavg || ! [[ "$load" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    fail devices "cpu: /proc/loadavg gave no load average (state unknown)"
    return
  fi
  : "$rest"
  if ! awk -v l="$load" -v m="$MAX_LOAD" 'BEGIN { exit !(l + 0 <= m + 0) }'; then
    fail devices "cpu: busy: the 1-minute load average $load is above $MAX_LOAD"
    return
  fi
  pass devices "cpu: $cores cores visible, load average $load <= $MAX_LOAD"
}

probe_nvidia() {
  local smi gpus apps id idx uuid util mem found
  local -a problems=()
  if ! smi=$(command -v nvidia-smi); then
    fail devices "nvidia: nvidia-smi not found (GPU state unknown)"
    return
  fi
  if ! gpus=$("$smi" --query-gpu=index,uuid,utilization.gpu,memory.used \
    --format=csv,noheader,nounits 2>&1); then
    fail devices "nvidia: nvidia-smi failed: ${gpus//$'\n'/ }"
    return
  fi
  if ! apps=$("$smi" --query-compute-apps=gpu_uuid,pid --format=csv,noheader 2>&1); then
    fail devices "nvidia: nvidia-smi --query-compute-apps failed: ${apps//$'\n'/ }"
    return
  fi
  for id in "${GPU_IDS[@]}"; do
    found=0
    while IFS=', ' read -r idx uuid util mem; do
      [[ "$idx" == "$id" ]] || continue
      found=1
      if ! [[ "$uuid" == GPU-* && "$util" =~ ^[0-9]+$ && "$mem" =~ ^[0-9]+$ ]]; then
        problems+=("GPU $id unhealthy or unknown (utilization '$util', memory '$mem')")
      elif ((util > MAX_GPU_UTILIZATION_PCT)); then
        problems+=("GPU $id busy (utilization ${util}%)")
      elif ((mem > MAX_GPU_MEMORY_USED_MIB)); then
        problems+=("GPU $id busy (${mem} MiB in use)")
      elif grep -qF -- "$uuid" <<<"$apps"; then
        problems+=("GPU $id busy (compute processes running)")
      fi
    done <<<"$gpus"
    if ((found == 0)); then
      problems+=("GPU $id not visible")
    fi
  done
  if ((${#problems[@]} > 0)); then
    local IFS=';'
    fail devices "nvidia: ${problems[*]}"
    return
  fi
  pass devices "nvidia: GPUs ${GPU_IDS[*]} visible, healthy and idle"
}

check_devices() {
  case "$DEVICE_KIND" in
    cpu) probe_cpu ;;
    nvidia) probe_nvidia ;;
    *) fail devices "unknown device kind '$DEVICE_KIND' (known: cpu, nvidia)" ;;
  esac
}

check_paths() {
  local -a missing=()
  [[ -d "$MODEL_DIR" ]] || missing+=("model folder $MODEL_DIR")
  [[ -e "$MODEL_PATH" ]] || missing+=("model $MODEL_PATH")
  [[ -z "$TOKENIZER_PATH" || -f "$TOKENIZER_PATH" ]] || missing+=("tokenizer $TOKENIZER_PATH")
  [[ -d "$RUNTIME_DIR" ]] || missing+=("runtime folder $RUNTIME_DIR")
  [[ -f "$BINARY" && -x "$BINARY" ]] || missing+=("executable $BINARY")
  [[ -d "$ARTIFACTS_DIR" ]] || missing+=("artifacts folder $ARTIFACTS_DIR")
  if [[ -n "$WARMUP_FILE" ]]; then
    [[ -f "$WARMUP_FILE" ]] || missing+=("warmup file $WARMUP_FILE")
  fi
  if ((${#missing[@]} > 0)); then
    local IFS=';'
    fail paths "missing: ${missing[*]}"
  else
    pass paths "model, runtime, binary and artifacts present"
  fi
}

real_dir() { (cd -P -- "$1" 2>/dev/null && pwd -P); }

check_nesting() {
  local m r a i j
  if ! m=$(real_dir "$MODEL_DIR") || ! r=$(real_dir "$RUNTIME_DIR") ||
    ! a=$(real_dir "$ARTIFACTS_DIR"); then
    fail nesting "cannot resolve the model, runtime and artifacts folders"
    return
  fi
  local -a names=(model runtime artifacts)
  local -a dirs=("$m" "$r" "$a")
  for i in 0 1 2; do
    for j in 0 1 2; do
      ((i != j)) || continue
      if [[ "${dirs[i]%/}/" == "${dirs[j]%/}/"* ]]; then
        fail nesting "the ${names[i]} folder ${dirs[i]} lies in the ${names[j]} folder ${dirs[j]}"
        return
      fi
    done
  done
  pass nesting "model, runtime and artifacts folders are apart"
}

check_model_access() {
  local unreadable
  if [[ ! -r "$MODEL_PATH" ]]; then
    fail model_access "$MODEL_PATH is not readable"
    return
  fi
  if ! unreadable=$(find -L "$MODEL_DIR" ! -readable -print -quit 2>&1); then
    fail model_access "cannot list $MODEL_DIR: ${unreadable//$'\n'/ }"
    return
  fi
  if [[ -n "$unreadable" ]]; then
    fail model_access "not readable: $unreadable"
    return
  fi
  pass model_access "every file under $MODEL_DIR is readable"
}

check_artifacts() {
  if [[ -w "$ARTIFACTS_DIR" && -x "$ARTIFACTS_DIR" ]]; then
    pass artifacts "$ARTIFACTS_DIR is writable"
  else
    fail artifacts "$ARTIFACTS_DIR is not writable"
  fi
}

check_port() {
  local hex f
  local -a tables=()
  hex=$(printf '%04X' "$PORT")
  for f in /proc/net/tcp /proc/net/tcp6; do
    if [[ -r "$f" ]]; then tables+=("$f"); fi
  done
  if ((${#tables[@]} == 0)); then
    fail port "cannot read /proc/net/tcp (port state unknown)"
    return
  fi
  if awk -v p="$hex" 'FNR > 1 { n = split($2, a, ":"); if (a[n] == p && $4 == "0A") hit = 1 }
      END { exit !hit }' "${tables[@]}"; then
    fail port "port $PORT is in use (a socket listens on it)"
    return
  fi
  pass port "port $PORT is free"
}

check_instance() {
  local f argv0 names
  local -a users=()
  for f in /proc/[0-9]*/cmdline; do
    argv0=""
    IFS= read -r -d '' argv0 2>/dev/null <"$f" || true
    if [[ "$argv0" == "$PROCESS_NAME" ]]; then users+=("${f//[^0-9]/}"); fi
  done
  if ((${#users[@]} > 0)); then
    fail instance "instance $INSTANCE is running (pid ${users[*]})"
    return
  fi
  if [[ "$LAUNCHER" == docker ]]; then
    if ! names=$(docker ps --all --format '{{.Names}}' 2>&1); then
      fail instance "docker ps failed (container names unknown): ${names//$'\n'/ }"
      return
    fi
    if grep -qxF -- "$INSTANCE" <<<"$names"; then
      fail instance "a container named $INSTANCE exists"
      return
    fi
  fi
  pass instance "no process or container uses the name $INSTANCE"
}

check_binary() {
  local sum
  if ! sum=$(sha256sum -- "$BINARY" 2>/dev/null); then
    fail binary "cannot hash $BINARY"
    return
  fi
  sum=${sum%% *}
  if [[ "$sum" != "$BINARY_SHA256" ]]; then
    fail binary "sha256 of $BINARY is $sum; the recipe pins $BINARY_SHA256"
    return
  fi
  pass binary "sha256 matches the recipe (deepinfer $DEEPINFER_VERSION)"
}

check_docker_image() {
  if ! command -v docker >/dev/null 2>&1; then
    fail docker_image "docker not found"
    return
  fi
  if ! docker image inspect --format '{{.Id}}' "$DOCKER_IMAGE" >/dev/null 2>&1; then
    fail docker_image "$DOCKER_IMAGE is not present (pull it first; preflight never pulls)"
    return
  fi
  pass docker_image "$DOCKER_IMAGE present"
}

run_preflight() {
  failures=0
  echo "preflight of instance $INSTANCE (read-only)"
  check_architecture
  check_devices
  check_paths
  check_nesting
  check_model_access
  check_artifacts
  check_port
  check_instance
  check_binary
  if [[ "$LAUNCHER" == docker ]]; then check_docker_image; fi
  if ((failures > 0)); then
    echo "preflight: $failures check(s) failed; not starting"
    return 1
  fi
  echo "preflight: all checks passed"
}

write_atomically() {
  local tmp
  tmp=$(mktemp "$1.XXXXXX")
  printf '%s\n' "$2" >"$tmp"
  mv -f -- "$tmp" "$1"
}

child=0
stop_child() {
  if [[ "$LAUNCHER" == docker ]]; then
    docker stop --time 30 "$INSTANCE" >/dev/null 2>&1 || true
  elif ((child > 0)); then
    kill -TERM "$child" 2>/dev/null || true
  fi
}

# The exit is recorded for `deepinfer watch`: a clean exit or a stop signal means an operator
# stopped the instance; anything else is a crash.
record_exit() {
  local status=$1 signal="" reason=crashed
  if ((status > 128)); then
    signal=$(kill -l "$((status - 128))" 2>/dev/null) || signal=$((status - 128))
  fi
  case "$status/$signal" in
    0/ | */TERM | */INT | */HUP | */KILL | */QUIT) reason=stopped ;;
  esac
  # The exit record lands before the pid file goes, so a watcher that sees no pid file always
  # finds the record of the exit that removed it. Nanoseconds: a crash, a restart and a second
  # exit can fall within one second, and watch tells exits apart by their time.
  write_atomically "$ARTIFACTS_DIR/last-exit" "status=$status
signal=$signal
reason=$reason
time=$(date +%s.%N)"
  rm -f -- "$ARTIFACTS_DIR/serve.pid"
  echo "deepinfer serve exited with status $status${signal:+ (SIG$signal)}: $reason"
}

start_server() {
  cd "$ARTIFACTS_DIR"
  echo "starting deepinfer serve for $INSTANCE on 127.0.0.1:$PORT ($LAUNCHER)"
  if [[ "$LAUNCHER" == docker ]]; then
    docker run --name "$INSTANCE" --init --restart no --rm \
      --user "$(id -u):$(id -g)" \
      --publish "127.0.0.1:$PORT:$PORT" \
      --mount "type=bind,src=$MODEL_DIR,dst=/model,readonly" \
      --mount "type=bind,src=$RUNTIME_DIR,dst=/runtime,readonly" \
      --mount "type=bind,src=$ARTIFACTS_DIR,dst=/artifacts" "${DOCKER_WARMUP_MOUNT[@]}" \
      --workdir /artifacts "${DOCKER_DEVICE_ARGS[@]}" \
      --entrypoint /runtime/bin/deepinfer "$DOCKER_IMAGE" "${SERVE_ARGS[@]}" \
      >>"$ARTIFACTS_DIR/serve.log" 2>&1 </dev/null &
  else
    (exec -a "$PROCESS_NAME" "$BINARY" "${SERVE_ARGS[@]}") \
      >>"$ARTIFACTS_DIR/serve.log" 2>&1 </dev/null &
  fi
  child=$!
  write_atomically "$ARTIFACTS_DIR/serve.pid" "$child"
  trap stop_child TERM INT HUP
  local status
  while :; do
    status=0
    wait "$child" || status=$?
    # A trapped signal interrupts wait while the server is still shutting down.
    if ! kill -0 "$child" 2>/dev/null; then break; fi
  done
  record_exit "$status"
  return "$status"
}

case "${1:-start}" in
  start)
    run_preflight || exit 1
    start_server
    ;;
  preflight)
    run_preflight
    ;;
  probe-idle)
    check_devices
    ((failures == 0))
    ;;
  -h | --help | help)
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    ;;
  *)
    echo "usage: $0 [start|preflight|probe-idle]" >&2
    exit 2
    ;;
esac
)BASH";

}  // namespace

absl::StatusOr<std::string> RenderLaunchScript(const Recipe& recipe, const HostConfig& host,
                                               Launcher launcher,
                                               const RenderProvenance& provenance) {
  const bool docker = launcher == Launcher::kDocker;
  if (docker) {
    if (recipe.docker_image.empty()) {
      return InvalidArgumentError(util::codes::kBadRecipe,
                                  "deepinfer.docker_image is required for --launcher docker");
    }
    for (const std::string* p :
         {&host.model_dir, &host.runtime_dir, &host.artifacts_dir, &host.warmup_file}) {
      if (p->find_first_of(",\"") != std::string::npos) {
        return InvalidArgumentError(
            util::codes::kBadHost,
            fmt::format("{}: docker bind mounts cannot take ',' or '\"'", *p));
      }
    }
  }
  const std::string model_path = recipe.model_file == "."
                                     ? host.model_dir
                                     : fmt::format("{}/{}", host.model_dir, recipe.model_file);
  const std::string tokenizer_path =
      recipe.tokenizer_file.empty() ? std::string()
                                    : fmt::format("{}/{}", host.model_dir, recipe.tokenizer_file);
  // Inside the container the folders are mounted at fixed places.
  const std::string serve_model =
      !docker ? model_path
              : (recipe.model_file == "." ? std::string("/model")
                                          : fmt::format("/model/{}", recipe.model_file));
  const std::string serve_tokenizer =
      recipe.tokenizer_file.empty()
          ? std::string()
          : (docker ? fmt::format("/model/{}", recipe.tokenizer_file) : tokenizer_path);

  std::string args = fmt::format("  serve\n  --model {}\n", ShellQuote(serve_model));
  if (!serve_tokenizer.empty()) {
    args += fmt::format("  --tokenizer {}\n", ShellQuote(serve_tokenizer));
  }
  // Docker publishes the port on the host's loopback only; inside, serve must listen on all.
  args += fmt::format("  --host {}\n  --port {}\n", docker ? "0.0.0.0" : "127.0.0.1", host.port);
  // serve refuses an all-addresses bind without a key; here only the host's loopback reaches
  // it (the gateway holds the keys).
  if (docker) args += "  --allow-unauthenticated\n";
  for (const auto& [flag, value] : recipe.serve_flags) {
    args += value.empty() ? fmt::format("  {}\n", flag)
                          : fmt::format("  {} {}\n", flag, ShellQuote(value));
  }
  // serve runs the warm-up requests itself, before /health answers 200.
  constexpr const char* kDockerWarmup = "/warmup-requests";
  if (!host.warmup_file.empty()) {
    args += fmt::format("  --warmup-file {}\n", ShellQuote(docker ? kDockerWarmup : host.warmup_file));
  }
  const std::string docker_warmup_mount =
      docker && !host.warmup_file.empty()
          ? fmt::format("--mount {}", ShellQuote(fmt::format("type=bind,src={},dst={},readonly",
                                                             host.warmup_file, kDockerWarmup)))
          : std::string();

  std::vector<std::string> ids;
  for (int32_t id : host.devices.ids) ids.push_back(std::to_string(id));
  const std::string gpu_ids = fmt::format("{}", fmt::join(ids, " "));
  std::string docker_devices;
  if (docker && host.devices.kind == "nvidia") {
    docker_devices =
        fmt::format("--gpus {}", ShellQuote(fmt::format("\"device={}\"", fmt::join(ids, ","))));
  }

  std::string s;
  auto Var = [&s](const char* name, const std::string& value) {
    s += fmt::format("readonly {}={}\n", name, ShellQuote(value));
  };
  s += "#!/usr/bin/env bash\n";
  s += fmt::format("# deepinfer launch script of instance '{}' (recipe '{}').\n", host.instance,
                   recipe.name);
  s += "#\n";
  s += "# Usage: run.sh [start|preflight|probe-idle]\n";
  s += "#   start       read-only preflight checks, then deepinfer serve on loopback (default);\n";
  s += "#               stays in the foreground and records the exit for deepinfer watch\n";
  s += "#   preflight   only the checks: exit 0 when all pass, 1 otherwise\n";
  s += "#   probe-idle  only the device checks: exit 0 when visible, healthy and idle\n";
  s += "#\n";
  s += fmt::format("# Rendered by deepinfer {} from\n", provenance.renderer_version);
  s += fmt::format("#   recipe {} (sha256 {})\n", provenance.recipe_path, provenance.recipe_sha256);
  s += fmt::format("#   host   {} (sha256 {})\n", provenance.host_path, provenance.host_sha256);
  s +=
      "# Do not edit: change the recipe or host file and render again (deepinfer watch pins this\n";
  s += "# file's sha256).\n\n";
  s += "set -euo pipefail\n\n";
  Var("INSTANCE", host.instance);
  Var("PROCESS_NAME", fmt::format("deepinfer-serve@{}", host.instance));
  s += fmt::format("readonly PORT={}\n", host.port);
  Var("LAUNCHER", docker ? "docker" : "plain");
  Var("ARCHITECTURE", recipe.architecture);
  Var("MODEL_ID", recipe.model_id);
  Var("MODEL_REVISION", recipe.model_revision);
  Var("MODEL_DIR", host.model_dir);
  Var("MODEL_PATH", model_path);
  Var("TOKENIZER_PATH", tokenizer_path);
  Var("RUNTIME_DIR", host.runtime_dir);
  Var("BINARY", BinaryPath(host));
  Var("BINARY_SHA256", recipe.binary_sha256);
  Var("DEEPINFER_VERSION", recipe.deepinfer_version);
  Var("DOCKER_IMAGE", recipe.docker_image);
  Var("ARTIFACTS_DIR", host.artifacts_dir);
  Var("WARMUP_FILE", host.warmup_file);
  Var("DEVICE_KIND", host.devices.kind);
  s += fmt::format("readonly CPU_THREADS={}\n", recipe.threads);
  Var("MAX_LOAD", fmt::format("{}", host.devices.max_load));
  s += fmt::format("readonly GPU_IDS=({})\n", gpu_ids);
  s += fmt::format("readonly MAX_GPU_UTILIZATION_PCT={}\n", host.devices.max_utilization_pct);
  s += fmt::format("readonly MAX_GPU_MEMORY_USED_MIB={}\n", host.devices.max_memory_used_mib);
  s += fmt::format("readonly DOCKER_DEVICE_ARGS=({})\n", docker_devices);
  s += fmt::format("readonly DOCKER_WARMUP_MOUNT=({})\n", docker_warmup_mount);
  s += fmt::format("readonly SERVE_ARGS=(\n{})\n", args);
  s += "# Provenance, for reviewers and logs.\n";
  s += ": \"$MODEL_ID\" \"$MODEL_REVISION\"\n";
  s += kBody;
  return s;
}

}  // namespace deepinfer::tools
