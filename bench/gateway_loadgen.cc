// Load generator and mock backend for bench/gateway_bench.py: one file, no dependencies, one
// epoll thread per process, so that it measures the proxies rather than itself.
//
//   gateway_loadgen serve PORT
//       Mock backend. POST/GET anything: a 1 KB JSON answer. Query options:
//         delay_ms=D          answer after D ms
//         sse=N&gap_ms=G      N SSE events G ms apart (the first at once), then [DONE]; every
//                             event carries "t": its send time (CLOCK_MONOTONIC ns)
//         hold=1              one SSE event, then the stream stays open until the peer leaves
//   gateway_loadgen rate URL --rate R --seconds T --connections C [-H 'K: V']...
//       Open loop: request k is due at k / R seconds; its latency runs from when it was due
//       (not when a connection became free), so queueing is measured, not hidden.
//   gateway_loadgen sse URL --streams S --events N --gap-ms G --connections C [-H ...]
//       Per-event delivery latency: arrival time minus the event's "t" (same host clock).
//   gateway_loadgen hold URL --streams S [-H ...]
//       Opens S streams, prints {"ready": S} once each has its first event, holds them open
//       until stdin closes.
//   gateway_loadgen abort URL --requests N --connections C --abort-fraction F [-H ...]
//       N requests (plain, delayed or streamed, at random); a fraction F is abandoned at a
//       random point (before the answer, or mid-stream) by closing the connection.
// Results are one JSON object on stdout. Latencies in milliseconds.
//
// Build: c++ -O2 -std=c++17 -o gateway_loadgen bench/gateway_loadgen.cc

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// epoll_wait with a nanosecond timeout (< 0: none), so that open-loop sends are not rounded
// to milliseconds and the generator never spins.
int WaitNs(int ep, epoll_event* events, int max, int64_t timeout_ns) {
  if (timeout_ns < 0) return epoll_wait(ep, events, max, -1);
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  return epoll_pwait2(ep, events, max, &ts, nullptr);
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "gateway_loadgen: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string QueryValue(const std::string& target, const std::string& key) {
  size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string query = "&" + target.substr(q + 1);
  size_t at = query.find("&" + key + "=");
  if (at == std::string::npos) return "";
  size_t start = at + key.size() + 2;
  size_t end = query.find('&', start);
  return query.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

const std::string kAnswer = [] {
  std::string s =
      "{\"id\":\"cmpl\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
      "\"message\":{\"role\":\"assistant\",\"content\":\"";
  s += std::string(900, 'y');
  s += "\"}}]}";
  return s;
}();

// ------------------------------------------------------------------------------------------------
// Mock backend.

struct ServerConn {
  int fd = -1;
  uint64_t generation = 0;
  std::string in;
  std::string out;
  bool streaming = false;  // an SSE answer is in progress: later requests wait
  int events_left = 0;
  int gap_ms = 0;
  int event_index = 0;
};

struct Timer {
  int64_t when_ns;
  int fd;
  uint64_t generation;
  int kind;  // 0: send the delayed JSON answer, 1: send the next SSE event
  bool operator>(const Timer& o) const { return when_ns > o.when_ns; }
};

class MockServer {
 public:
  explicit MockServer(int port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Die("bind");
    if (listen(listen_fd_, 4096) != 0) Die("listen");
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd_;
    epoll_ctl(ep_, EPOLL_CTL_ADD, listen_fd_, &ev);
  }

  void Run() {
    std::vector<epoll_event> events(1024);
    while (true) {
      int timeout = -1;
      if (!timers_.empty()) {
        int64_t left = timers_.top().when_ns - NowNs();
        timeout = left <= 0 ? 0 : static_cast<int>((left + 999999) / 1000000);
      }
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == listen_fd_) {
          Accept();
          continue;
        }
        if (events[i].events & EPOLLOUT) Flush(fd);
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) Read(fd);
      }
      int64_t now = NowNs();
      while (!timers_.empty() && timers_.top().when_ns <= now) {
        Timer t = timers_.top();
        timers_.pop();
        auto it = conns_.find(t.fd);
        if (it == conns_.end() || it->second.generation != t.generation) continue;
        if (t.kind == 0) {
          SendJson(it->second);
        } else {
          SendEvent(it->second);
        }
      }
    }
  }

 private:
  void Accept() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      SetNoDelay(fd);
      ServerConn& c = conns_[fd];
      c = ServerConn{};
      c.fd = fd;
      c.generation = ++generation_;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    }
  }

  void Close(int fd) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns_.erase(fd);
  }

  void Read(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    ServerConn& c = it->second;
    char buf[65536];
    while (true) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        Close(fd);
        return;
      }
      break;
    }
    Process(c);
  }

  void Process(ServerConn& c) {
    while (!c.streaming) {
      size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) return;
      std::string head = c.in.substr(0, end);
      size_t length = 0;
      for (size_t p = head.find("\r\n"); p != std::string::npos; p = head.find("\r\n", p + 2)) {
        if (strncasecmp(head.c_str() + p + 2, "content-length:", 15) == 0) {
          length = std::strtoul(head.c_str() + p + 17, nullptr, 10);
        }
      }
      if (c.in.size() < end + 4 + length) return;
      c.in.erase(0, end + 4 + length);
      size_t sp1 = head.find(' ');
      size_t sp2 = head.find(' ', sp1 + 1);
      std::string target = head.substr(sp1 + 1, sp2 - sp1 - 1);
      std::string sse = QueryValue(target, "sse");
      std::string hold = QueryValue(target, "hold");
      std::string delay = QueryValue(target, "delay_ms");
      if (!sse.empty() || !hold.empty()) {
        c.streaming = true;
        c.events_left = hold.empty() ? std::atoi(sse.c_str()) : -1;
        c.gap_ms = std::atoi(QueryValue(target, "gap_ms").c_str());
        c.event_index = 0;
        Queue(c,
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
              "Transfer-Encoding: chunked\r\n\r\n");
        SendEvent(c);
        return;
      }
      if (!delay.empty() && std::atoi(delay.c_str()) > 0) {
        c.streaming = true;  // one answer at a time on this connection
        timers_.push(Timer{NowNs() + int64_t{std::atoi(delay.c_str())} * 1000000, c.fd,
                           c.generation, 0});
        return;
      }
      if (target == "/health") {
        Queue(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
                 "{\"status\":\"ok\"}");
      } else {
        SendJson(c, /*queue_only=*/true);
      }
    }
  }

  void SendJson(ServerConn& c, bool queue_only = false) {
    char head[160];
    std::snprintf(head, sizeof(head),
                  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                  kAnswer.size());
    Queue(c, std::string(head) + kAnswer);
    if (!queue_only) {
      c.streaming = false;
      Process(c);
    }
  }

  void SendEvent(ServerConn& c) {
    if (c.events_left == 0) {
      std::string done = "data: [DONE]\n\n";
      char size[16];
      std::snprintf(size, sizeof(size), "%zx\r\n", done.size());
      Queue(c, std::string(size) + done + "\r\n0\r\n\r\n");
      c.streaming = false;
      Process(c);
      return;
    }
    char event[256];
    int len = std::snprintf(event, sizeof(event),
                            "data: {\"object\":\"chat.completion.chunk\",\"i\":%d,\"t\":%lld,"
                            "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n",
                            c.event_index++, static_cast<long long>(NowNs()));
    char size[16];
    std::snprintf(size, sizeof(size), "%x\r\n", len);
    Queue(c, std::string(size) + std::string(event, static_cast<size_t>(len)) + "\r\n");
    if (c.events_left > 0) {
      c.events_left--;
      timers_.push(Timer{NowNs() + int64_t{c.gap_ms} * 1000000, c.fd, c.generation, 1});
    }
  }

  void Queue(ServerConn& c, const std::string& data) {
    bool was_empty = c.out.empty();
    c.out += data;
    if (was_empty) Flush(c.fd);
  }

  void Flush(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    ServerConn& c = it->second;
    while (!c.out.empty()) {
      ssize_t n = send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (errno == EAGAIN) break;
      // The peer is gone: the read side sees it and closes (callers still hold `c`).
      c.out.clear();
      shutdown(fd, SHUT_RDWR);
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (c.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
    ev.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
  }

  int listen_fd_ = -1;
  int ep_ = -1;
  uint64_t generation_ = 0;
  std::map<int, ServerConn> conns_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
};

// ------------------------------------------------------------------------------------------------
// Client side.

struct Target {
  std::string host = "127.0.0.1";
  int port = 80;
  std::string path = "/";
};

Target ParseUrl(const std::string& url) {
  Target t;
  std::string rest = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) t.path = rest.substr(slash);
  size_t colon = hostport.rfind(':');
  t.host = hostport.substr(0, colon);
  if (colon != std::string::npos) t.port = std::atoi(hostport.c_str() + colon + 1);
  return t;
}

