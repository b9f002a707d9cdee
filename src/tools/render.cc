#include "tools/render.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "fmt/format.h"
#include "util/json.h"
#include "util/paths.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

using util::Json;

constexpr char kRecipeFormat[] = "deepinfer-recipe/1";
constexpr char kHostFormat[] = "deepinfer-host/1";
constexpr char kInstanceFormat[] = "deepinfer-instance/1";

enum class ParamType { kInt, kUint, kSize, kName, kEnableFlag };

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
      top.OnlyKeys({"format", "instance", "port", "paths", "devices", "warmup", "comment"}));
  HostConfig h;
  DI_RETURN_IF_ERROR(top.String("instance", true, &h.instance));
  if (h.instance.size() > 63 || !MatchesCharset(h.instance, "_.-") || h.instance[0] == '.' ||
      h.instance[0] == '-' || h.instance[0] == '_') {
    return top.Error("instance",
                     "must be 1-63 characters of [A-Za-z0-9_.-], starting with a "
                     "letter or digit");
  }
  std::optional<int64_t> port;
  DI_RETURN_IF_ERROR(top.Int("port", true, 1, 65535, &port));
  h.port = static_cast<int32_t>(*port);

  DI_ASSIGN_OR_RETURN(Section paths, top.Object("paths"));
  DI_RETURN_IF_ERROR(paths.OnlyKeys({"model", "runtime", "artifacts", "comment"}));
  DI_RETURN_IF_ERROR(paths.String("model", true, &h.model_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "model", h.model_dir));
  DI_RETURN_IF_ERROR(paths.String("runtime", true, &h.runtime_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "runtime", h.runtime_dir));
  DI_RETURN_IF_ERROR(paths.String("artifacts", true, &h.artifacts_dir));
  DI_RETURN_IF_ERROR(CheckAbsolutePath(paths, "artifacts", h.artifacts_dir));
  DI_RETURN_IF_ERROR(top.String("warmup", false, &h.warmup_file));
  if (!h.warmup_file.empty()) DI_RETURN_IF_ERROR(CheckAbsolutePath(top, "warmup", h.warmup_file));

  DI_ASSIGN_OR_RETURN(Section devices, top.Object("devices"));
  DI_RETURN_IF_ERROR(devices.OnlyKeys(
      {"kind", "ids", "max_load", "max_utilization_pct", "max_memory_used_mib", "comment"}));
  DI_RETURN_IF_ERROR(devices.String("kind", true, &h.devices.kind));
  // Any kind renders (the script's probe refuses kinds it does not know), but it must be a
  // plain word so it can sit in the script.
  if (h.devices.kind.size() > 32 || !MatchesCharset(h.devices.kind, "_-")) {
    return devices.Error("kind", "must be a plain word (cpu, nvidia)");
  }
  if (devices.Has("ids")) {
    const util::Json& ids = devices.json()["ids"];
    if (!ids.is_array()) return devices.Error("ids", "must be an array of device indices");
    for (const util::Json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 1023) {
        return devices.Error("ids", "must hold integers between 0 and 1023");
      }
      h.devices.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (h.devices.kind == "nvidia" && h.devices.ids.empty()) {
    return devices.Error("ids", "required for nvidia devices");
  }
  if (devices.Has("max_load")) {
    const util::Json& v = devices.json()["max_load"];
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      return devices.Error("max_load", "must be a non-negative number");
    }
    h.devices.max_load = v.get<double>();
  }
  std::optional<int64_t> v;
  DI_RETURN_IF_ERROR(devices.Int("max_utilization_pct", false, 0, 100, &v));
  if (v) h.devices.max_utilization_pct = static_cast<int32_t>(*v);
  v.reset();
  DI_RETURN_IF_ERROR(devices.Int("max_memory_used_mib", false, 0, 1 << 30, &v));
  if (v) h.devices.max_memory_used_mib = static_cast<int32_t>(*v);
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

std::vector<std::string> PreflightCheckNames(Launcher launcher) {
  std::vector<std::string> names = {"architecture", "devices",      "paths",
                                    "nesting",      "model_access", "artifacts",
                                    "port",         "instance",     "binary"};
  if (launcher == Launcher::kDocker) names.push_back("docker_image");
  return names;
}

}  // namespace deepinfer::tools
