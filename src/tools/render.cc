#include "tools/render.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/paths.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

using util::Json;

constexpr char kRecipeFormat[] = "deepinfer-recipe/1";
constexpr char kHostFormat[] = "deepinfer-host/1";
constexpr char kInstanceFormat[] = "deepinfer-instance/1";

enum class ParamType { kInt, kUint, kSize, kName, kEnableFlag, kSeconds };

// The `deepinfer serve` parameters a recipe may pin. Host and port are not among them: the
// script always binds loopback and takes the port from the host file.
struct ServeParam {
  const char* key;
  const char* flag;
  ParamType type;
  int64_t min;
  int64_t max;
};

constexpr ServeParam kServeParams[] = {
    {"served_model_name", "--served-model-name", ParamType::kName, 0, 0},
    {"chat_template", "--chat-template", ParamType::kName, 0, 0},
    {"speculative_tokens", "--speculative-tokens", ParamType::kInt, 0, 8},
    {"max_model_len", "--max-model-len", ParamType::kInt, 0, int64_t{1} << 24},
    {"max_output_tokens", "--max-output-tokens", ParamType::kInt, 1, int64_t{1} << 24},
    {"max_request_bytes", "--max-request-bytes", ParamType::kSize, 0, 0},
    {"max_connections", "--max-connections", ParamType::kInt, 1, 100000},
    {"prefill_budget", "--prefill-budget", ParamType::kInt, 1, int64_t{1} << 20},
    {"long_prefill_token_threshold", "--long-prefill-token-threshold", ParamType::kInt, 0,
     int64_t{1} << 20},
    {"long_prefill_chunk", "--long-prefill-chunk", ParamType::kInt, 1, int64_t{1} << 20},
    {"max_num_seqs", "--max-num-seqs", ParamType::kInt, 1, int64_t{1} << 16},
    {"block_size", "--block-size", ParamType::kInt, 1, 1024},
    {"kv_cache_tokens", "--kv-cache-tokens", ParamType::kInt, 0, int64_t{1} << 40},
    {"kv_cache_memory", "--kv-cache-memory", ParamType::kSize, 0, 0},
    {"kv_cache_dtype", "--kv-cache-dtype", ParamType::kName, 0, 0},
    {"threads", "--threads", ParamType::kInt, 0, 1024},
    {"seed", "--seed", ParamType::kUint, 0, 0},
    {"prefix_caching", "--no-prefix-caching", ParamType::kEnableFlag, 0, 0},
    {"data_parallel_size", "--data-parallel-size", ParamType::kInt, 1, 64},
    // Prefix checkpoints and P/D roles (their folders come from the host file).
    {"checkpoint_min_tokens", "--checkpoint-min-tokens", ParamType::kInt, 1, int64_t{1} << 24},
    {"checkpoint_max_bytes", "--checkpoint-max-bytes", ParamType::kSize, 0, 0},
    // Expert parallelism (its hosts come from the host file).
    {"expert_parallel_timeout", "--expert-parallel-timeout", ParamType::kSeconds, 1, 3600},
};

// Strict field access over one JSON object of a config file: unknown keys are errors, so a
// typo never silently drops a pinned setting.
class Section {
 public:
  Section(const util::Json& object, std::string where, const char* code)
      : object_(object), where_(std::move(where)), code_(code) {}

  absl::Status Error(const std::string& key, const std::string& what) const {
    return InvalidArgumentError(code_, fmt::format("{}{}: {}", where_, key, what));
  }

  absl::Status OnlyKeys(std::initializer_list<const char*> keys) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool known =
          std::any_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; });
      if (!known) return Error(it.key(), "unknown field");
    }
    return absl::OkStatus();
  }

  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  absl::Status String(const char* key, bool required, std::string* out) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      return required ? Error(key, "required") : absl::OkStatus();
    }
    if (!it->is_string()) return Error(key, "must be a string");
    *out = it->get<std::string>();
    if (required && out->empty()) return Error(key, "must not be empty");
    for (char c : *out) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return Error(key, "must not contain control characters");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Int(const char* key, bool required, int64_t min, int64_t max,
                   std::optional<int64_t>* out) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      return required ? Error(key, "required") : absl::OkStatus();
    }
    if (!it->is_number_integer()) return Error(key, "must be an integer");
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(key, "is too large");
    }
    int64_t v = it->get<int64_t>();
    if (v < min || v > max) return Error(key, fmt::format("must be between {} and {}", min, max));
    *out = v;
    return absl::OkStatus();
  }

  absl::StatusOr<Section> Object(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Error(key, "required");
    if (!it->is_object()) return Error(key, "must be an object");
    return Section(*it, where_ + key + ".", code_);
  }

  const util::Json& json() const { return object_; }

 private:
  const util::Json& object_;
  std::string where_;
  const char* code_;
};