// An incremental HTTP/1.1 response reader: head, then a Content-Length or chunked body.
struct ResponseReader {
  enum State { kHead, kLength, kChunkSize, kChunkData, kChunkCrlf, kTrailer, kDone };
  State state = kHead;
  int status = 0;
  size_t remaining = 0;
  bool chunked = false;
  bool close = false;

  void Reset() { *this = ResponseReader{}; }

  // Consumes from `in`; calls on_data(ptr, len) for body bytes. Returns false on a malformed
  // answer.
  template <class F>
  bool Feed(std::string& in, F&& on_data) {
    size_t pos = 0;
    while (state != kDone) {
      if (state == kHead) {
        size_t end = in.find("\r\n\r\n", pos);
        if (end == std::string::npos) break;
        std::string head = in.substr(pos, end - pos);
        pos = end + 4;
        if (head.size() < 12) return false;
        status = std::atoi(head.c_str() + 9);
        bool has_length = false;
        for (size_t p = head.find("\r\n"); p != std::string::npos;
             p = head.find("\r\n", p + 2)) {
          const char* h = head.c_str() + p + 2;
          if (strncasecmp(h, "content-length:", 15) == 0) {
            remaining = std::strtoul(h + 15, nullptr, 10);
            has_length = true;
          } else if (strncasecmp(h, "transfer-encoding:", 18) == 0) {
            chunked = std::strstr(h, "chunked") != nullptr;
          } else if (strncasecmp(h, "connection:", 11) == 0) {
            close = strncasecmp(h + 11, " close", 6) == 0;
          }
        }
        state = chunked ? kChunkSize : (has_length && remaining > 0 ? kLength : kDone);
        if (!chunked && !has_length) return false;
      } else if (state == kLength) {
        size_t n = std::min(remaining, in.size() - pos);
        if (n == 0) break;
        on_data(in.data() + pos, n);
        pos += n;
        remaining -= n;
        if (remaining == 0) state = kDone;
      } else if (state == kChunkSize) {
        size_t end = in.find("\r\n", pos);
        if (end == std::string::npos) break;
        remaining = std::strtoul(in.c_str() + pos, nullptr, 16);
        pos = end + 2;
        state = remaining == 0 ? kTrailer : kChunkData;
      } else if (state == kChunkData) {
        size_t n = std::min(remaining, in.size() - pos);
        if (n == 0) break;
        on_data(in.data() + pos, n);
        pos += n;
        remaining -= n;
        if (remaining == 0) state = kChunkCrlf;
      } else if (state == kChunkCrlf) {
        if (in.size() - pos < 2) break;
        pos += 2;
        state = kChunkSize;
      } else if (state == kTrailer) {
        size_t end = in.find("\r\n", pos);
        if (end == std::string::npos) break;
        bool empty = end == pos;
        pos = end + 2;
        if (empty) state = kDone;
      }
    }
    in.erase(0, pos);
    return true;
  }
};

