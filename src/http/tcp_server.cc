#include "http/tcp_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "fmt/format.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

constexpr int kAcceptSliceMs = 200;  // how often the accept loop looks at the stop flag

struct ConnectionArg {
  TcpServer* server;
  int fd;
};

}  // namespace

TcpServer::TcpServer(const TcpServerOptions& options, ConnectionFn serve)
    : options_(options), serve_(std::move(serve)) {}

absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("bad_address", fmt::format("Bad port {}.", port));
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
        "bad_address", fmt::format("Cannot resolve host '{}': {}", host, gai_strerror(rc)));
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
    return UnavailableError("bind_failed",
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

absl::StatusOr<std::unique_ptr<TcpServer>> TcpServer::Start(const TcpServerOptions& options,
                                                            ConnectionFn serve) {
  int port = 0;
  DI_ASSIGN_OR_RETURN(int fd, ListenTcp(options.host, options.port, &port));
  std::unique_ptr<TcpServer> server(new TcpServer(options, std::move(serve)));
  server->listen_fd_ = fd;
  server->port_ = port;
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpServer::~TcpServer() {
  Stop();
  // Connection threads use this object; they end within their I/O timeouts once stopping.
  std::unique_lock<std::mutex> lock(mu_);
  all_closed_.wait(lock, [&] { return num_connections_.load() == 0; });
}

bool TcpServer::Stop(int timeout_ms) {
  stopping_.store(true, std::memory_order_release);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  std::unique_lock<std::mutex> lock(mu_);
  return all_closed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [&] { return num_connections_.load() == 0; });
}

void* TcpServer::ConnectionMain(void* arg) {
  auto* a = static_cast<ConnectionArg*>(arg);
  TcpServer* server = a->server;
  int fd = a->fd;
  delete a;
  server->serve_(fd);
  ::close(fd);
  // Notify under the lock: once the count reads 0 the waiter may destroy the server (and this
  // condition variable), so nothing of it may be touched after the lock is released.
  std::lock_guard<std::mutex> lock(server->mu_);
  server->num_connections_.fetch_sub(1);
  server->all_closed_.notify_all();
  return nullptr;
}

void TcpServer::AcceptLoop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kAcceptSliceMs) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(50 * 1000);  // let connections close
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (num_connections_.load() >= options_.max_connections) {
      ::send(fd, options_.overload_response.data(), options_.overload_response.size(),
             MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    num_connections_.fetch_add(1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, options_.thread_stack_bytes);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    auto* arg = new ConnectionArg{this, fd};
    if (pthread_create(&thread, &attr, &TcpServer::ConnectionMain, arg) != 0) {
      delete arg;
      ::close(fd);
      std::lock_guard<std::mutex> lock(mu_);
      num_connections_.fetch_sub(1);
      all_closed_.notify_all();
    }
    pthread_attr_destroy(&attr);
  }
}

}  // namespace deepinfer::http