bool IsHex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool MatchesCharset(const std::string& s, const char* extra) {
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::strchr(extra, c) != nullptr;
  });
}

absl::Status CheckAbsolutePath(const Section& s, const char* key, const std::string& path) {
  if (path.empty() || path[0] != '/') return s.Error(key, "must be an absolute path");
  if (path != "/" && path.back() == '/') return s.Error(key, "must not end with '/'");
  if (path.find("/../") != std::string::npos || path.find("/./") != std::string::npos ||
      path.find("//") != std::string::npos ||
      (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0) ||
      (path.size() >= 2 && path.compare(path.size() - 2, 2, "/.") == 0)) {
    return s.Error(key, "must be a normalized path (no '.', '..' or '//')");
  }
  return absl::OkStatus();
}

absl::StatusOr<util::Json> ParseConfigObject(std::string_view text, const char* code,
                                             const char* what, const char* format) {
  auto json = util::ParseJson(text);
  if (!json.ok()) return InvalidArgumentError(code, fmt::format("the {} is not valid JSON", what));
  if (!json->is_object()) {
    return InvalidArgumentError(code, fmt::format("the {} must be a JSON object", what));
  }
  auto it = json->find("format");
  if (it == json->end() || !it->is_string() || *it != format) {
    return InvalidArgumentError(code, fmt::format("format: must be \"{}\"", format));
  }
  return std::move(*json);
}


// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}: instance and host names.
bool IsName(const std::string& s) {
  return !s.empty() && s.size() <= 63 && MatchesCharset(s, "_.-") && s[0] != '.' &&
         s[0] != '-' && s[0] != '_';
}