struct Options {
  std::string mode;
  Target target;
  std::vector<std::string> headers;
  double rate = 1000;
  double seconds = 10;
  int connections = 1;
  int streams = 100;
  int events = 20;
  int gap_ms = 10;
  int requests = 1000;
  double abort_fraction = 0.3;
  std::string body;
};

std::string BuildRequest(const Options& o, const std::string& path) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: " + o.target.host + "\r\n";
  for (const std::string& h : o.headers) r += h + "\r\n";
  r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(o.body.size()) +
       "\r\n\r\n" + o.body;
  return r;
}

std::string WithQuery(const std::string& path, const std::string& query) {
  return path + (path.find('?') == std::string::npos ? "?" : "&") + query;
}

int Connect(const Target& t) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  SetNoDelay(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(t.port));
  inet_pton(AF_INET, t.host == "localhost" ? "127.0.0.1" : t.host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    Die("connect");
  }
  return fd;
}

struct ClientConn {
  int fd = -1;
  std::string in;
  std::string out;
  ResponseReader reader;
  bool busy = false;
  int64_t due_ns = 0;   // when the request was due (rate) or sent
  int kind = 0;         // abort mode: 0 plain, 1 delayed, 2 stream
  int64_t abort_at_ns = 0;
  bool abort_on_first_event = false;
  int events_seen = 0;
  bool want_write = false;
  std::string sse;  // SSE bytes after the last complete event
};

