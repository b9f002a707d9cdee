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

check_checkpoints() {
  local key
  local -a problems=()
  if [[ -n "$PREFIX_CHECKPOINT_DIR" ]]; then
    if [[ ! -d "$PREFIX_CHECKPOINT_DIR" ]]; then
      problems+=("prefix checkpoint folder $PREFIX_CHECKPOINT_DIR is missing")
    elif [[ ! -w "$PREFIX_CHECKPOINT_DIR" || ! -x "$PREFIX_CHECKPOINT_DIR" ||
      ! -r "$PREFIX_CHECKPOINT_DIR" ]]; then
      problems+=("prefix checkpoint folder $PREFIX_CHECKPOINT_DIR is not writable")
    fi
  fi
  if [[ -n "$PD_ROLE" ]]; then
    if [[ ! -d "$PD_CHECKPOINT_DIR" ]]; then
      problems+=("P/D folder $PD_CHECKPOINT_DIR is missing")
    elif [[ "$PD_ROLE" == prefill && (! -w "$PD_CHECKPOINT_DIR" || ! -x "$PD_CHECKPOINT_DIR") ]]; then
      problems+=("P/D folder $PD_CHECKPOINT_DIR is not writable (the prefill side writes there)")
    elif [[ ! -r "$PD_CHECKPOINT_DIR" || ! -x "$PD_CHECKPOINT_DIR" ]]; then
      problems+=("P/D folder $PD_CHECKPOINT_DIR is not readable")
    fi
    if [[ ! -f "$PD_API_KEY_FILE" || ! -r "$PD_API_KEY_FILE" ]]; then
      problems+=("P/D key file $PD_API_KEY_FILE is missing or unreadable")
    else
      key=$(<"$PD_API_KEY_FILE")
      if [[ -z "$key" || "$key" == *[![:graph:]]* ]]; then
        problems+=("P/D key file $PD_API_KEY_FILE must hold one line of visible ASCII")
      fi
    fi
  fi
  if ((${#problems[@]} > 0)); then
    local IFS=';'
    fail checkpoints "${problems[*]}"
  elif [[ -n "$PD_ROLE" ]]; then
    pass checkpoints "$PD_ROLE side: $PD_CHECKPOINT_DIR and the key file are usable"
  else
    pass checkpoints "$PREFIX_CHECKPOINT_DIR is writable"
  fi
}

# Whether $1 names this machine: loopback, this host's name, or an address of this host.
is_local_address() {
  local ip mine
  local -a ips=("$1") own=()
  case "$1" in localhost | 127.* | ::1) return 0 ;; esac
  if [[ "$1" == "$(hostname 2>/dev/null)" || "$1" == "$(hostname -f 2>/dev/null)" ]]; then
    return 0
  fi
  read -r -a own <<<"$(hostname -I 2>/dev/null)" || true
  read -r -a ips <<<"$1 $(getent ahosts "$1" 2>/dev/null | awk '{ print $1 }' | sort -u | tr '\n' ' ')" || true
  for ip in "${ips[@]}"; do
    case "$ip" in 127.* | ::1) return 0 ;; esac
    for mine in "${own[@]}"; do
      if [[ "$ip" == "$mine" ]]; then return 0; fi
    done
  done
  return 1
}

check_ep_launch() {
  if ! command -v mpirun >/dev/null 2>&1; then
    fail ep_launch "mpirun not found (install openmpi-bin)"
    return
  fi
  if ! is_local_address "${EP_HOST_ADDRESSES[0]}"; then
    fail ep_launch "the first host ${EP_HOST_NAMES[0]} (${EP_HOST_ADDRESSES[0]}) is not this machine; rank 0 runs and serves here"
    return
  fi
  pass ep_launch "mpirun found; $EP_RANKS ranks on ${#EP_HOST_NAMES[@]} host(s), rank 0 here"
}

# The two functions below run on every host of the group: here, and on the others through
# `ssh host bash -s` (their text is sent on stdin), so they use nothing else of this script.
# Prints "<replicated bytes> <routed expert bytes> <basis>" of a model: from its safetensors
# headers (routed experts are the tensors named *.experts.<n>.*), else all of its files' bytes
# as replicated with basis "files".
ep_model_bytes() {
  local model=$1 f len
  local -a files=()
  if [[ -d "$model" ]]; then
    for f in "$model"/*.safetensors; do
      if [[ -f "$f" ]]; then files+=("$f"); fi
    done
  elif [[ "$model" == *.safetensors ]]; then
    files=("$model")
  fi
  if ((${#files[@]} == 0)); then
    find -L "$model" -type f -printf '%s\n' 2>/dev/null |
      awk '{ s += $1 } END { printf "%.0f 0 files\n", s }'
    return
  fi
  for f in "${files[@]}"; do
    len=$(od -An -t u8 -N 8 -- "$f" 2>/dev/null | tr -d ' ')
    if ! [[ "$len" =~ ^[0-9]+$ ]]; then continue; fi
    head -c "$((8 + len))" -- "$f" | tail -c "$len" |
      grep -oE '"[^"]+":\{[^{}]*"data_offsets":\[[0-9]+,[0-9]+\][^{}]*\}' || true
  done | awk '{
      name = substr($0, 2, index($0, "\":") - 2)
      if (!match($0, /"data_offsets":\[[0-9]+,[0-9]+\]/)) next
      split(substr($0, RSTART + 16, RLENGTH - 17), o, ",")
      if (name ~ /\.experts\.[0-9]+\./) routed += o[2] - o[1]; else replicated += o[2] - o[1]
    } END { printf "%.0f %.0f safetensors\n", replicated, routed }'
}

# Prints "problem <text>" per problem, then "memory <available bytes> <ep_model_bytes>".
ep_probe() {
  local binary=$1 model=$2 version=$3 sha=$4 slots=$5 threads=$6 tool=$7
  local out sum cores avail bytes
  command -v "$tool" >/dev/null 2>&1 || echo "problem $tool not found (install openmpi-bin)"
  if [[ ! -f "$binary" || ! -x "$binary" ]]; then
    echo "problem no executable $binary"
  else
    out=$("$binary" --version 2>&1 | head -n 1) || true
    if [[ "$out" != "deepinfer $version" ]]; then
      echo "problem $binary --version says '$out'; the recipe pins deepinfer $version"
    fi
    sum=$(sha256sum -- "$binary" 2>/dev/null) || sum=""
    if [[ "${sum%% *}" != "$sha" ]]; then
      echo "problem the sha256 of $binary is not the recipe's"
    fi
  fi
  if cores=$(nproc 2>/dev/null) && ((threads * slots > cores)); then
    echo "problem $slots rank(s) of $threads threads want more than its $cores cores"
  fi
  if [[ ! -e "$model" || ! -r "$model" ]]; then
    echo "problem model $model is missing or unreadable"
    return
  fi
  avail=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo 2>/dev/null) || avail=""
  bytes=$(ep_model_bytes "$model") || bytes=""
  echo "memory ${avail:-unknown} $bytes"
}

# One line per host: reachable (ssh, BatchMode: never a password prompt), MPI, the same binary
# and version, the model, and memory for its ranks: each rank maps the whole checkpoint but
# reads the replicated weights and only 1/N of the routed experts.
check_ep_hosts() {
  local i name addr out rc line need verdict
  local -a args problems
  for i in "${!EP_HOST_NAMES[@]}"; do
    name=${EP_HOST_NAMES[i]}
    addr=${EP_HOST_ADDRESSES[i]}
    args=("${EP_HOST_BINARIES[i]}" "${EP_HOST_MODELS[i]}" "$DEEPINFER_VERSION" "$BINARY_SHA256"
      "${EP_HOST_SLOTS[i]}" "${EP_HOST_THREADS[i]}")
    rc=0
    if ((i == 0)); then
      out=$(ep_probe "${args[@]}" mpirun 2>&1) || rc=$?
    elif ! command -v ssh >/dev/null 2>&1; then
      fail ep_host "$name ($addr): cannot check it: ssh not found here (mpirun needs it too)"
      continue
    else
      out=$(ssh -o BatchMode=yes -o ConnectTimeout="$EP_SSH_TIMEOUT_S" -- "$addr" \
        "bash -s -- $(printf '%q ' "${args[@]}" orted)" \
        <<<"$(declare -f ep_model_bytes ep_probe)
ep_probe \"\$@\"" 2>&1) || rc=$?
      if ((rc == 255)); then
        fail ep_host "$name ($addr): not reachable over ssh (BatchMode, ${EP_SSH_TIMEOUT_S} s timeout): ${out//$'\n'/ }"
        continue
      fi
    fi
    problems=()
    verdict=""
    while IFS= read -r line; do
      case "$line" in
        "problem "*) problems+=("${line#problem }") ;;
        "memory "*)
          # Units: bytes. For a model without safetensors headers all bytes count as
          # replicated / N: a lower bound.
          verdict=$(awk -v s="${EP_HOST_SLOTS[i]}" -v n="$EP_RANKS" '{
              if ($2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/) { print "unknown"; exit }
              need = ($5 == "files") ? s * $3 / n : s * ($3 + $4 / n)
              if (need > $2 + 0) printf "short %.0f %.0f\n", need / 1048576, $2 / 1048576
              else printf "ok %.0f %.0f\n", need / 1048576, $2 / 1048576 }' <<<"$line")
          ;;
      esac
    done <<<"$out"
    case "$verdict" in
      short*) read -r _ need line <<<"$verdict"
        problems+=("its ${EP_HOST_SLOTS[i]} rank(s) need about $need MiB; $line MiB available") ;;
      ok*) ;;
      *) [[ ${#problems[@]} -gt 0 ]] ||
        problems+=("no answer about memory (state unknown): ${out//$'\n'/ }") ;;
    esac
    if ((${#problems[@]} > 0)); then
      local IFS=';'
      fail ep_host "$name ($addr): ${problems[*]}"
      unset IFS
    else
      read -r _ need line <<<"$verdict"
      pass ep_host "$name ($addr): ${EP_HOST_SLOTS[i]} rank(s), deepinfer $DEEPINFER_VERSION, about $need MiB of $line MiB available"
    fi
  done
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
  if [[ -n "$PREFIX_CHECKPOINT_DIR$PD_ROLE" ]]; then check_checkpoints; fi
  if ((EP_RANKS > 0)); then
    check_ep_launch
    check_ep_hosts
  fi
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

# Rank 0 of the mpirun group: the child of mpirun whose OMPI_COMM_WORLD_RANK is 0.
rank0_pid() {
  local f pid stat ppid
  for f in /proc/[0-9]*/stat; do
    pid=${f//[^0-9]/}
    IFS= read -r stat 2>/dev/null <"$f" || continue
    read -r _ ppid _ <<<"${stat##*) }"
    if [[ "$ppid" == "$child" ]] &&
      tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

child=0
stop_signal=""
stop_child() {
  local rank0
  stop_signal=$1
  if [[ "$LAUNCHER" == docker ]]; then
    docker stop --time 30 "$INSTANCE" >/dev/null 2>&1 || true
  elif ((EP_RANKS > 0 && child > 0)) && rank0=$(rank0_pid); then
    # Rank 0 stops the group and every rank exits 0; SIGTERM to mpirun would end it with 1.
    kill -TERM "$rank0" 2>/dev/null || true
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
  # mpirun exits 1 when it is signalled itself (systemd's KillMode=control-group signals every
  # process of the unit): after a stop signal that is still an operator's stop.
  if ((EP_RANKS > 0 && status != 0)) && [[ -n "$stop_signal" && -z "$signal" ]]; then
    signal=$stop_signal
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
  if [[ -n "$PD_ROLE" ]]; then
    # The key stays out of this script and the command line: serve reads it from the environment.
    DEEPINFER_PD_API_KEY=$(<"$PD_API_KEY_FILE")
    export DEEPINFER_PD_API_KEY
  fi
  echo "starting deepinfer serve for $INSTANCE on 127.0.0.1:$PORT ($LAUNCHER)"
  if [[ "$LAUNCHER" == docker ]]; then
    docker run --name "$INSTANCE" --init --restart no --rm \
      --user "$(id -u):$(id -g)" \
      --publish "127.0.0.1:$PORT:$PORT" \
      --mount "type=bind,src=$MODEL_DIR,dst=/model,readonly" \
      --mount "type=bind,src=$RUNTIME_DIR,dst=/runtime,readonly" \
      --mount "type=bind,src=$ARTIFACTS_DIR,dst=/artifacts" "${DOCKER_WARMUP_MOUNT[@]}" \
      "${DOCKER_STATE_ARGS[@]}" \
      --workdir /artifacts "${DOCKER_DEVICE_ARGS[@]}" \
      --entrypoint /runtime/bin/deepinfer "$DOCKER_IMAGE" "${SERVE_ARGS[@]}" \
      >>"$ARTIFACTS_DIR/serve.log" 2>&1 </dev/null &
  elif ((EP_RANKS > 0)); then
    (exec -a "$PROCESS_NAME" mpirun "${MPIRUN_ARGS[@]}") \
      >>"$ARTIFACTS_DIR/serve.log" 2>&1 </dev/null &
  else
    (exec -a "$PROCESS_NAME" "$BINARY" "${SERVE_ARGS[@]}") \
      >>"$ARTIFACTS_DIR/serve.log" 2>&1 </dev/null &
  fi
  child=$!
  write_atomically "$ARTIFACTS_DIR/serve.pid" "$child"
  trap 'stop_child TERM' TERM
  trap 'stop_child INT' INT
  trap 'stop_child HUP' HUP
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

// One `deepinfer serve` argument per entry, values quoted: a flag and its value share an entry.
using ArgLines = std::vector<std::string>;

void Arg(ArgLines* args, const std::string& flag, const std::string& value) {
  args->push_back(value.empty() ? flag : fmt::format("{} {}", flag, ShellQuote(value)));
}

// Where a state folder appears to serve: the path itself, or its mount point in docker.
struct StateFolders {
  std::string prefix;  // --prefix-checkpoint-dir
  std::string pd;      // --pd-checkpoint-dir
};

// serve's flags after --model/--tokenizer, the same on every rank (the per-host --threads of an
// expert-parallel group is left out and added per host).
ArgLines ServeFlags(const Recipe& recipe, const HostConfig& host, bool docker,
                    const StateFolders& state) {
  ArgLines args;
  const bool ep = !host.expert_parallel.hosts.empty();
  // Docker publishes the port on the host's loopback only; inside, serve must listen on all.
  args.push_back(fmt::format("--host {}", docker ? "0.0.0.0" : "127.0.0.1"));
  args.push_back(fmt::format("--port {}", host.port));
  // serve refuses an all-addresses bind without a key; here only the host's loopback reaches
  // it (the gateway holds the keys).
  if (docker) args.push_back("--allow-unauthenticated");
  // Only rank 0 of an expert-parallel group opens the port; the others follow its steps.
  if (ep) args.push_back("--expert-parallel");
  for (const auto& [flag, value] : recipe.serve_flags) {
    if (ep && flag == "--threads") continue;
    Arg(&args, flag, value);
  }
  if (!host.prefix_checkpoint_dir.empty()) Arg(&args, "--prefix-checkpoint-dir", state.prefix);
  if (!host.pd.role.empty()) {
    Arg(&args, "--pd-role", host.pd.role);
    Arg(&args, "--pd-checkpoint-dir", state.pd);
    if (!host.pd.prefill_url.empty()) Arg(&args, "--pd-prefill-url", host.pd.prefill_url);
  }
  // Checkpoints record the weights' revision and refuse others': the recipe pins it.
  if (!host.prefix_checkpoint_dir.empty() || !host.pd.role.empty()) {
    Arg(&args, "--model-revision", recipe.model_revision);
  }
  return args;
}

std::string JoinLines(const ArgLines& lines) {
  std::string out;
  for (const std::string& line : lines) out += "  " + line + "\n";
  return out;
}

// The mpirun arguments, an option or command word per line.
std::string MpirunLines(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    bool starts_line = i == 0 || (w[0] == '-' && !(w == "--host" && i >= 2 &&
                                                   words[i - 2] == "-np")) ||
                       w == ":" || w == "serve" ||
                       (w.size() > 15 && w.compare(w.size() - 15, 15, "/bin/deepinfer'") == 0);
    out += starts_line ? (i == 0 ? "  " : "\n  ") + w : " " + w;
  }
  return words.empty() ? out : out + "\n";
}

std::string Header(const Recipe& recipe, const HostConfig& host,
                   const RenderProvenance& provenance) {
  const bool ep = !host.expert_parallel.hosts.empty();
  std::string s = "#!/usr/bin/env bash\n";
  s += fmt::format("# deepinfer launch script of instance '{}' (recipe '{}').\n", host.instance,
                   recipe.name);
  s += "#\n";
  s += "# Usage: run.sh [start|preflight|probe-idle]\n";
  s += "#   start       read-only preflight checks, then deepinfer serve on loopback (default);\n";
  s += "#               stays in the foreground and records the exit for deepinfer watch\n";
  s += "#   preflight   only the checks: exit 0 when all pass, 1 otherwise\n";
  s += "#   probe-idle  only the device checks: exit 0 when visible, healthy and idle\n";
  if (ep) {
    s += fmt::format(
        "#\n# Expert parallelism: mpirun starts {} ranks of deepinfer serve --expert-parallel\n",
        host.expert_parallel.NumRanks());
    s += "# (rank 0 here serves HTTP; the other hosts are reached over ssh). A stop signal to\n";
    s += "# this script sends SIGTERM to rank 0, which stops every rank (all exit 0).\n";
  }
  s += "#\n";
  s += fmt::format("# Rendered by deepinfer {} from\n", provenance.renderer_version);
  s += fmt::format("#   recipe {} (sha256 {})\n", provenance.recipe_path, provenance.recipe_sha256);
  s += fmt::format("#   host   {} (sha256 {})\n", provenance.host_path, provenance.host_sha256);
  s +=
      "# Do not edit: change the recipe or host file and render again (deepinfer watch pins this\n";
  s += "# file's sha256).\n\n";
  s += "set -euo pipefail\n\n";
  return s;
}

std::string QuotedList(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(ShellQuote(v));
  return fmt::format("({})", fmt::join(quoted, " "));
}

// The expert-parallel group's settings, one array per field, a host per index.
std::string EpSettings(const Recipe& recipe, const HostConfig& host) {
  const ExpertParallelSpec& ep = host.expert_parallel;
  std::vector<std::string> names, addresses, slots, threads, binaries, models;
  for (const EpHost& h : ep.hosts) {
    names.push_back(h.name);
    addresses.push_back(h.address);
    slots.push_back(std::to_string(h.slots));
    threads.push_back(std::to_string(h.threads >= 0 ? h.threads : recipe.threads));
    binaries.push_back((h.runtime_dir.empty() ? host.runtime_dir : h.runtime_dir) +
                       "/bin/deepinfer");
    const std::string& dir = h.model_dir.empty() ? host.model_dir : h.model_dir;
    models.push_back(recipe.model_file == "." ? dir : dir + "/" + recipe.model_file);
  }
  std::string s;
  s += fmt::format("readonly EP_RANKS={}\n", ep.NumRanks());
  s += fmt::format("readonly EP_HOST_NAMES={}\n", QuotedList(names));
  s += fmt::format("readonly EP_HOST_ADDRESSES={}\n", QuotedList(addresses));
  s += fmt::format("readonly EP_HOST_SLOTS={}\n", QuotedList(slots));
  s += fmt::format("readonly EP_HOST_THREADS={}\n", QuotedList(threads));
  s += fmt::format("readonly EP_HOST_BINARIES={}\n", QuotedList(binaries));
  s += fmt::format("readonly EP_HOST_MODELS={}\n", QuotedList(models));
  s += fmt::format("readonly EP_SSH_TIMEOUT_S={}\n", ep.ssh_timeout_s);
  return s;
}

}  // namespace

absl::StatusOr<std::string> RenderLaunchScript(const Recipe& recipe, const HostConfig& host,
                                               Launcher launcher,
                                               const RenderProvenance& provenance) {
  DI_RETURN_IF_ERROR(CheckDeployment(recipe, host, launcher));
  const bool docker = launcher == Launcher::kDocker;
  const bool ep = !host.expert_parallel.hosts.empty();
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
  StateFolders state{host.prefix_checkpoint_dir, host.pd.checkpoint_dir};
  std::vector<std::string> docker_state;
  if (docker && !state.prefix.empty()) {
    docker_state.push_back(fmt::format("--mount {}", ShellQuote(fmt::format(
                                           "type=bind,src={},dst=/prefix-checkpoints",
                                           state.prefix))));
    state.prefix = "/prefix-checkpoints";
  }
  if (docker && !state.pd.empty()) {
    docker_state.push_back(fmt::format(
        "--mount {}", ShellQuote(fmt::format("type=bind,src={},dst=/pd-checkpoints", state.pd))));
    docker_state.push_back("--env DEEPINFER_PD_API_KEY");
    state.pd = "/pd-checkpoints";
  }

  ArgLines flags = ServeFlags(recipe, host, docker, state);
  // serve runs the warm-up requests itself, before /health answers 200.
  constexpr const char* kDockerWarmup = "/warmup-requests";
  if (!host.warmup_file.empty()) {
    Arg(&flags, "--warmup-file", docker ? kDockerWarmup : host.warmup_file);
  }
  ArgLines serve = {"serve"};
  Arg(&serve, "--model", serve_model);
  if (!serve_tokenizer.empty()) Arg(&serve, "--tokenizer", serve_tokenizer);
  serve.insert(serve.end(), flags.begin(), flags.end());

  std::string mpirun;
  if (ep) {
    // mpirun needs single words; the model goes per host, after the tokenizer.
    std::vector<std::string> words = {"serve"};
    if (!serve_tokenizer.empty()) {
      words.insert(words.end(), {"--tokenizer", ShellQuote(serve_tokenizer)});
    }
    for (const std::string& line : flags) {
      size_t space = line.find(' ');
      words.push_back(line.substr(0, space));
      if (space != std::string::npos) words.push_back(line.substr(space + 1));
    }
    mpirun = MpirunLines(
        MpirunArgs(recipe, host, words, recipe.model_file == "." ? "" : recipe.model_file));
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

  std::string s = Header(recipe, host, provenance);
  auto Var = [&s](const char* name, const std::string& value) {
    s += fmt::format("readonly {}={}\n", name, ShellQuote(value));
  };
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
  Var("PREFIX_CHECKPOINT_DIR", host.prefix_checkpoint_dir);
  Var("PD_ROLE", host.pd.role);
  Var("PD_CHECKPOINT_DIR", host.pd.checkpoint_dir);
  Var("PD_API_KEY_FILE", host.pd.api_key_file);
  Var("DEVICE_KIND", host.devices.kind);
  // The CPU probe counts this machine's threads: all of its ranks' in a group.
  const int32_t local_threads =
      ep ? host.expert_parallel.hosts[0].slots * (host.expert_parallel.hosts[0].threads >= 0
                                                      ? host.expert_parallel.hosts[0].threads
                                                      : recipe.threads)
         : recipe.threads;
  s += fmt::format("readonly CPU_THREADS={}\n", local_threads);
  Var("MAX_LOAD", fmt::format("{}", host.devices.max_load));
  s += fmt::format("readonly GPU_IDS=({})\n", gpu_ids);
  s += fmt::format("readonly MAX_GPU_UTILIZATION_PCT={}\n", host.devices.max_utilization_pct);
  s += fmt::format("readonly MAX_GPU_MEMORY_USED_MIB={}\n", host.devices.max_memory_used_mib);
  s += fmt::format("readonly DOCKER_DEVICE_ARGS=({})\n", docker_devices);
  s += fmt::format("readonly DOCKER_WARMUP_MOUNT=({})\n", docker_warmup_mount);
  s += fmt::format("readonly DOCKER_STATE_ARGS=({})\n", fmt::join(docker_state, " "));
  s += EpSettings(recipe, host);
  s += fmt::format("readonly SERVE_ARGS=(\n{})\n", ep ? std::string() : JoinLines(serve));
  s += fmt::format("readonly MPIRUN_ARGS=(\n{})\n", mpirun);
  s += "# Provenance, for reviewers and logs.\n";
  s += ": \"$MODEL_ID\" \"$MODEL_REVISION\"\n";
  s += kBody;
  return s;
}

}  // namespace deepinfer::tools
