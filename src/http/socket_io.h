#pragma once

// Blocking socket I/O with deadlines and a cancel check, shaped as a Beast SyncReadStream /
// SyncWriteStream, plus TCP listen and connect. `serve` reads its clients through it, and
// both sides of the gateway (clients and backends) do, so one loop decides how fast a gone
// client closes its backend connection.

#include <poll.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "boost/asio/buffer.hpp"
#include "boost/system/error_code.hpp"

namespace deepinfer::http {

using Clock = std::chrono::steady_clock;

// Beast's SyncReadStream reads over a stream's own `size_t Read(char* data, size_t size,
// boost::system::error_code& ec)` (bytes read; 0 with ec set on an error): read_some fills the
// first non-empty buffer of the sequence. FdStream and TlsStream derive from it (CRTP).
template <class Stream>
class SyncReadSome {
 public:
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b(*it);
      if (b.size() > 0) {
        return static_cast<Stream*>(this)->Read(static_cast<char*>(b.data()), b.size(), ec);
      }
    }
    ec = {};
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    return read_some(buffers, ec);
  }
};

// Waits for one condition of a blocking socket in slices of `slice_ms`, checking `cancel` between
// slices: the time a cancellation takes to be seen is at most one slice.
// Threads: one thread at a time. Lifetime: does not own the fd.
class FdStream : public SyncReadSome<FdStream> {
 public:
  explicit FdStream(int fd) : fd_(fd) {}

  int fd() const { return fd_; }
  // Each read waits at most this long for its first byte. Units: ms (<= 0: no limit).
  void set_read_timeout_ms(int ms) { read_timeout_ms_ = ms; }
  // Each write waits at most this long for the socket to accept bytes. Units: ms.
  void set_write_timeout_ms(int ms) { write_timeout_ms_ = ms; }
  // Called between wait slices of reads and writes; true aborts with operation_aborted.
  void set_cancel(std::function<bool()> cancel) { cancel_ = std::move(cancel); }
  // Whether writes also stop on `cancel` (reads always do). A server that drains lets a
  // response in progress finish, so its client writes ignore the stop flag.
  void set_cancel_writes(bool on) { cancel_writes_ = on; }
  // Units: ms.
  void set_slice_ms(int ms) { slice_ms_ = ms; }
  // Another socket whose hang-up (POLLRDHUP/POLLHUP/POLLERR) ends a wait at once, so that
  // `cancel` is consulted the moment that peer leaves rather than at the next slice. The
  // proxy watches the client's socket while it waits on the backend's.
  void set_watch_fd(int fd) { watch_fd_ = fd; }
  // The next read polls before its first recv: for reads that cannot find bytes yet (the next
  // request on an idle keep-alive connection, an answer to a request just sent), the recv that
  // would fail with EAGAIN is a wasted syscall.
  void WaitBeforeNextRead() { wait_first_ = true; }
  // Waits (read timeout, cancel) until the socket is readable. False with ec on timeout
  // (timed_out), cancel (operation_aborted) or error.
  bool WaitReadable(boost::system::error_code& ec) {
    return WaitFor(POLLIN, read_timeout_ms_, true, ec);
  }
  // A time after which reads fail with timed_out, however recently bytes arrived (nullopt:
  // none). Bounds a whole message that a peer dribbles a byte at a time.
  void set_read_deadline(std::optional<Clock::time_point> deadline) { read_deadline_ = deadline; }
  // Called when a read is about to wait for bytes that are not there yet; false aborts the read
  // with operation_aborted. The proxy flushes a held response head here, so that a head and the
  // body bytes that arrive with it leave in one send, yet a head never waits on a slow body.
  void set_before_read_wait(std::function<bool()> hook) { before_read_wait_ = std::move(hook); }

  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    iovec iov[16];
    int count = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && count < 16; ++it) {
      boost::asio::const_buffer b(*it);
      if (b.size() == 0) continue;
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      ++count;
    }
    if (count == 0) {
      ec = {};
      return 0;
    }
    return Write(iov, count, ec);
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    boost::system::error_code ec;
    return write_some(buffers, ec);
  }

  // Writes all of `data`. Returns false on error, timeout or cancel.
  bool WriteAll(std::string_view data);
  // Writes all of the `count` buffers of `iov` (at most 16), in as few sends as the socket
  // allows. `iov` is consumed. Returns false on error, timeout or cancel.
  bool WriteAllV(iovec* iov, int count);
  // Reads what is available now or within `timeout_ms`. Returns bytes read; 0 with ec set on
  // end of stream (eof), timeout (timed_out), cancel (operation_aborted) or error.
  size_t Read(char* data, size_t size, boost::system::error_code& ec);
  size_t Write(iovec* iov, int count, boost::system::error_code& ec);

  // True when the peer closed its sending side or the connection failed. Never blocks.
  // Cost: one poll() and at most one recv(MSG_PEEK).
  bool PeerClosed() const;

 private:
  // Waits for `events`; false with ec on timeout, cancel or error. timeout_ms <= 0: no limit.
  bool WaitFor(short events, int timeout_ms, bool use_cancel, boost::system::error_code& ec);

  int fd_;
  int read_timeout_ms_ = 60000;
  std::optional<Clock::time_point> read_deadline_;
  int write_timeout_ms_ = 60000;
  int slice_ms_ = 20;
  int watch_fd_ = -1;
  bool cancel_writes_ = true;
  bool wait_first_ = false;
  std::function<bool()> cancel_;
  std::function<bool()> before_read_wait_;
};

// Binds a listening TCP socket (SO_REUSEADDR, close-on-exec, backlog 1024) to host:port; port 0
// picks a free port, which *bound_port receives. Returns the socket.
// Errors: InvalidArgument "bad_address" (bad port, unresolvable host); Unavailable
//   "bind_failed".
absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port);

// Opens a TCP connection to host:port (numeric or resolvable name) within `timeout_ms`, with
// TCP_NODELAY and close-on-exec. The returned fd is in blocking mode; the caller closes it.
// Errors: Unavailable "connect_failed" (refused, unreachable, resolution failure),
//   DeadlineExceeded "connect_timeout".
absl::StatusOr<int> ConnectTcp(const std::string& host, int port, int timeout_ms);

// Closes `fd` so that the peer sees the end at once: shutdown(SHUT_RDWR), then close.
void CloseNow(int fd);

// Reads and throws away what the client is still sending (at most `max_bytes`, for at most
// `timeout_ms`), so that closing the socket after an early error answer does not reset the
// connection before the client read the answer.
void DrainInput(int fd, int64_t max_bytes, int timeout_ms);

// True for the ways an HTTP connection ends that need no answer: the client closed an idle
// keep-alive connection, went away mid-request, or the server is stopping.
bool IsQuietHttpClose(const boost::system::error_code& ec);

}  // namespace deepinfer::http