absl::Status ParseDevices(const Section& devices, DeviceSpec* out) {
  DI_RETURN_IF_ERROR(devices.OnlyKeys(
      {"kind", "ids", "max_load", "max_utilization_pct", "max_memory_used_mib", "comment"}));
  DI_RETURN_IF_ERROR(devices.String("kind", true, &out->kind));
  // Any kind renders (the script's probe refuses kinds it does not know), but it must be a
  // plain word so it can sit in the script.
  if (out->kind.size() > 32 || !MatchesCharset(out->kind, "_-")) {
    return devices.Error("kind", "must be a plain word (cpu, nvidia)");
  }
  if (devices.Has("ids")) {
    const util::Json& ids = devices.json()["ids"];
    if (!ids.is_array()) return devices.Error("ids", "must be an array of device indices");
    for (const util::Json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 1023) {
        return devices.Error("ids", "must hold integers between 0 and 1023");
      }
      out->ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (out->kind == "nvidia" && out->ids.empty()) {
    return devices.Error("ids", "required for nvidia devices");
  }
  if (devices.Has("max_load")) {
    const util::Json& v = devices.json()["max_load"];
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      return devices.Error("max_load", "must be a non-negative number");
    }
    out->max_load = v.get<double>();
  }
  std::optional<int64_t> v;
  DI_RETURN_IF_ERROR(devices.Int("max_utilization_pct", false, 0, 100, &v));
  if (v) out->max_utilization_pct = static_cast<int32_t>(*v);
  v.reset();
  DI_RETURN_IF_ERROR(devices.Int("max_memory_used_mib", false, 0, 1 << 30, &v));
  if (v) out->max_memory_used_mib = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

absl::Status ParsePd(const Section& pd, PdSpec* out) {
  DI_RETURN_IF_ERROR(
      pd.OnlyKeys({"role", "checkpoint_dir", "prefill_url", "api_key_file", "comment"}));
  DI_RETURN_IF_ERROR(pd.String("role", true, &out->role));
  if (out->role != "prefill" && out->role != "decode") {
    return pd.Error("role", "must be \"prefill\" or \"decode\" (leave pd out for one server)");
  }
  DI_RETURN_IF_ERROR(pd.String("checkpoint_dir", true, &out->checkpoint_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(pd, "checkpoint_dir", out->checkpoint_dir));
  DI_RETURN_IF_ERROR(pd.String("api_key_file", true, &out->api_key_file));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(pd, "api_key_file", out->api_key_file));
  DI_RETURN_IF_ERROR(pd.String("prefill_url", false, &out->prefill_url));
  if (out->role == "decode") {
    const std::string& url = out->prefill_url;
    if (url.empty()) return pd.Error("prefill_url", "required for the decode role");
    if (url.rfind("http://", 0) != 0 || url.size() == 7 || url.size() > 256 ||
        !MatchesCharset(url, ".-_:/[]")) {
      return pd.Error("prefill_url", "must be http://host:port of the prefill side");
    }
  } else if (!out->prefill_url.empty()) {
    return pd.Error("prefill_url", "is for the decode role");
  }
  return absl::OkStatus();
}

absl::Status ParseEpHost(const Section& s, size_t index, EpHost* out) {
  DI_RETURN_IF_ERROR(
      s.OnlyKeys({"name", "address", "slots", "threads", "model", "runtime", "comment"}));
  DI_RETURN_IF_ERROR(s.String("name", true, &out->name));
  if (!IsName(out->name)) {
    return s.Error("name", "must be 1-63 characters of [A-Za-z0-9_.-], starting with a letter "
                           "or digit");
  }
  DI_RETURN_IF_ERROR(s.String("address", true, &out->address));
  // mpirun's --host list splits on ',' and ':', and ssh takes a leading '-' as an option.
  if (out->address.size() > 253 || !MatchesCharset(out->address, ".-_") ||
      out->address[0] == '-' || out->address[0] == '.') {
    return s.Error("address", "must be a host name or an IPv4 address ([A-Za-z0-9.-_])");
  }
  std::optional<int64_t> v;
  DI_RETURN_IF_ERROR(s.Int("slots", true, 1, 256, &v));
  out->slots = static_cast<int32_t>(*v);
  v.reset();
  DI_RETURN_IF_ERROR(s.Int("threads", false, 0, 1024, &v));
  if (v) out->threads = static_cast<int32_t>(*v);
  DI_RETURN_IF_ERROR(s.String("model", false, &out->model_dir));
  DI_RETURN_IF_ERROR(s.String("runtime", false, &out->runtime_dir));
  if (index == 0 && (!out->model_dir.empty() || !out->runtime_dir.empty())) {
    return s.Error(out->model_dir.empty() ? "runtime" : "model",
                   "the first host is this machine (rank 0): its folders are the host file's "
                   "paths");
  }
  if (!out->model_dir.empty()) DI_RETURN_IF_ERROR(CheckAbsolutePath(s, "model", out->model_dir));
  if (!out->runtime_dir.empty()) {
    DI_RETURN_IF_ERROR(CheckAbsolutePath(s, "runtime", out->runtime_dir));
  }
  return absl::OkStatus();
}

absl::Status ParseExpertParallel(const Section& ep, ExpertParallelSpec* out) {
  DI_RETURN_IF_ERROR(ep.OnlyKeys(
      {"hosts", "transport", "network", "ucx_devices", "ssh_timeout_s", "comment"}));
  auto hosts = ep.json().find("hosts");
  if (hosts == ep.json().end() || !hosts->is_array() || hosts->empty() || hosts->size() > 64) {
    return ep.Error("hosts", "must be an array of 1-64 hosts, this machine first");
  }
  std::set<std::string> names, addresses;
  for (size_t i = 0; i < hosts->size(); ++i) {
    if (!(*hosts)[i].is_object()) return ep.Error("hosts", "must hold objects");
    Section s((*hosts)[i], fmt::format("expert_parallel.hosts[{}].", i), "bad_host");
    EpHost h;
    DI_RETURN_IF_ERROR(ParseEpHost(s, i, &h));
    if (!names.insert(h.name).second) return s.Error("name", "appears twice");
    if (!addresses.insert(h.address).second) return s.Error("address", "appears twice");
    out->hosts.push_back(std::move(h));
  }
  if (out->NumRanks() < 2) return ep.Error("hosts", "must hold at least 2 slots in all");
  DI_RETURN_IF_ERROR(ep.String("transport", false, &out->transport));
  if (out->transport != "auto" && out->transport != "tcp" && out->transport != "ucx") {
    return ep.Error("transport", "must be auto, tcp or ucx");
  }
  DI_RETURN_IF_ERROR(ep.String("network", false, &out->network));
  if (out->network.size() > 128 || !MatchesCharset(out->network, "._-/,")) {
    return ep.Error("network", "must be interface names or CIDR subnets (eth1, 10.0.0.0/24)");
  }
  DI_RETURN_IF_ERROR(ep.String("ucx_devices", false, &out->ucx_devices));
  if (out->ucx_devices.size() > 128 || !MatchesCharset(out->ucx_devices, "._-:,")) {
    return ep.Error("ucx_devices", "must be UCX device names (mlx5_0:1)");
  }
  if (!out->ucx_devices.empty() && out->transport != "ucx") {
    return ep.Error("ucx_devices", "needs transport ucx");
  }
  std::optional<int64_t> v;
  DI_RETURN_IF_ERROR(ep.Int("ssh_timeout_s", false, 1, 60, &v));
  if (v) out->ssh_timeout_s = static_cast<int32_t>(*v);
  return absl::OkStatus();
}
}  // namespace

