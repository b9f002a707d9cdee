#include "http/server.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "absl/time/time.h"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "http/errors.h"
#include "http/http_reader.h"
#include "http/request_id.h"
#include "http/socket_io.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

namespace beast_http = boost::beast::http;

constexpr int kPollSliceMs = 200;
constexpr uint64_t kWakeId = 0;    // epoll data of the stop eventfd
constexpr uint64_t kListenId = 1;  // epoll data of the listening socket
constexpr int kStartWorkers = 2;
constexpr int kSweepMs = 1000;  // how often idle keep-alive connections are checked for expiry
// A spare worker leaves after this many sweep periods in a row without an event. Waiters are
// woken most recent first, so the spares at the bottom only ever serve bursts: with one second
// (the first version), a steady 5,000 req/s over 16 connections started and ended 11 threads a
// second, each start a clone, a stack mapping and a cold cache in the path of a request.
constexpr int kIdleExitSweeps = 10;
constexpr int kAcceptBatch = 64;
constexpr int kOutOfFdsPauseMs = 50;
// After an error answer to a bad request, what the client still sends is read and dropped for at
// most this long, so that the close does not reset the connection before the answer is read.
constexpr int kDrainMs = 2000;

// Raises the soft limit on open descriptors toward the hard one, so that `max_connections`
// clients (each a descriptor, plus its backend connection) fit: the usual soft limit, 1024, would
// otherwise run out first.
void RaiseFileLimit(int max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) * 2 + 256;
  rlim_t target = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < target) {
    limit.rlim_cur = target;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view ReasonPhrase(int status) {
  auto reason = beast_http::obsolete_reason(static_cast<beast_http::status>(status));
  if (reason.empty() || reason.front() == '<') return "Status";
  return std::string_view(reason.data(), reason.size());
}

class Writer : public ResponseWriter {
 public:
  Writer(FdStream& stream, const Request& request, const std::atomic<bool>* stopping,
         std::string_view server_name)
      : stream_(stream), request_(request), stopping_(stopping), server_name_(server_name) {}

  bool Respond(int status, const Headers& headers, std::string_view body) override {
    if (started_) return false;
    bool head = request_.method == "HEAD";
    Head(status, headers, body.size(), request_.keep_alive);
    return Send(head ? std::string_view() : body);
  }

  bool BeginBody(int status, const Headers& headers,
                 std::optional<uint64_t> content_length) override {
    return BeginBodyHeld(status, headers, content_length) && Flush();
  }

  bool BeginBodyHeld(int status, const Headers& headers,
                     std::optional<uint64_t> content_length) override {
    if (started_) return false;
    // RFC 9110 sections 6.4.1, 15.3.5 and 15.4.5: answers to HEAD, and 204 and 304 answers,
    // carry no body (a 304's Content-Length is that of the representation it stands for).
    bodiless_ = request_.method == "HEAD" || status == 204 || status == 304;
    chunked_ = !content_length && request_.version >= 11 && !bodiless_;
    // Without a length or chunked coding, the end of the body is the end of the connection.
    bool keep = request_.keep_alive && (content_length || chunked_ || bodiless_);
    remaining_ = bodiless_ ? std::nullopt : content_length;
    Head(status, headers, status == 204 ? std::nullopt : content_length, keep);
    return !failed_;
  }

  bool Flush() override { return pending_.empty() ? !failed_ : Send({}); }

  bool Write(std::string_view data) override {
    if (!started_ || failed_) return false;
    if (data.empty() || bodiless_) return true;
    if (remaining_) {
      // Never send more than announced: a backend that over-delivers must not desync keep-alive.
      if (data.size() > *remaining_) {
        failed_ = true;
        return false;
      }
      *remaining_ -= data.size();
    }
    if (!chunked_) return Send(data);
    char size_line[24];
    char* end = std::to_chars(size_line, size_line + 20, data.size(), 16).ptr;
    *end++ = '\r';
    *end++ = '\n';
    return Send(std::string_view(size_line, static_cast<size_t>(end - size_line)), data, "\r\n");
  }

  bool End() override {
    if (!started_ || failed_) return false;
    if (remaining_ && *remaining_ != 0) {
      failed_ = true;
      return false;
    }
    return chunked_ ? Send("0\r\n\r\n") : Flush();
  }

  void Abort() override {
    // A held head still goes out: the client sees a truncated answer, as without holding.
    if (!failed_) Flush();
    failed_ = true;
    keep_alive_ = false;
  }

  bool PeerClosed() override { return failed_ || stream_.PeerClosed(); }
  bool stopping() const override { return stopping_->load(std::memory_order_acquire); }
  bool started() const override { return started_; }
  int status() const override { return status_; }
  int client_fd() const override { return stream_.fd(); }
  std::string_view request_path() const override { return request_.path; }
  bool keep_alive() const { return keep_alive_ && !failed_; }

 private:
  // Builds the head into pending_ (sent with the next Send).
  void Head(int status, const Headers& headers, std::optional<uint64_t> length, bool keep) {
    started_ = true;
    status_ = status;
    keep_alive_ = keep && !stopping_->load();
    std::string& out = pending_;
    out.clear();
    out += request_.version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ";
    // to_chars, not snprintf: this runs once per answer (snprintf was 1 % of the CPU).
    char number[24];
    out.append(number, std::to_chars(number, number + sizeof(number), status).ptr);
    out += ' ';
    out += ReasonPhrase(status);
    out += "\r\n";
    if (!server_name_.empty()) {
      out += "Server: ";
      out += server_name_;
      out += "\r\n";
    }
    bool has_request_id = false, has_anthropic_id = false;
    for (const auto& [name, value] : headers) {
      out += name;
      out += ": ";
      out += value;
      out += "\r\n";
      has_request_id = has_request_id || boost::beast::iequals(name, "x-request-id");
      has_anthropic_id = has_anthropic_id || boost::beast::iequals(name, "request-id");
    }
    if (const std::string& id = log().request_id; !id.empty()) {
      if (!has_request_id) {
        out += "X-Request-Id: ";
        out += id;
        out += "\r\n";
      }
      // Anthropic's SDKs read their `request_id` from this header.
      if (!has_anthropic_id && IsAnthropicPath(request_.path)) {
        out += "request-id: ";
        out += id;
        out += "\r\n";
      }
    }
    if (length) {
      out += "Content-Length: ";
      out.append(number, std::to_chars(number, number + sizeof(number), *length).ptr);
      out += "\r\n";
    } else if (chunked_) {
      out += "Transfer-Encoding: chunked\r\n";
    }
    out += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }

  // Sends the held head (if any) and `a`, `b`, `c` in one send.
  bool Send(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
    if (failed_) return false;
    iovec iov[4] = {{pending_.data(), pending_.size()},
                    {const_cast<char*>(a.data()), a.size()},
                    {const_cast<char*>(b.data()), b.size()},
                    {const_cast<char*>(c.data()), c.size()}};
    if (!stream_.WriteAllV(iov, 4)) failed_ = true;
    pending_.clear();
    return !failed_;
  }

  FdStream& stream_;
  const Request& request_;
  const std::atomic<bool>* stopping_;
  const std::string_view server_name_;
  bool started_ = false;
  bool chunked_ = false;
  bool bodiless_ = false;  // HEAD, 204, 304: whatever is written is dropped
  bool keep_alive_ = false;
  bool failed_ = false;
  int status_ = 0;
  std::optional<uint64_t> remaining_;
  std::string pending_;  // a held head
};

HttpReadOptions ReadOptions(const ServerOptions& options) {
  HttpReadOptions read;
  read.max_body_bytes = options.max_request_bytes;
  read.idle_timeout_ms = options.idle_timeout_ms;
  read.io_timeout_ms = options.io_timeout_ms;
  read.header_timeout_ms = options.io_timeout_ms;
  read.called_when_readable = true;  // workers call Next once epoll reported the socket
  return read;
}

}  // namespace

