#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace deepinfer::util {

// A read-only memory map of a whole file. Weights are used in place from the map, never copied.
//
// Errors: NotFound "file_not_found" when the path does not exist; InvalidArgument "not_a_file"
//   for a directory; Internal "io_error" when open/fstat/mmap fail.
// Threads: immutable after Open; safe to read from any thread.
// Lifetime: the mapping lives as long as the object; views into data() die with it.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size_bytes)
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_bytes_;
};

// Owner and permission bits a file gets before it appears under its name.
struct FileMode {
  int mode = -1;  // permission bits (07777 mask); -1: 0644 less the process umask
  int uid = -1;   // -1: the writer's; a chown that is not permitted is ignored
  int gid = -1;
};

// Writes `contents` to `path` atomically: a temp file in the same folder, fsync, rename, fsync of
// the folder. When `overwrite` is false and `path` exists, fails with AlreadyExists
// "file_exists" and leaves it untouched. The temp file gets `mode` before the rename, so the
// file is never visible with other permissions and watchers see one change.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 bool overwrite = true, const FileMode& mode = {});

// Reads a whole file. Errors: NotFound "file_not_found", Internal "io_error".
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Reads and decompresses a whole gzip file (test goldens).
// Errors: NotFound "file_not_found", DataLoss "bad_gzip".
absl::StatusOr<std::string> ReadGzipFile(const std::string& path);

}  // namespace deepinfer::util