std::string ShellQuote(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string BinaryPath(const HostConfig& host) { return host.runtime_dir + "/bin/deepinfer"; }

int32_t ExpertParallelSpec::NumRanks() const {
  int32_t n = 0;
  for (const EpHost& h : hosts) n += h.slots;
  return n;
}

absl::StatusOr<Recipe> ParseRecipe(std::string_view text) {
  constexpr const char* kCode = "bad_recipe";
  DI_ASSIGN_OR_RETURN(util::Json json, ParseConfigObject(text, kCode, "recipe", kRecipeFormat));
  Section top(json, "", kCode);
  DI_RETURN_IF_ERROR(
      top.OnlyKeys({"format", "name", "architecture", "model", "deepinfer", "serve", "comment"}));
  Recipe r;
  DI_RETURN_IF_ERROR(top.String("name", true, &r.name));
  DI_RETURN_IF_ERROR(top.String("architecture", true, &r.architecture));
  if (!MatchesCharset(r.architecture, "_-")) {
    return top.Error("architecture", "must look like `uname -m` (x86_64, aarch64)");
  }

  DI_ASSIGN_OR_RETURN(Section model, top.Object("model"));
  DI_RETURN_IF_ERROR(model.OnlyKeys({"id", "revision", "file", "tokenizer", "comment"}));
  DI_RETURN_IF_ERROR(model.String("id", true, &r.model_id));
  DI_RETURN_IF_ERROR(model.String("revision", true, &r.model_revision));
  DI_RETURN_IF_ERROR(model.String("file", true, &r.model_file));
  if (r.model_file != "." && !util::IsSafeRelativePath(r.model_file)) {
    return model.Error("file", "must be a relative path inside the model folder, or \".\"");
  }
  DI_RETURN_IF_ERROR(model.String("tokenizer", false, &r.tokenizer_file));
  if (!r.tokenizer_file.empty() && !util::IsSafeRelativePath(r.tokenizer_file)) {
    return model.Error("tokenizer", "must be a relative path inside the model folder");
  }

  DI_ASSIGN_OR_RETURN(Section binary, top.Object("deepinfer"));
  DI_RETURN_IF_ERROR(binary.OnlyKeys({"version", "sha256", "docker_image", "comment"}));
  DI_RETURN_IF_ERROR(binary.String("version", true, &r.deepinfer_version));
  if (!MatchesCharset(r.deepinfer_version, ".-+_")) {
    return binary.Error("version", "must be a plain version string");
  }
  DI_RETURN_IF_ERROR(binary.String("sha256", true, &r.binary_sha256));
  if (!IsHex64(r.binary_sha256)) {
    return binary.Error("sha256", "must be 64 lower-case hex digits");
  }
  DI_RETURN_IF_ERROR(binary.String("docker_image", false, &r.docker_image));
  if (!r.docker_image.empty() && (r.docker_image.find("@sha256:") == std::string::npos ||
                                  !MatchesCharset(r.docker_image, "._-/:@"))) {
    return binary.Error("docker_image", "must be pinned by digest (name@sha256:...)");
  }

  DI_ASSIGN_OR_RETURN(Section serve, top.Object("serve"));
  for (auto it = serve.json().begin(); it != serve.json().end(); ++it) {
    bool known = it.key() == "comment" ||
                 std::any_of(std::begin(kServeParams), std::end(kServeParams),
                             [&](const ServeParam& p) { return it.key() == p.key; });
    if (!known) {
      return serve.Error(it.key(),
                         "not a `deepinfer serve` parameter a recipe may pin (host and "
                         "port come from the host file)");
    }
  }
  if (!serve.Has("served_model_name")) return serve.Error("served_model_name", "required");
  for (const ServeParam& p : kServeParams) {
    if (!serve.Has(p.key)) continue;
    switch (p.type) {
      case ParamType::kInt: {
        std::optional<int64_t> v;
        DI_RETURN_IF_ERROR(serve.Int(p.key, false, p.min, p.max, &v));
        r.serve_flags.push_back({p.flag, std::to_string(*v)});
        if (std::string(p.key) == "threads") r.threads = static_cast<int32_t>(*v);
        if (std::string(p.key) == "data_parallel_size") {
          r.data_parallel_size = static_cast<int32_t>(*v);
        }
        break;
      }
      case ParamType::kSeconds: {
        const util::Json& v = serve.json()[p.key];
        if (!v.is_number() || !(v.get<double>() >= p.min && v.get<double>() <= p.max)) {
          return serve.Error(p.key, fmt::format("must be a number of seconds between {} and {}",
                                                p.min, p.max));
        }
        r.serve_flags.push_back({p.flag, fmt::format("{}", v.get<double>())});
        break;
      }
      case ParamType::kUint: {
        const util::Json& v = serve.json()[p.key];
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
          return serve.Error(p.key, "must be a non-negative integer");
        }
        r.serve_flags.push_back({p.flag, std::to_string(v.get<uint64_t>())});
        break;
      }
      case ParamType::kSize: {
        std::string v;
        DI_RETURN_IF_ERROR(serve.String(p.key, true, &v));
        size_t digits = v.find_first_not_of("0123456789.");
        std::string unit = digits == std::string::npos ? "" : v.substr(digits);
        if (digits == 0 || unit.size() > 3 || !MatchesCharset(unit, "")) {
          return serve.Error(p.key, "must be a size such as \"2GiB\" or \"512MiB\"");
        }
        r.serve_flags.push_back({p.flag, v});
        break;
      }
      case ParamType::kName: {
        std::string v;
        DI_RETURN_IF_ERROR(serve.String(p.key, true, &v));
        if (v.size() > 128 || !MatchesCharset(v, "._:/-")) {
          return serve.Error(p.key, "must be 1-128 characters of [A-Za-z0-9._:/-]");
        }
        r.serve_flags.push_back({p.flag, v});
        break;
      }
      case ParamType::kEnableFlag: {
        const util::Json& v = serve.json()[p.key];
        if (!v.is_boolean()) return serve.Error(p.key, "must be true or false");
        if (!v.get<bool>()) r.serve_flags.push_back({p.flag, ""});
        if (std::string(p.key) == "prefix_caching") r.prefix_caching = v.get<bool>();
        break;
      }
    }
  }
  return r;
}