struct Server::Connection {
  Connection(int fd_in, const ServerOptions& options, const std::atomic<bool>* stopping)
      : fd(fd_in), stream(fd_in), reader(stream, ReadOptions(options)) {
    stream.set_slice_ms(kPollSliceMs);
    stream.set_write_timeout_ms(options.io_timeout_ms);
    stream.set_cancel([stopping] { return stopping->load(std::memory_order_acquire); });
    stream.set_cancel_writes(false);
  }
  ~Connection() { ::close(fd); }

  const int fd;
  FdStream stream;
  HttpRequestReader reader;
  bool busy = false;     // a worker owns it (serves it or re-arms it); under Server::mu_
  bool pending = false;  // an event arrived while busy; its owner serves it; under Server::mu_
  int64_t idle_since_ms = 0;
};

Server::Server(const ServerOptions& options, Handler handler, Observer observer)
    : options_(options), handler_(std::move(handler)), observer_(std::move(observer)) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, Handler handler,
                                                      Observer observer) {
  std::unique_ptr<Server> server(new Server(options, std::move(handler), std::move(observer)));
  std::string body = ErrorBody(ApiErrorFromStatus(UnavailableError(
      util::codes::kTooManyConnections,
      fmt::format("The {} has too many open connections.", options.overload_subject))));
  server->overload_response_ = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\n{}Content-Type: application/json\r\n"
      "Retry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      options.server_name.empty() ? "" : fmt::format("Server: {}\r\n", options.server_name),
      body.size(), body);
  RaiseFileLimit(options.max_connections);
  DI_ASSIGN_OR_RETURN(const int listen_fd, ListenTcp(options.host, options.port, &server->port_));
  {
    // No worker runs yet; the lock is for the analysis. From here Stop closes both on every
    // path, the error returns below included.
    absl::MutexLock lock(&server->mu_);
    server->spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    server->listen_fd_ = listen_fd;
  }
  ::fcntl(listen_fd, F_SETFL, ::fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
  server->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  server->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event wake{EPOLLIN, {.u64 = kWakeId}};
  epoll_event listen{EPOLLIN | EPOLLONESHOT, {.u64 = kListenId}};
  if (server->epoll_fd_ < 0 || server->wake_fd_ < 0 ||
      ::epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->wake_fd_, &wake) != 0 ||
      ::epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, listen_fd, &listen) != 0) {
    return InternalError(util::codes::kEpollFailed, std::strerror(errno));
  }
  {
    absl::MutexLock lock(&server->mu_);
    for (int i = 0; i < kStartWorkers; ++i) server->StartWorker();
    if (server->workers_ == 0)
      return InternalError(util::codes::kThreadFailed, "No worker thread started.");
  }
  return server;
}

