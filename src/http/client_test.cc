// The client against real loopback servers: the repo's http::Server for well-formed exchanges,
// a canned one-connection server for what a well-behaved server never sends, and an OpenSSL
// server with certificates made at run time for https.

#include "http/client.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "boost/asio/error.hpp"
#include "gtest/gtest.h"
#include "http/server.h"
#include "http/socket_io.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

using namespace std::chrono_literals;

// Paths: /echo (method, target, headers and body back as text), /stream?n=N (N SSE events 30 ms
// apart, stopping when the client leaves), /hang (waits for the client to leave).
class TestServer {
 public:
  TestServer() {
    ServerOptions o;
    o.port = 0;
    o.idle_timeout_ms = 2000;
    server_ =
        std::move(*Server::Start(o, [this](const Request& r, ResponseWriter& w) { Serve(r, w); }));
  }
  Url url() const { return Url("127.0.0.1", server_->port()); }
  int num_connections() const { return server_->num_connections(); }
  bool saw_hang_up() const { return hung_up_.load(); }
  int events_sent() const { return events_sent_.load(); }

 private:
  void Serve(const Request& r, ResponseWriter& w) {
    if (r.path == "/echo") {
      std::string text = r.method + " " + r.target + "\n";
      for (const auto& [name, value] : r.headers) text += name + ": " + value + "\n";
      w.Respond(200, {{"Content-Type", "text/plain"}}, text + "\n" + r.body);
    } else if (r.path == "/stream") {
      int n = 3;
      std::sscanf(r.target.c_str(), "/stream?n=%d", &n);
      w.BeginBody(200, {{"Content-Type", "text/event-stream"}}, std::nullopt);
      for (int i = 0; i < n && !w.PeerClosed(); ++i) {
        if (i > 0) std::this_thread::sleep_for(30ms);
        w.Write("data: " + std::to_string(i) + "\n\n");
        events_sent_++;
      }
      if (w.PeerClosed()) hung_up_ = true;
      w.End();
    } else if (r.path == "/hang") {
      while (!w.PeerClosed()) std::this_thread::sleep_for(1ms);
      hung_up_ = true;
      w.Abort();
    } else {
      w.Respond(404, {{"Content-Type", "application/json"}}, "{\"error\":\"not found\"}");
    }
  }

  std::atomic<bool> hung_up_{false};
  std::atomic<int> events_sent_{0};
  std::unique_ptr<Server> server_;
};

// A one-connection server that answers its one request with `pieces`, `pause_ms` apart, then
// closes.
class CannedServer {
 public:
  CannedServer(std::vector<std::string> pieces, int pause_ms) {
    listen_fd_ = *ListenTcp("127.0.0.1", 0, &port_);
    thread_ = std::thread([this, pieces = std::move(pieces), pause_ms] {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      char buf[4096];
      std::string request;
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, n);
      }
      for (const std::string& piece : pieces) {
        if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      }
      ::close(fd);
    });
  }
  ~CannedServer() {
    thread_.join();
    ::close(listen_fd_);
  }
  Url url() const { return Url("127.0.0.1", port_); }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

FetchOptions Quick() {
  FetchOptions o;
  o.idle_timeout_ms = 5000;
  return o;
}