absl::StatusOr<HostConfig> ParseHost(std::string_view text) {
  constexpr const char* kCode = "bad_host";
  DI_ASSIGN_OR_RETURN(util::Json json, ParseConfigObject(text, kCode, "host file", kHostFormat));
  Section top(json, "", kCode);
  DI_RETURN_IF_ERROR(
      top.OnlyKeys({"format", "instance", "port", "paths", "devices", "warmup", "pd",
                    "expert_parallel", "comment"}));
  HostConfig h;
  DI_RETURN_IF_ERROR(top.String("instance", true, &h.instance));
  if (!IsName(h.instance)) {
    return top.Error("instance",
                     "must be 1-63 characters of [A-Za-z0-9_.-], starting with a "
                     "letter or digit");
  }
  std::optional<int64_t> port;
  DI_RETURN_IF_ERROR(top.Int("port", true, 1, 65535, &port));
  h.port = static_cast<int32_t>(*port);

  DI_ASSIGN_OR_RETURN(Section paths, top.Object("paths"));
  DI_RETURN_IF_ERROR(
      paths.OnlyKeys({"model", "runtime", "artifacts", "prefix_checkpoints", "comment"}));
  DI_RETURN_IF_ERROR(paths.String("model", true, &h.model_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "model", h.model_dir));
  DI_RETURN_IF_ERROR(paths.String("runtime", true, &h.runtime_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "runtime", h.runtime_dir));
  DI_RETURN_IF_ERROR(paths.String("artifacts", true, &h.artifacts_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "artifacts", h.artifacts_dir));
  DI_RETURN_IF_ERROR(top.String("warmup", false, &h.warmup_file));
  if (!h.warmup_file.empty()) DI_RETURN_IF_ERROR(CheckAbsolutePath(top, "warmup", h.warmup_file));

  DI_ASSIGN_OR_RETURN(Section devices, top.Object("devices"));
  DI_RETURN_IF_ERROR(ParseDevices(devices, &h.devices));
  DI_RETURN_IF_ERROR(paths.String("prefix_checkpoints", false, &h.prefix_checkpoint_dir));
  if (!h.prefix_checkpoint_dir.empty()) {
    DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "prefix_checkpoints", h.prefix_checkpoint_dir));
  }
  if (top.Has("pd")) {
    DI_ASSIGN_OR_RETURN(Section pd, top.Object("pd"));
    DI_RETURN_IF_ERROR(ParsePd(pd, &h.pd));
  }
  if (top.Has("expert_parallel")) {
    DI_ASSIGN_OR_RETURN(Section ep, top.Object("expert_parallel"));
    DI_RETURN_IF_ERROR(ParseExpertParallel(ep, &h.expert_parallel));
  }
  return h;
}