Server::~Server() {
  Stop(0);
  // Workers and the connections they serve use this object; busy ones end within their I/O
  // timeouts once stopping.
  absl::MutexLock lock(&mu_);
  while (workers_ != 0 || !connections_.empty()) changed_.Wait(&mu_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

int Server::num_connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

bool Server::Stop(int timeout_ms) {
  absl::MutexLock lock(&mu_);
  if (!stopping_.exchange(true, std::memory_order_acq_rel)) {
    if (listen_fd_ >= 0) {
      // Under mu_, which AcceptAll holds while it uses the socket.
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
    }
    CloseIdle(/*expired_only=*/false);
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));  // level-triggered: every worker sees it
  }
  const absl::Time deadline = absl::Now() + absl::Milliseconds(std::max(timeout_ms, 0));
  while (!connections_.empty() && !changed_.WaitWithDeadline(&mu_, deadline)) {
  }
  return connections_.empty();
}

void Server::StartWorker() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, options_.thread_stack_bytes);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, &Server::WorkerMain, this) == 0) ++workers_;
  pthread_attr_destroy(&attr);
}

void* Server::WorkerMain(void* arg) {
  auto* server = static_cast<Server*>(arg);
  server->WorkerLoop();
  // Notify under the lock: once the count reads 0 the destructor may free the server.
  absl::MutexLock lock(&server->mu_);
  --server->workers_;
  server->changed_.SignalAll();
  return nullptr;
}

void Server::WorkerLoop() {
  int idle_sweeps = 0;  // sweep periods in a row without an event
  for (;;) {
    epoll_event event{};
    waiting_workers_.fetch_add(1, std::memory_order_acq_rel);
    int n = ::epoll_wait(epoll_fd_, &event, 1, kSweepMs);
    const int still_waiting = waiting_workers_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if (stopping_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&mu_);
      CloseIdle(/*expired_only=*/false);  // ones handed back since Stop
      return;
    }
    const int64_t now = SteadyMillis();
    if (now - last_sweep_ms_.load(std::memory_order_relaxed) >= kSweepMs) {
      last_sweep_ms_.store(now, std::memory_order_relaxed);
      absl::MutexLock lock(&mu_);
      CloseIdle(/*expired_only=*/true);
    }
    // Only a worker that waited kIdleExitSweeps whole sweep periods for nothing leaves, so that
    // a busy server never churns threads.
    idle_sweeps = n == 0 ? idle_sweeps + 1 : 0;
    if (idle_sweeps >= kIdleExitSweeps && still_waiting >= options_.max_idle_threads) return;
    if (n <= 0 || event.data.u64 == kWakeId) continue;
    if (event.data.u64 == kListenId) {
      AcceptAll();
      continue;
    }
    if (still_waiting == 0) {
      // This request may take long (a stream): leave a thread waiting for the next event.
      absl::MutexLock lock(&mu_);
      if (workers_ < options_.max_connections + kStartWorkers) StartWorker();
    }
    Serve(event.data.u64);
  }
}

