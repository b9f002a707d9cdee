#include "gateway/admission.h"

#include <algorithm>
#include <cctype>

#include "fmt/format.h"
#include "util/json.h"

namespace deepinfer::gateway {
namespace {

Admission Closed(size_t n, std::string reason) {
  Admission a;
  a.admitted.assign(n, false);
  a.reason = std::move(reason);
  return a;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]";
}

}  // namespace

Admission ParseAdmission(std::optional<std::string_view> text,
                         const std::vector<BackendAddress>& backends) {
  const size_t n = backends.size();
  if (!text) return Closed(n, "file_missing");
  if (std::all_of(text->begin(), text->end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    return Closed(n, "file_empty");
  }
  auto json = util::ParseJson(*text);
  if (!json.ok()) return Closed(n, "invalid: not valid JSON");
  if (!json->is_object()) return Closed(n, "invalid: expected an object {\"admit\": [...]}");
  const bool by_port = json->contains("enabled_ports");
  if (json->size() != 1 || !(by_port || json->contains("admit"))) {
    return Closed(n, "invalid: expected exactly one field, \"admit\" or \"enabled_ports\"");
  }
  const char* field = by_port ? "enabled_ports" : "admit";
  const auto& list = (*json)[field];
  if (!list.is_array()) return Closed(n, fmt::format("invalid: \"{}\" must be an array", field));
  Admission a = Closed(n, "ok");
  for (size_t i = 0; i < list.size(); ++i) {
    if (by_port) {
      if (!list[i].is_number_integer() || list[i].get<int64_t>() < 1 ||
          list[i].get<int64_t>() > 65535) {
        return Closed(n, fmt::format("invalid: enabled_ports[{}] is not a port number", i));
      }
      // A port names the configured backend on this machine's loopback at that port (the
      // operator documents' tunnel ports).
      const int port = static_cast<int>(list[i].get<int64_t>());
      bool found = false;
      for (size_t b = 0; b < n; ++b) {
        if (backends[b].port() == port && IsLoopbackHost(backends[b].host())) {
          a.admitted[b] = true;
          found = true;
        }
      }
      if (!found) {
        return Closed(n, fmt::format("invalid: enabled_ports[{}] ({}) is not the port of a "
                                     "configured loopback backend",
                                     i, port));
      }
      continue;
    }
    if (!list[i].is_string())
      return Closed(n, fmt::format("invalid: admit[{}] is not a string", i));
    auto address = ParseBackendUrl(list[i].get<std::string>());
    if (!address.ok()) {
      return Closed(n, fmt::format("invalid: admit[{}] is not a backend URL", i));
    }
    auto it = std::find_if(backends.begin(), backends.end(), [&](const BackendAddress& b) {
      return b.origin() == address->origin();
    });
    if (it == backends.end()) {
      return Closed(n, fmt::format("invalid: admit[{}] ({}) is not a configured backend", i,
                                   address->origin()));
    }
    a.admitted[it - backends.begin()] = true;
  }
  a.open = std::any_of(a.admitted.begin(), a.admitted.end(), [](bool b) { return b; });
  if (!a.open) a.reason = "no_backend_listed";
  return a;
}

}  // namespace deepinfer::gateway