class Client {
 public:
  explicit Client(Options o) : o_(std::move(o)), rng_(12345) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
  }

  void Open(ClientConn& c) {
    c.fd = Connect(o_.target);
    c.in.clear();
    c.out.clear();
    c.reader.Reset();
    c.busy = false;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = &c;
    epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void CloseConn(ClientConn& c) {
    if (c.fd < 0) return;
    epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    c.fd = -1;
    c.busy = false;
  }

  void Send(ClientConn& c, const std::string& request) {
    c.sse.clear();
    c.out = request;
    c.reader.Reset();
    c.busy = true;
    c.events_seen = 0;
    Flush(c);
  }

  void Flush(ClientConn& c) {
    while (!c.out.empty()) {
      ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (errno == EAGAIN || errno == EINPROGRESS || errno == ENOTCONN) break;
      c.out.clear();
      break;
    }
    bool want = !c.out.empty();
    if (want != c.want_write) {
      c.want_write = want;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP | (want ? static_cast<uint32_t>(EPOLLOUT) : 0u);
      ev.data.ptr = &c;
      epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    }
  }

  // Reads what is there. Returns -1 when the connection ended, 1 when a response completed.
  template <class F>
  int Read(ClientConn& c, F&& on_data) {
    char buf[65536];
    bool ended = false;
    while (true) {
      ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (static_cast<size_t>(n) < sizeof(buf)) break;
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) ended = true;
      break;
    }
    if (!c.reader.Feed(c.in, on_data)) return -1;
    if (c.reader.state == ResponseReader::kDone) return 1;
    return ended ? -1 : 0;
  }

  int RunRate() {
    std::vector<ClientConn> conns(static_cast<size_t>(o_.connections));
    for (ClientConn& c : conns) Open(c);
    const std::string request = BuildRequest(o_, o_.target.path);
    const int64_t start = NowNs() + 50000000;  // connections settle first
    const int64_t total = static_cast<int64_t>(o_.rate * o_.seconds);
    const double interval_ns = 1e9 / o_.rate;
    int64_t next = 0;
    std::deque<int64_t> backlog;  // due times of requests waiting for a free connection
    std::vector<double> latencies;
    latencies.reserve(static_cast<size_t>(total));
    int64_t errors = 0, done = 0;
    std::vector<ClientConn*> idle;
    for (ClientConn& c : conns) idle.push_back(&c);
    std::vector<epoll_event> events(256);
    while (done + errors < total) {
      int64_t now = NowNs();
      while (next < total && start + static_cast<int64_t>(next * interval_ns) <= now) {
        backlog.push_back(start + static_cast<int64_t>(next * interval_ns));
        ++next;
      }
      while (!backlog.empty() && !idle.empty()) {
        ClientConn* c = idle.back();
        idle.pop_back();
        c->due_ns = backlog.front();
        backlog.pop_front();
        Send(*c, request);
      }
      int64_t timeout_ns = 100000000;
      if (next < total) {
        int64_t due = start + static_cast<int64_t>(next * interval_ns);
        timeout_ns = std::max<int64_t>(due - NowNs(), 0);
      }
      int n = WaitNs(ep_, events.data(), static_cast<int>(events.size()), timeout_ns);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<ClientConn*>(events[i].data.ptr);
        if (events[i].events & EPOLLOUT) Flush(*c);
        if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
        int r = Read(*c, [](const char*, size_t) {});
        if (r == 1) {
          int64_t t = NowNs();
          if (c->reader.status == 200) {
            latencies.push_back((t - c->due_ns) / 1e6);
            ++done;
          } else {
            ++errors;
          }
          bool closing = c->reader.close;
          c->busy = false;
          if (closing) {
            CloseConn(*c);
            Open(*c);
          }
          idle.push_back(c);
        } else if (r < 0) {
          if (c->busy) ++errors;
          CloseConn(*c);
          Open(*c);
          idle.push_back(c);
        }
      }
    }
    double seconds = (NowNs() - start) / 1e9;
    PrintLatency(latencies, errors, seconds, "");
    return 0;
  }

  int RunSse() {
    std::vector<ClientConn> conns(static_cast<size_t>(o_.connections));
    const std::string request = BuildRequest(
        o_, WithQuery(o_.target.path, "sse=" + std::to_string(o_.events) +
                                           "&gap_ms=" + std::to_string(o_.gap_ms)));
    std::vector<double> event_ms, first_ms;
    int started = 0, finished = 0, errors = 0;
    for (ClientConn& c : conns) {
      if (started >= o_.streams) break;
      Open(c);
      c.due_ns = NowNs();
      Send(c, request);
      ++started;
    }
    std::vector<epoll_event> events(256);
    const int64_t start = NowNs();
    while (finished + errors < o_.streams) {
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 1000);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<ClientConn*>(events[i].data.ptr);
        if (events[i].events & EPOLLOUT) Flush(*c);
        if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
        int64_t now = NowNs();
        int r = Read(*c, [&](const char* p, size_t len) {
          // A proxy may split or join events: only whole events are timed.
          c->sse.append(p, len);
          size_t end;
          while ((end = c->sse.find("\n\n")) != std::string::npos) {
            size_t at = c->sse.find("\"t\":");
            if (at != std::string::npos && at < end) {
              long long t = std::strtoll(c->sse.c_str() + at + 4, nullptr, 10);
              event_ms.push_back((now - t) / 1e6);
              if (c->events_seen++ == 0) first_ms.push_back((now - c->due_ns) / 1e6);
            }
            c->sse.erase(0, end + 2);
          }
        });
        if (r == 0) continue;
        if (r == 1 && c->reader.status == 200) {
          ++finished;
        } else {
          ++errors;
        }
        if (r < 0 || c->reader.close) {
          CloseConn(*c);
          if (started < o_.streams) Open(*c);
        }
        if (started < o_.streams) {
          c->due_ns = NowNs();
          Send(*c, request);
          ++started;
        }
      }
    }
    double seconds = (NowNs() - start) / 1e9;
    std::string extra = ",\"streams\":" + std::to_string(finished) +
                        ",\"first_event\":" + Summary(first_ms);
    PrintLatency(event_ms, errors, seconds, extra);
    return 0;
  }

  int RunHold() {
    std::vector<ClientConn> conns(static_cast<size_t>(o_.streams));
    const std::string request = BuildRequest(o_, WithQuery(o_.target.path, "hold=1"));
    int ready = 0, failed = 0;
    std::vector<epoll_event> events(256);
    size_t opened = 0;
    auto open_more = [&] {
      // At most 64 connects in flight, so that accept queues do not overflow.
      while (opened < conns.size() && static_cast<int>(opened) - ready - failed < 64) {
        Open(conns[opened]);
        Send(conns[opened], request);
        ++opened;
      }
    };
    open_more();
    const int64_t deadline = NowNs() + int64_t{60} * 1000000000;
    while (ready + failed < o_.streams && NowNs() < deadline) {
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 100);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<ClientConn*>(events[i].data.ptr);
        if (events[i].events & EPOLLOUT) Flush(*c);
        if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
        bool got = false;
        int r = Read(*c, [&](const char*, size_t) { got = true; });
        if (got && c->events_seen++ == 0) ++ready;
        if (r < 0) {
          if (c->events_seen == 0) ++failed;
          CloseConn(*c);
        }
      }
      open_more();
    }
    std::printf("{\"ready\":%d,\"failed\":%d}\n", ready, failed);
    std::fflush(stdout);
    // Hold until stdin closes, draining what the streams send meanwhile.
    while (true) {
      pollfd p{0, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        char b[64];
        if (read(0, b, sizeof(b)) <= 0) break;
      }
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 100);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<ClientConn*>(events[i].data.ptr);
        char b[4096];
        ssize_t k = recv(c->fd, b, sizeof(b), 0);
        if (k == 0 || (k < 0 && errno != EAGAIN)) CloseConn(*c);
      }
    }
    for (ClientConn& c : conns) CloseConn(c);
    return 0;
  }

  int RunAbort() {
    std::vector<ClientConn> conns(static_cast<size_t>(o_.connections));
    const std::string plain = BuildRequest(o_, o_.target.path);
    const std::string delayed = BuildRequest(o_, WithQuery(o_.target.path, "delay_ms=2"));
    const std::string stream = BuildRequest(o_, WithQuery(o_.target.path, "sse=5&gap_ms=1"));
    std::uniform_real_distribution<double> uni(0, 1);
    int64_t sent = 0, completed = 0, aborted = 0, rejected = 0, errors = 0;
    std::vector<ClientConn*> abandon_now;
    auto next_request = [&](ClientConn& c) {
      if (sent >= o_.requests) return;
      if (c.fd < 0) Open(c);
      c.abort_at_ns = 0;
      c.abort_on_first_event = false;
      const int64_t now = NowNs();
      if (uni(rng_) < o_.abort_fraction) {
        // Abandoned at a point that comes before the answer ends, in every phase: right after
        // sending (often still queued or not yet read), while the backend delays its answer
        // (waiting for headers), or after the first event of a stream (mid-stream).
        double where = uni(rng_);
        if (where < 0.2) {
          c.kind = 0;
          c.abort_at_ns = now;
        } else if (where < 0.6) {
          c.kind = 1;
          c.abort_at_ns = now + static_cast<int64_t>(uni(rng_) * 1.8e6);
        } else {
          c.kind = 2;
          c.abort_on_first_event = true;
        }
      } else {
        double k = uni(rng_);
        c.kind = k < 0.5 ? 0 : (k < 0.75 ? 1 : 2);
      }
      c.due_ns = now;
      Send(c, c.kind == 0 ? plain : (c.kind == 1 ? delayed : stream));
      ++sent;
      if (c.abort_at_ns == now) abandon_now.push_back(&c);
    };
    std::function<void(ClientConn&)> abandon = [&](ClientConn& c) {
      CloseConn(c);
      ++aborted;
      next_request(c);
    };
    for (ClientConn& c : conns) next_request(c);
    std::vector<epoll_event> events(256);
    const int64_t start = NowNs();
    while (completed + aborted + rejected + errors < o_.requests) {
      while (!abandon_now.empty()) {
        ClientConn* c = abandon_now.back();
        abandon_now.pop_back();
        if (c->fd >= 0 && c->busy) abandon(*c);
      }
      int n = WaitNs(ep_, events.data(), static_cast<int>(events.size()), 200000);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<ClientConn*>(events[i].data.ptr);
        if (c->fd < 0) continue;
        if (events[i].events & EPOLLOUT) Flush(*c);
        if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
        bool event = false;
        int r = Read(*c, [&](const char*, size_t) { event = true; });
        if (r == 0 && event && c->abort_on_first_event && c->kind == 2) {
          abandon(*c);
          continue;
        }
        if (r == 0) continue;
        if (r == 1) {
          if (c->reader.status == 200) {
            ++completed;
          } else {
            ++rejected;
          }
          if (c->reader.close) CloseConn(*c);
        } else {
          ++errors;
          CloseConn(*c);
        }
        next_request(*c);
      }
      int64_t now = NowNs();
      for (ClientConn& c : conns) {
        if (c.fd >= 0 && c.busy && c.abort_at_ns != 0 && now >= c.abort_at_ns) abandon(c);
      }
    }
    double seconds = (NowNs() - start) / 1e9;
    std::printf(
        "{\"requests\":%lld,\"completed\":%lld,\"aborted\":%lld,\"rejected\":%lld,"
        "\"errors\":%lld,\"seconds\":%.3f}\n",
        static_cast<long long>(sent), static_cast<long long>(completed),
        static_cast<long long>(aborted), static_cast<long long>(rejected),
        static_cast<long long>(errors), seconds);
    return 0;
  }

 private:
  static std::string Summary(std::vector<double> v) {
    if (v.empty()) return "null";
    std::sort(v.begin(), v.end());
    auto q = [&](double p) {
      return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
    };
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "{\"n\":%zu,\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,\"p999\":%.4f,\"max\":%.4f}",
                  v.size(), q(0.5), q(0.9), q(0.99), q(0.999), v.back());
    return buf;
  }

  void PrintLatency(const std::vector<double>& v, int64_t errors, double seconds,
                    const std::string& extra) {
    std::printf("{\"latency\":%s,\"errors\":%lld,\"seconds\":%.3f,\"rate\":%.1f%s}\n",
                Summary(v).c_str(), static_cast<long long>(errors), seconds,
                static_cast<double>(v.size()) / std::max(seconds, 1e-9), extra.c_str());
  }

  Options o_;
  std::mt19937_64 rng_;
  int ep_;
};

