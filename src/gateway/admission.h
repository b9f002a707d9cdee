#pragma once

// The admission file: which backends accept new requests. It fails closed: a missing, empty or
// invalid file admits nothing, while requests already in flight finish (draining). Format:
//
//   {"admit": ["http://127.0.0.1:19001", "http://127.0.0.1:19002"]}
//   {"enabled_ports": [19001, 19002, 19008]}   (the operator documents' shape)
//
// An "admit" entry is a backend URL as given to --backend (compared after normalization); an
// "enabled_ports" entry is a port and names the configured backend on a loopback host
// (127.0.0.1, localhost, ::1) at that port (the SSH tunnel ports). An entry that names no
// configured backend makes the whole file invalid: a file written for another pool must not
// half-open this one. A file holds exactly one of the two fields.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/backends.h"

namespace deepinfer::gateway {

struct Admission {
  bool open = false;           // at least one backend admitted
  std::vector<bool> admitted;  // per backend index
  std::string reason;          // "ok", "file_missing", "file_empty", "no_backend_listed",
                               // "invalid: <why>"
};

// Decides admission from the file's contents (`text` is nullopt when the file is missing or
// unreadable).
// Cost: O(size of text + entries x backends).
Admission ParseAdmission(std::optional<std::string_view> text,
                         const std::vector<BackendAddress>& backends);

}  // namespace deepinfer::gateway