void Server::AcceptAll() {
  absl::MutexLock lock(&mu_);
  if (listen_fd_ < 0) return;
  // The spare is lost when another thread (the gateway's health probes, an upstream connection)
  // takes the descriptor it freed before it is reopened: take it back as soon as one is free, or
  // every later connection would wait unanswered in the backlog while the held ones stay open.
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  bool out_of_fds = false;
  for (int i = 0; i < kAcceptBatch; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        // Out of descriptors: the pending connection would keep the socket ready and every
        // worker spinning on it. The spare descriptor makes room to take it and answer 503.
        ::close(spare_fd_);
        fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) Refuse(fd);
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) continue;
      }
      out_of_fds = errno == EMFILE || errno == ENFILE;
      break;  // EAGAIN: none left
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      Refuse(fd);
      continue;
    }
    const uint64_t id = next_id_++;
    auto connection = std::make_unique<Connection>(fd, options_, &stopping_);
    connection->idle_since_ms = SteadyMillis();
    epoll_event ready{EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, {.u64 = id}};
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ready) != 0) continue;  // closes fd
    connections_.emplace(id, std::move(connection));
  }
  if (out_of_fds) {
    // Without even a spare descriptor, wait for connections to close rather than spin (the
    // listening socket stays disarmed meanwhile; other workers go on serving).
    mu_.Unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(kOutOfFdsPauseMs));
    mu_.Lock();
    if (listen_fd_ < 0) return;  // Stop closed it meanwhile
  }
  epoll_event listen{EPOLLIN | EPOLLONESHOT, {.u64 = kListenId}};
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &listen);
}

void Server::Refuse(int fd) const {
  ::send(fd, overload_response_.data(), overload_response_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void Server::Serve(uint64_t id) {
  Connection* c = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = connections_.find(id);
    // Gone: the sweep or Stop closed it after epoll reported it.
    if (it == connections_.end()) return;
    c = it->second.get();
    if (c->busy) {
      // Its owner re-armed it and is about to let go: it serves this event itself.
      c->pending = true;
      return;
    }
    c->busy = true;
  }
  for (;;) {
    const bool keep = ServeRequests(*c) && !stopping_.load(std::memory_order_acquire);
    c->idle_since_ms = SteadyMillis();
    // Re-armed outside mu_ (a syscall under the lock made the next worker wait on it). The
    // connection stays busy meanwhile, so that the sweep cannot close its fd under the call.
    epoll_event ready{EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, {.u64 = id}};
    const bool armed = keep && ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ready) == 0;
    absl::MutexLock lock(&mu_);
    if (!armed) {
      Close(id);
      return;
    }
    if (!c->pending) {
      c->busy = false;
      return;
    }
    c->pending = false;  // another worker took its event while it was busy: serve it here
  }
}

void Server::CloseIdle(bool expired_only) {
  const int64_t now = SteadyMillis();
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& c = *it->second;
    if (c.busy || (expired_only && now - c.idle_since_ms < options_.idle_timeout_ms)) {
      ++it;
      continue;
    }
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    it = connections_.erase(it);
  }
  changed_.SignalAll();
}

void Server::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
  connections_.erase(it);
  changed_.SignalAll();
}

bool Server::ServeRequests(Connection& c) {
  const int fd = c.fd;
  try {
    do {
      Request request;
      absl::Status read = c.reader.Next(&request);
      if (read.code() == absl::StatusCode::kCancelled) return false;  // nothing to answer
      // Only an observer (serve's metrics and request log) needs the time: the gateway keeps its
      // own, and its requests skip the clock read.
      const Clock::time_point start = observer_ ? Clock::now() : Clock::time_point();
      Writer writer(c.stream, request, &stopping_, options_.server_name);
      writer.log().received = start;
      if (options_.request_ids) {
        writer.log().request_id = RequestIdFor(request, options_.request_id_prefix);
      }
      if (!read.ok()) {
        ApiError error = ApiErrorFromStatus(read);
        writer.log().error = error.code;
        writer.Respond(error.http_status, {{"Content-Type", "application/json"}},
                       ErrorBodyForPath(error, request.path));
        Observe(request, writer, start);
        ::shutdown(fd, SHUT_WR);
        DrainInput(fd, 2 * options_.max_request_bytes + (1 << 20), kDrainMs);
        return false;
      }
      handler_(request, writer);
      writer.Flush();  // a head still held by a handler that ended without End
      if (!writer.started()) {
        ApiError error =
            ApiErrorFromStatus(InternalError(util::codes::kNoResponse, "No response."));
        writer.Respond(error.http_status, {{"Content-Type", "application/json"}},
                       ErrorBodyForPath(error, request.path));
      }
      Observe(request, writer, start);
      if (!writer.keep_alive()) return false;
      // A pipelined next request may already be buffered: epoll would never report it.
    } while (c.reader.HasBufferedInput() && !stopping_.load(std::memory_order_acquire));
    return true;
  } catch (const std::exception& e) {
    // Beast and the standard library may throw (allocation); the connection simply ends.
    return false;
  }
}

void Server::Observe(const Request& request, const ResponseWriter& writer,
                     Clock::time_point start) const {
  if (!observer_) return;
  observer_(request, writer.status(), std::chrono::duration<double>(Clock::now() - start).count(),
            writer.log());
}

}  // namespace deepinfer::http