TEST(RequestHeadTest, FramesBodiesAndAlwaysPostsAndNamesTheConnection) {
  RequestHead get("GET", "/health", "h:1");
  get.Add("Accept", "*/*");
  EXPECT_EQ(get.Finish(0, false),
            "GET /health HTTP/1.1\r\nHost: h:1\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  RequestHead post("POST", "/v1/x", "[::1]:8");
  EXPECT_EQ(post.Finish(0, true),
            "POST /v1/x HTTP/1.1\r\nHost: [::1]:8\r\nContent-Length: 0\r\n"
            "Connection: keep-alive\r\n\r\n");
  RequestHead del("DELETE", "/k", "h:1");
  EXPECT_EQ(del.Finish(3, false),
            "DELETE /k HTTP/1.1\r\nHost: h:1\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
}

TEST(FetchTest, SendsMethodTargetHeadersAndBody) {
  TestServer server;
  ClientRequest request;
  request.method = "POST";
  request.target = "/echo?x=1";
  request.headers = {{"Content-Type", "application/json"}, {"X-Test", "yes"}};
  request.body = "{\"a\":1}";
  auto r = Fetch(server.url(), request, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/plain");
  EXPECT_EQ(r->Header("Content-Type"), "text/plain");
  EXPECT_NE(r->body.find("POST /echo?x=1\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("x-test: yes\n"), std::string::npos);
  EXPECT_NE(r->body.find("host: 127.0.0.1:"), std::string::npos);
  EXPECT_NE(r->body.find("content-length: 7\n"), std::string::npos);
  EXPECT_NE(r->body.find("\n\n{\"a\":1}"), std::string::npos);
}

TEST(FetchTest, HandsAStreamToTheSinkAsItArrives) {
  TestServer server;
  ClientRequest request;
  request.target = "/stream?n=3";
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> pieces;
  auto r = Fetch(server.url(), request, Quick(), [&](std::string_view piece) {
    pieces.emplace_back(std::string(piece), std::chrono::steady_clock::now());
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  EXPECT_TRUE(r->body.empty());
  EXPECT_FALSE(r->aborted);
  std::string all;
  for (const auto& p : pieces) all += p.first;
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_GE(pieces.back().second - pieces.front().second, 40ms);
}

TEST(FetchTest, ASinkThatHangsUpClosesTheConnectionAtOnce) {
  TestServer server;
  ClientRequest request;
  request.target = "/stream?n=1000";
  auto r = Fetch(server.url(), request, Quick(), [](std::string_view) { return false; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->aborted);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
  EXPECT_LT(server.events_sent(), 100);
}

TEST(FetchTest, ErrorBodiesAreReadWholeEvenWithASink) {
  TestServer server;
  ClientRequest request;
  request.target = "/missing";
  bool called = false;
  auto r = Fetch(server.url(), request, Quick(), [&](std::string_view) { return called = true; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "{\"error\":\"not found\"}");
  EXPECT_FALSE(called);
}

TEST(FetchTest, ABodyOverTheLimitFails) {
  TestServer server;
  ClientRequest request;
  request.target = "/echo";
  FetchOptions options = Quick();
  options.max_body_bytes = 8;
  auto r = Fetch(server.url(), request, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "body_too_large");
}

TEST(FetchTest, ClosedPortIsConnectFailed) {
  int port = 0;
  ::close(*ListenTcp("127.0.0.1", 0, &port));
  auto r = Fetch(Url("127.0.0.1", port), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrorCodeOf(r.status()), "connect_failed");
}

TEST(FetchTest, IdleTimeoutEndsAStalledBody) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 1500);
  FetchOptions options;
  options.idle_timeout_ms = 200;
  const auto start = std::chrono::steady_clock::now();
  auto r = Fetch(server.url(), ClientRequest{}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "timeout");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1200ms);
}

TEST(FetchTest, TotalTimeoutEndsADribblingBody) {
  std::vector<std::string> pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"};
  for (int i = 0; i < 100; ++i) pieces.push_back("x");
  CannedServer server(pieces, 20);
  FetchOptions options;
  options.idle_timeout_ms = 1000;
  options.total_timeout_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  auto r = Fetch(server.url(), ClientRequest{}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

TEST(FetchTest, AnEarlyCloseIsAnIoError) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 0);
  auto r = Fetch(server.url(), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "io_error");
  EXPECT_NE(std::string(r.status().message()).find("read:"), std::string::npos);
}

TEST(FetchTest, ABodyUntilTheCloseIsWhole) {
  CannedServer server({"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", "def"}, 20);
  auto r = Fetch(server.url(), ClientRequest{}, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "abcdef");
}

TEST(FetchTest, CancelEndsTheExchangeAsClientClosedRequest) {
  TestServer server;
  std::atomic<bool> gone{false};
  FetchOptions options;
  options.cancel = [&gone] { return gone.load(); };
  std::thread leave([&gone] {
    std::this_thread::sleep_for(100ms);
    gone = true;
  });
  ClientRequest r;
  r.target = "/hang";
  const auto start = std::chrono::steady_clock::now();
  auto answer = Fetch(server.url(), r, options);
  leave.join();
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(absl::IsCancelled(answer.status()));
  EXPECT_EQ(ErrorCodeOf(answer.status()), "client_closed_request");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
}

TEST(ClientConnectionTest, SkipsInterimAnswersAndRefusesUpgrades) {
  CannedServer server({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                       "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok"},
                      0);
  ClientOptions options;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  ASSERT_FALSE(connection.Send(RequestHead("GET", "/", "h").Finish(0, false), ""));
  Headers headers;
  ASSERT_FALSE(connection.ReadHead(&headers));
  EXPECT_EQ(connection.response().status(), 200);
  ASSERT_EQ(headers.size(), 1u);  // Content-Length is framing, not passed on
  EXPECT_EQ(headers[0].first, "X-Final");
  char buf[16];
  boost::system::error_code ec;
  EXPECT_EQ(connection.ReadBody(buf, sizeof(buf), ec), 2u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(connection.done());

  CannedServer upgrade({"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"}, 0);
  ClientConnection second(options);
  ASSERT_TRUE(second.Connect(upgrade.url()).ok());
  ASSERT_FALSE(second.Send(RequestHead("GET", "/", "h").Finish(0, false), ""));
  EXPECT_TRUE(second.ReadHead(&headers));
}

TEST(ClientConnectionTest, AKeptAliveConnectionCarriesTheNextRequest) {
  TestServer server;
  ClientOptions options;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  for (int i = 0; i < 2; ++i) {
    const std::string target = "/echo?i=" + std::to_string(i);
    ASSERT_FALSE(connection.Send(RequestHead("GET", target, "h").Finish(0, true), ""));
    Headers headers;
    ASSERT_FALSE(connection.ReadHead(&headers));
    std::string body;
    char buf[64];
    boost::system::error_code ec;
    while (!connection.done() && !ec) body.append(buf, connection.ReadBody(buf, sizeof(buf), ec));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(body.rfind("GET " + target, 0), 0u) << body;
    EXPECT_TRUE(connection.reusable());
  }
  // Handed over (as to a pool) and adopted by another connection object: still the same socket.
  ClientConnection next(options);
  next.Adopt(connection.Release());
  EXPECT_EQ(connection.fd(), -1);
  ASSERT_FALSE(next.Send(RequestHead("GET", "/echo", "h").Finish(0, true), ""));
  Headers headers;
  EXPECT_FALSE(next.ReadHead(&headers));
  EXPECT_EQ(next.response().status(), 200);
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(ClientConnectionTest, CancelEndsAWaitForTheHeadAndTheServerSeesTheClose) {
  TestServer server;
  std::atomic<bool> gone{false};
  ClientOptions options;
  options.cancel = [&gone] { return gone.load(); };
  options.slice_ms = 5;
  std::thread leave([&gone] {
    std::this_thread::sleep_for(100ms);
    gone = true;
  });
  boost::system::error_code ec;
  {
    ClientConnection connection(options);
    ASSERT_TRUE(connection.Connect(server.url()).ok());
    ASSERT_FALSE(connection.Send(RequestHead("GET", "/hang", "h").Finish(0, false), ""));
    Headers headers;
    ec = connection.ReadHead(&headers);
  }
  leave.join();
  EXPECT_EQ(ec, boost::asio::error::operation_aborted);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
}

TEST(ClientConnectionTest, HeaderTimeoutEndsAWaitForTheHead) {
  TestServer server;
  ClientOptions options;
  options.header_timeout_ms = 150;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  ASSERT_FALSE(connection.Send(RequestHead("GET", "/hang", "h").Finish(0, false), ""));
  Headers headers;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(connection.ReadHead(&headers), boost::asio::error::timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

// A key and a self-signed certificate, made with OpenSSL at run time: no key material in the
// tree, nothing that expires.
struct Identity {
  std::unique_ptr<X509, decltype(&X509_free)> cert{nullptr, X509_free};
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{nullptr, EVP_PKEY_free};
};

// `san`: the subject alternative names, as "IP:127.0.0.1,DNS:localhost". `subject`: the CN,
// one per certificate (the CA store finds an issuer by its subject name).
Identity SelfSigned(const char* subject, const char* san) {
  static std::atomic<long> serial{1};
  Identity id;
  id.key.reset(EVP_EC_gen("P-256"));
  id.cert.reset(X509_new());
  X509* cert = id.cert.get();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, id.key.get());
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(subject), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  const std::pair<int, const char*> extensions[] = {
      {NID_basic_constraints, "critical,CA:TRUE"}, {NID_subject_alt_name, san}};
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(cert, extension, -1);
    X509_EXTENSION_free(extension);
  }
  X509_sign(cert, id.key.get(), EVP_sha256());
  return id;
}

// The certificates of the https tests. SSL_CERT_FILE names a file that trusts `trusted` and
// `other_host`, not `untrusted`; made once per process, before the client's first handshake reads
// it.
struct Pki {
  Identity trusted = SelfSigned("trusted", "IP:127.0.0.1,DNS:localhost");
  Identity other_host = SelfSigned("other host", "DNS:images.example.com");
  Identity untrusted = SelfSigned("untrusted", "IP:127.0.0.1,DNS:localhost");
  std::string ca_file;
};

const Pki& TestPki() {
  static const Pki* const pki = [] {
    auto* p = new Pki;
    p->ca_file = (std::filesystem::temp_directory_path() /
                  ("deepinfer-client-test-ca-" + std::to_string(::getpid()) + ".pem"))
                     .string();
    BIO* out = BIO_new_file(p->ca_file.c_str(), "w");
    PEM_write_bio_X509(out, p->trusted.cert.get());
    PEM_write_bio_X509(out, p->other_host.cert.get());
    BIO_free(out);
    ::setenv("SSL_CERT_FILE", p->ca_file.c_str(), 1);
    return p;
  }();
  return *pki;
}

// A one-connection TLS server on loopback: presents `identity`, reads one request (its head and a
// Content-Length body), answers `answer`, then ends with close_notify or, without
// `close_notify`, a bare close of the socket. What it saw is read once the connection ended.
class TlsServer {
 public:
  TlsServer(const Identity& identity, std::string answer, bool close_notify = true)
      : ctx_(SSL_CTX_new(TLS_server_method()), SSL_CTX_free) {
    SSL_CTX_use_certificate(ctx_.get(), identity.cert.get());
    SSL_CTX_use_PrivateKey(ctx_.get(), identity.key.get());
    listen_fd_ = *ListenTcp("127.0.0.1", 0, &port_);
    thread_ = std::thread(
        [this, answer = std::move(answer), close_notify] { Serve(answer, close_notify); });
  }
  ~TlsServer() {
    Finish();
    ::close(listen_fd_);
  }
  Url url(const std::string& host = "127.0.0.1") const {
    return Url(host, port_, "", Scheme::kHttps);
  }
  const std::string& request() {
    Finish();
    return request_;
  }
  // The SNI the client sent ("" without).
  const std::string& server_name() {
    Finish();
    return server_name_;
  }
  bool handshake_ok() {
    Finish();
    return handshake_ok_;
  }

 private:
  void Finish() {
    if (thread_.joinable()) thread_.join();
  }
  // The request's Content-Length as our client writes it (0 when none, or no head yet).
  static size_t BodyBytes(const std::string& request) {
    const size_t at = request.find("Content-Length: ");
    return at == std::string::npos ? 0 : std::stoul(request.substr(at + 16));
  }
  void Serve(const std::string& answer, bool close_notify) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    SSL* ssl = SSL_new(ctx_.get());
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      handshake_ok_ = true;
      const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
      if (sni != nullptr) server_name_ = sni;
      char buf[16384];
      size_t head_end;
      while ((head_end = request_.find("\r\n\r\n")) == std::string::npos ||
             request_.size() < head_end + 4 + BodyBytes(request_)) {
        const int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) break;
        request_.append(buf, n);
      }
      if (!answer.empty()) SSL_write(ssl, answer.data(), static_cast<int>(answer.size()));
      if (close_notify) SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    ::close(fd);
  }

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::string server_name_;
  bool handshake_ok_ = false;
  std::thread thread_;
};

std::string Ok(std::string_view body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

class TlsFetchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { TestPki(); }
  // The client read the file at its first handshake.
  static void TearDownTestSuite() { std::filesystem::remove(TestPki().ca_file); }
};

TEST_F(TlsFetchTest, FetchesOverHttpsWithAVerifiedCertificate) {
  // Bodies of many TLS records both ways.
  std::string image(100000, '\0');
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<char>(i * 7);
  TlsServer server(TestPki().trusted, Ok(image));
  ClientRequest request;
  request.method = "POST";
  request.target = "/img.png?x=1";
  request.body = std::string(200000, 'b');
  auto r = Fetch(server.url(), request, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, image);
  const std::string expected_head = "POST /img.png?x=1 HTTP/1.1\r\nHost: " +
                                    std::string(server.url().host_port()) + "\r\n";
  EXPECT_EQ(server.request().rfind(expected_head, 0), 0u) << server.request().substr(0, 200);
  EXPECT_TRUE(server.request().ends_with("\r\n\r\n" + request.body));
  EXPECT_EQ(server.server_name(), "");  // no SNI for an address
}

TEST_F(TlsFetchTest, SendsTheHostNameAsSni) {
  TlsServer server(TestPki().trusted, Ok("hi"));
  auto r = Fetch(server.url("localhost"), ClientRequest{}, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "hi");
  EXPECT_EQ(server.server_name(), "localhost");
}

TEST_F(TlsFetchTest, AnUntrustedCertificateFailsTheHandshake) {
  TlsServer server(TestPki().untrusted, Ok("secret"));
  auto r = Fetch(server.url(), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrorCodeOf(r.status()), "tls_handshake_failed");
  EXPECT_NE(r.status().message().find("certificate could not be verified"), std::string::npos)
      << r.status();
  EXPECT_FALSE(server.handshake_ok());
  EXPECT_EQ(server.request(), "");
}

TEST_F(TlsFetchTest, ATrustedCertificateForAnotherHostFailsTheHandshake) {
  for (const char* host : {"127.0.0.1", "localhost"}) {
    TlsServer server(TestPki().other_host, Ok("secret"));
    auto r = Fetch(server.url(host), ClientRequest{}, Quick());
    ASSERT_FALSE(r.ok()) << host;
    EXPECT_EQ(ErrorCodeOf(r.status()), "tls_handshake_failed") << host;
    EXPECT_NE(r.status().message().find("mismatch"), std::string::npos) << r.status();
    EXPECT_FALSE(server.handshake_ok()) << host;
  }
}

TEST_F(TlsFetchTest, ASilentServerEndsTheHandshakeAtTheDeadline) {
  CannedServer server({}, 0);  // takes the connection, never answers the hello
  FetchOptions options;
  options.idle_timeout_ms = 5000;
  options.total_timeout_ms = 300;
  const Url url(server.url().host(), server.url().port(), "", Scheme::kHttps);
  const auto start = std::chrono::steady_clock::now();
  auto r = Fetch(url, ClientRequest{}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ErrorCodeOf(r.status()), "connect_timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
}

TEST_F(TlsFetchTest, ABodyUntilTheCloseNeedsTheServersCloseNotify) {
  const std::string answer = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc";
  TlsServer whole(TestPki().trusted, answer, /*close_notify=*/true);
  auto r = Fetch(whole.url(), ClientRequest{}, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "abc");
  // A bare close could be an attacker's cut: not the end of the body.
  TlsServer cut(TestPki().trusted, answer, /*close_notify=*/false);
  r = Fetch(cut.url(), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "io_error");
  EXPECT_NE(r.status().message().find("read:"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace deepinfer::http