std::string InstanceJson(const Recipe& recipe, const HostConfig& host, Launcher launcher,
                         const std::string& script_path, const std::string& script_sha256) {
  util::Json out = util::Json{{"format", kInstanceFormat},
                              {"name", host.instance},
                              {"script", script_path},
                              {"script_sha256", script_sha256},
                              {"binary", BinaryPath(host)},
                              {"binary_sha256", recipe.binary_sha256},
                              {"port", host.port},
                              {"artifacts", host.artifacts_dir},
                              {"launcher", launcher == Launcher::kDocker ? "docker" : "plain"},
                              {"device_kind", host.devices.kind}};
  return util::DumpJson(out) + "\n";
}

std::vector<std::string> PreflightCheckNames(const HostConfig& host, Launcher launcher) {
  std::vector<std::string> names = {"architecture", "devices",      "paths",
                                    "nesting",      "model_access", "artifacts",
                                    "port",         "instance",     "binary"};
  if (launcher == Launcher::kDocker) names.push_back("docker_image");
  if (!host.prefix_checkpoint_dir.empty() || !host.pd.role.empty()) {
    names.push_back("checkpoints");
  }
  if (!host.expert_parallel.hosts.empty()) {
    names.push_back("ep_launch");
    names.push_back("ep_host");  // one line per host
  }
  return names;
}