int Usage() {
  std::fprintf(stderr,
               "usage: gateway_loadgen serve PORT | {rate|sse|hold|abort} URL [--rate R] "
               "[--seconds T] [--connections C] [--streams S] [--events N] [--gap-ms G] "
               "[--requests N] [--abort-fraction F] [--body-bytes B] [-H 'K: V']...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  std::string mode = argv[1];
  if (mode == "serve") {
    prctl(PR_SET_TIMERSLACK, 1UL);
    MockServer(std::atoi(argv[2])).Run();
    return 0;
  }
  Options o;
  o.mode = mode;
  o.target = ParseUrl(argv[2]);
  int body_bytes = 900;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(Usage());
      return argv[++i];
    };
    if (a == "-H") {
      o.headers.push_back(value());
    } else if (a == "--rate") {
      o.rate = std::atof(value().c_str());
    } else if (a == "--seconds") {
      o.seconds = std::atof(value().c_str());
    } else if (a == "--connections") {
      o.connections = std::atoi(value().c_str());
    } else if (a == "--streams") {
      o.streams = std::atoi(value().c_str());
    } else if (a == "--events") {
      o.events = std::atoi(value().c_str());
    } else if (a == "--gap-ms") {
      o.gap_ms = std::atoi(value().c_str());
    } else if (a == "--requests") {
      o.requests = std::atoi(value().c_str());
    } else if (a == "--abort-fraction") {
      o.abort_fraction = std::atof(value().c_str());
    } else if (a == "--body-bytes") {
      body_bytes = std::atoi(value().c_str());
    } else {
      return Usage();
    }
  }
  o.body = "{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"" +
           std::string(static_cast<size_t>(body_bytes), 'x') + "\"}]}";
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake-ups on time, not up to 50 us late
  Client client(o);
  if (mode == "rate") return client.RunRate();
  if (mode == "sse") return client.RunSse();
  if (mode == "hold") return client.RunHold();
  if (mode == "abort") return client.RunAbort();
  return Usage();
}
