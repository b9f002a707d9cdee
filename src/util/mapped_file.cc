#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::util {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return NotFoundError(codes::kFileNotFound, absl::StrCat("no such file: ", path));
    return InternalError(codes::kIoError,
                         absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return InternalError(codes::kIoError, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(codes::kNotAFile, absl::StrCat("not a regular file: ", path));
  }
  size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return InternalError(codes::kIoError,
                           absl::StrCat("cannot mmap ", path, ": ", std::strerror(errno)));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps its own reference to the file.
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents, bool overwrite,
                                 const FileMode& mode) {
  if (!overwrite && ::access(path.c_str(), F_OK) == 0) {
    return MakeError(absl::StatusCode::kAlreadyExists, codes::kFileExists,
                     absl::StrCat("refusing to overwrite ", path));
  }
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  // With an explicit mode, created private and then given the exact bits (umask aside).
  int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode.mode >= 0 ? 0600 : 0644);
  if (fd < 0)
    return InternalError(codes::kIoError,
                         absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  if (mode.uid >= 0 || mode.gid >= 0) {
    (void)::fchown(fd, static_cast<uid_t>(mode.uid), static_cast<gid_t>(mode.gid));
  }
  if (mode.mode >= 0 && ::fchmod(fd, static_cast<mode_t>(mode.mode & 07777)) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return InternalError(codes::kIoError, absl::StrCat("chmod failed: ", tmp));
  }
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(tmp.c_str());
      return InternalError(codes::kIoError, absl::StrCat("write failed: ", tmp));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return InternalError(codes::kIoError, absl::StrCat("fsync failed: ", tmp));
  }
  if (!overwrite) {
    // link() fails if the target appeared meanwhile, so a concurrent writer is never clobbered.
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      ::unlink(tmp.c_str());
      if (err == EEXIST) {
        return MakeError(absl::StatusCode::kAlreadyExists, codes::kFileExists,
                         absl::StrCat("refusing to overwrite ", path));
      }
      return InternalError(codes::kIoError, absl::StrCat("cannot create ", path));
    }
    ::unlink(tmp.c_str());
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return InternalError(codes::kIoError, absl::StrCat("rename failed: ", path));
  }
  std::string dir =
      path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  if (dir.empty()) dir.assign(1, '.');  // not = ".": GCC 12 -Wrestrict false positive
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (::access(path.c_str(), F_OK) != 0)
      return NotFoundError(codes::kFileNotFound, absl::StrCat("no such file: ", path));
    return InternalError(codes::kIoError, absl::StrCat("cannot read ", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> ReadGzipFile(const std::string& path) {
  if (!std::filesystem::exists(path)) return NotFoundError(codes::kFileNotFound, path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return DataLossError(codes::kBadGzip, "cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  const bool failed = n < 0;
  gzclose(f);
  if (failed) return DataLossError(codes::kBadGzip, "cannot decompress " + path);
  return out;
}

}  // namespace deepinfer::util