namespace {

bool HasFlag(const Recipe& recipe, const std::string& flag) {
  return std::any_of(recipe.serve_flags.begin(), recipe.serve_flags.end(),
                     [&](const auto& f) { return f.first == flag; });
}

absl::Status CheckExpertParallel(const Recipe& recipe, const HostConfig& host,
                                 Launcher launcher) {
  if (host.expert_parallel.hosts.empty()) {
    if (HasFlag(recipe, "--expert-parallel-timeout")) {
      return InvalidArgumentError(util::codes::kBadRecipe,
                                  "serve.expert_parallel_timeout: needs the host file's "
                                  "expert_parallel section");
    }
    return absl::OkStatus();
  }
  if (launcher == Launcher::kDocker) {
    return InvalidArgumentError(util::codes::kBadHost,
                                "expert_parallel: renders for the plain launcher only (mpirun "
                                "starts the ranks)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDeployment(const Recipe& recipe, const HostConfig& host, Launcher launcher) {
  if (launcher == Launcher::kDocker) {
    if (recipe.docker_image.empty()) {
      return InvalidArgumentError(util::codes::kBadRecipe,
                                  "deepinfer.docker_image is required for --launcher docker");
    }
    for (const std::string* p :
         {&host.model_dir, &host.runtime_dir, &host.artifacts_dir, &host.warmup_file,
          &host.prefix_checkpoint_dir, &host.pd.checkpoint_dir}) {
      if (p->find_first_of(",\"") != std::string::npos) {
        return InvalidArgumentError(
            util::codes::kBadHost,
            fmt::format("{}: docker bind mounts cannot take ',' or '\"'", *p));
      }
    }
  }
  DI_RETURN_IF_ERROR(CheckExpertParallel(recipe, host, launcher));
  const bool checkpoints = !host.prefix_checkpoint_dir.empty() || !host.pd.role.empty();
  for (const char* flag : {"--checkpoint-min-tokens", "--checkpoint-max-bytes"}) {
    if (!checkpoints && HasFlag(recipe, flag)) {
      return InvalidArgumentError(
          util::codes::kBadRecipe,
          fmt::format("serve: {} needs checkpoints: the host file's paths.prefix_checkpoints "
                      "or pd",
                      flag));
    }
  }
  if (!host.pd.role.empty()) {
    if (!host.prefix_checkpoint_dir.empty()) {
      return InvalidArgumentError(util::codes::kBadHost,
                                  "pd: a P/D role keeps its checkpoints in pd.checkpoint_dir; "
                                  "drop paths.prefix_checkpoints");
    }
    if (!recipe.prefix_caching) {
      return InvalidArgumentError(util::codes::kBadHost,
                                  "pd: a P/D role needs the prefix cache (the recipe's "
                                  "serve.prefix_caching is false)");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> MpirunArgs(const Recipe& recipe, const HostConfig& host,
                                    const std::vector<std::string>& serve_args,
                                    const std::string& model_arg) {
  const ExpertParallelSpec& ep = host.expert_parallel;
  std::vector<std::string> out = {"--bind-to", "none"};
  if (ep.transport == "tcp") {
    out.insert(out.end(), {"--mca", "pml", "ob1", "--mca", "btl", ShellQuote("tcp,vader,self")});
    if (!ep.network.empty()) {
      out.insert(out.end(), {"--mca", "btl_tcp_if_include", ShellQuote(ep.network)});
    }
  } else if (ep.transport == "ucx") {
    out.insert(out.end(), {"--mca", "pml", "ucx"});
    if (!ep.ucx_devices.empty()) {
      out.insert(out.end(), {"-x", ShellQuote("UCX_NET_DEVICES=" + ep.ucx_devices)});
    }
  }
  if (!ep.network.empty()) {
    out.insert(out.end(), {"--mca", "oob_tcp_if_include", ShellQuote(ep.network)});
  }
  // One command per host: its binary, model folder and threads.
  auto Command = [&](const EpHost& h) {
    const std::string& runtime = h.runtime_dir.empty() ? host.runtime_dir : h.runtime_dir;
    const std::string& model_dir = h.model_dir.empty() ? host.model_dir : h.model_dir;
    std::vector<std::string> cmd = {ShellQuote(runtime + "/bin/deepinfer")};
    cmd.insert(cmd.end(), serve_args.begin(), serve_args.end());
    cmd.push_back("--model");
    cmd.push_back(ShellQuote(model_arg.empty() ? model_dir : model_dir + "/" + model_arg));
    int32_t threads = h.threads >= 0 ? h.threads : recipe.threads;
    if (h.threads >= 0 || HasFlag(recipe, "--threads")) {
      cmd.push_back("--threads");
      cmd.push_back(std::to_string(threads));
    }
    return cmd;
  };
  const std::vector<std::string> first = Command(ep.hosts[0]);
  bool same = std::all_of(ep.hosts.begin(), ep.hosts.end(),
                          [&](const EpHost& h) { return Command(h) == first; });
  if (same) {
    std::vector<std::string> list;
    for (const EpHost& h : ep.hosts) list.push_back(fmt::format("{}:{}", h.address, h.slots));
    out.insert(out.end(), {"--host", ShellQuote(fmt::format("{}", fmt::join(list, ","))), "-np",
                           std::to_string(ep.NumRanks())});
    out.insert(out.end(), first.begin(), first.end());
    return out;
  }
  for (size_t i = 0; i < ep.hosts.size(); ++i) {
    const EpHost& h = ep.hosts[i];
    if (i > 0) out.push_back(":");
    out.insert(out.end(), {"-np", std::to_string(h.slots), "--host",
                           ShellQuote(fmt::format("{}:{}", h.address, h.slots))});
    std::vector<std::string> cmd = Command(h);
    out.insert(out.end(), cmd.begin(), cmd.end());
  }
  return out;
}

}  // namespace deepinfer::tools
