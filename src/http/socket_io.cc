#include "http/socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "boost/asio/error.hpp"
#include "boost/beast/http/error.hpp"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::http {

namespace net = boost::asio;
using boost::system::error_code;

bool FdStream::WaitFor(short events, int timeout_ms, bool use_cancel, error_code& ec) {
  const bool bounded = timeout_ms > 0;
  // The clock is read only once a wait outlasts its first slice (most waits end sooner; a clock
  // read costs tens of ns here and a request has several waits). The first slice is counted as
  // spent in full when it timed out and not at all when it was interrupted, so a limit holds to
  // within one slice.
  std::optional<Clock::time_point> deadline;
  int first_slice_ms = -1;  // the first slice's length, until the deadline is known
  const bool watch = use_cancel && watch_fd_ >= 0;
  // With a watched peer, a hang-up already ends the first poll at once, so the first cancel
  // check (a poll of its own in the proxy) is skipped: one syscall less per proxied request.
  bool check = !watch;
  while (true) {
    if (check && use_cancel && cancel_ && cancel_()) {
      ec = net::error::operation_aborted;
      return false;
    }
    check = true;
    int slice = slice_ms_;
    if (bounded && first_slice_ms < 0) {
      slice = std::min(timeout_ms, slice_ms_);
      first_slice_ms = slice;
    } else if (bounded) {
      if (!deadline) {
        deadline = Clock::now() + std::chrono::milliseconds(timeout_ms - first_slice_ms);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) {
        ec = net::error::timed_out;
        return false;
      }
      slice = static_cast<int>(std::min<int64_t>(left.count(), slice_ms_));
    }
    pollfd p[2] = {{fd_, events, 0}, {watch_fd_, POLLRDHUP, 0}};
    int r = ::poll(p, watch ? 2 : 1, std::max(slice, 1));
    // An interrupted first slice counts as not spent.
    if (r != 0 && !deadline && first_slice_ms > 0) first_slice_ms = 0;
    if (r > 0 && p[0].revents != 0) return true;
    if (r > 0 && watch && p[1].revents != 0) {
      // The watched peer hung up: cancel now if the check agrees, else wait out the slice so a
      // condition that stays raised cannot spin this loop.
      if (cancel_ && cancel_()) {
        ec = net::error::operation_aborted;
        return false;
      }
      ::poll(p, 1, std::max(slice, 1));
    }
    if (r < 0 && errno != EINTR) {
      ec = error_code(errno, boost::system::system_category());
      return false;
    }
  }
}

size_t FdStream::Read(char* data, size_t size, error_code& ec) {
  // Bytes already there are taken without a poll (and without a cancel check: a gone client is
  // also seen by the next write to it, or by the next wait).
  bool wait = wait_first_;
  wait_first_ = false;
  while (true) {
    int timeout_ms = read_timeout_ms_;
    if (read_deadline_) {
      const int64_t left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*read_deadline_ - Clock::now())
              .count();
      if (left <= 0) {
        ec = net::error::timed_out;
        return 0;
      }
      timeout_ms = static_cast<int>(timeout_ms > 0 ? std::min<int64_t>(timeout_ms, left) : left);
    }
    if (wait) {
      if (before_read_wait_ && !before_read_wait_()) {
        ec = net::error::operation_aborted;
        return 0;
      }
      if (!WaitFor(POLLIN, timeout_ms, true, ec)) return 0;
    }
    wait = true;
    ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
    if (n > 0) {
      ec = {};
      return static_cast<size_t>(n);
    }
    if (n == 0) {
      ec = net::error::eof;
      return 0;
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    ec = error_code(errno, boost::system::system_category());
    return 0;
  }
}

size_t FdStream::Write(iovec* iov, int count, error_code& ec) {
  bool wait = false;
  while (true) {
    if (wait && !WaitFor(POLLOUT, write_timeout_ms_, cancel_writes_, ec)) return 0;
    wait = true;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      ec = {};
      return static_cast<size_t>(n);
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    ec = error_code(errno, boost::system::system_category());
    return 0;
  }
}

bool FdStream::WriteAll(std::string_view data) {
  while (!data.empty()) {
    iovec iov{const_cast<char*>(data.data()), data.size()};
    error_code ec;
    size_t n = Write(&iov, 1, ec);
    if (ec) return false;
    data.remove_prefix(n);
  }
  return true;
}

bool FdStream::WriteAllV(iovec* iov, int count) {
  while (count > 0 && iov[0].iov_len == 0) {
    ++iov;
    --count;
  }
  while (count > 0) {
    error_code ec;
    size_t n = Write(iov, std::min(count, 16), ec);
    if (ec) return false;
    while (count > 0 && n >= iov[0].iov_len) {
      n -= iov[0].iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + n;
      iov[0].iov_len -= n;
    }
    while (count > 0 && iov[0].iov_len == 0) {
      ++iov;
      --count;
    }
  }
  return true;
}

bool FdStream::PeerClosed() const {
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  int r = ::poll(&p, 1, 0);
  if (r <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError(util::codes::kBadAddress, fmt::format("Bad port {}.", port));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0) {
    return InvalidArgumentError(
        util::codes::kBadAddress,
        fmt::format("Cannot resolve host '{}': {}", host, gai_strerror(rc)));
  }
  int listen_fd = -1;
  std::string last_error = "no address";
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(result);
  if (listen_fd < 0) {
    return UnavailableError(util::codes::kBindFailed,
                            fmt::format("Cannot listen on {}:{}: {}", host, port, last_error));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return listen_fd;
}

absl::StatusOr<int> ConnectTcp(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0) {
    return UnavailableError(util::codes::kConnectFailed,
                            fmt::format("Cannot resolve {}: {}", host, gai_strerror(rc)));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last_error = "no address";
  bool timed_out = false;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLOUT, 0};
      int pr = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (pr <= 0) {
        timed_out = true;
        last_error = "timed out";
        ::close(fd);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    ::freeaddrinfo(result);
    return fd;
  }
  ::freeaddrinfo(result);
  std::string message = fmt::format("Cannot connect to {}:{}: {}", host, port, last_error);
  if (timed_out)
    return MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kConnectTimeout, message);
  return UnavailableError(util::codes::kConnectFailed, message);
}

void DrainInput(int fd, int64_t max_bytes, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[16384];
  int64_t total = 0;
  while (total < max_bytes) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    total += n;
  }
}

bool IsQuietHttpClose(const error_code& ec) {
  namespace beast_http = boost::beast::http;
  return ec == beast_http::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::timed_out || ec == net::error::operation_aborted ||
         ec == net::error::connection_reset || ec == beast_http::error::partial_message;
}

void CloseNow(int fd) {
  if (fd < 0) return;
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace deepinfer::http
