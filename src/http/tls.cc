#include "http/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>

#include "boost/asio/error.hpp"
#include "boost/asio/ssl/error.hpp"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

namespace net = boost::asio;
using boost::system::error_code;

// One TLS record's plaintext at most; also the size of each ciphertext copy.
constexpr size_t kChunkBytes = 16 * 1024;
// Ciphertext a write keeps before sending it: a small request leaves in one send, a large body
// does not sit whole in memory twice.
constexpr size_t kMaxUnsentBytes = 64 * 1024;

// The one client context: the CA store is loaded once (SSL_CTX_set_default_verify_paths reads
// SSL_CERT_FILE now and looks in SSL_CERT_DIR at each verification), and sessions made from it
// share it. Null when OpenSSL cannot make it.
SSL_CTX* ClientContext() {
  static SSL_CTX* const context = [] {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return ctx;
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_default_verify_paths(ctx) != 1) {
      SSL_CTX_free(ctx);
      return static_cast<SSL_CTX*>(nullptr);
    }
    // The handshake fails on a chain that does not verify, and SSL_set1_host's name is part of
    // the verification.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    return ctx;
  }();
  return context;
}

bool IsIpAddress(const std::string& host) {
  unsigned char address[16];
  return inet_pton(AF_INET, host.c_str(), address) == 1 ||
         inet_pton(AF_INET6, host.c_str(), address) == 1;
}

absl::Status HandshakeFailed(std::string_view why) {
  return UnavailableError(util::codes::kTlsHandshakeFailed, fmt::format("tls handshake: {}", why));
}

// The reason of OpenSSL's first queued error ("" when none), and the queue emptied.
std::string QueuedErrorText() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", code);
}

// An SSL call's failure as an error_code. With nothing queued (an SSL_ERROR_SYSCALL that our
// memory BIOs never raise), an I/O error.
error_code SslFailure() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return make_error_code(boost::system::errc::io_error);
  return error_code(static_cast<int>(code), net::error::get_ssl_category());
}

}  // namespace

// The session reads and writes memory BIOs instead of the socket: Fill and Flush move the
// ciphertext through transport_, whose waits carry the timeouts and the cancel check.
TlsStream::TlsStream(FdStream& transport) : transport_(transport) {
  SSL_CTX* ctx = ClientContext();
  if (ctx == nullptr) return;
  ssl_ = SSL_new(ctx);
  if (ssl_ == nullptr) return;
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (in == nullptr || out == nullptr) {
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl_);
    ssl_ = nullptr;
    return;
  }
  // An empty input BIO means "more to come" (SSL_ERROR_WANT_READ), not the end of the stream.
  BIO_set_mem_eof_return(in, -1);
  SSL_set_bio(ssl_, in, out);  // the session owns both
  SSL_set_connect_state(ssl_);
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

absl::Status TlsStream::Handshake(const std::string& host) {
  if (ssl_ == nullptr) return HandshakeFailed("OpenSSL could not set up a session");
  // RFC 6066 section 3: SNI names a host, never an address literal.
  if (!IsIpAddress(host) && SSL_set_tlsext_host_name(ssl_, host.c_str()) != 1) {
    return HandshakeFailed(fmt::format("bad host name ({})", QueuedErrorText()));
  }
  // A DNS name matches a DNS SAN (or the CN when there is none), an IP address an IP SAN. A
  // wildcard only as a whole left-most label (RFC 6125 section 6.4.3), as browsers match.
  SSL_set_hostflags(ssl_, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (SSL_set1_host(ssl_, host.c_str()) != 1) {
    return HandshakeFailed(fmt::format("bad host name ({})", QueuedErrorText()));
  }
  while (true) {
    ERR_clear_error();
    const int result = SSL_do_handshake(ssl_);
    const int error = SSL_get_error(ssl_, result);
    error_code ec;
    // Even a failed handshake has an alert to send: the server then logs why.
    const bool sent = Flush(ec);
    if (result == 1 && sent) return absl::OkStatus();
    if (sent && error == SSL_ERROR_WANT_READ && Fill(ec)) continue;
    if (ec == net::error::timed_out) {
      return MakeError(absl::StatusCode::kDeadlineExceeded, util::codes::kConnectTimeout,
                       "tls handshake: timed out");
    }
    if (ec == net::error::operation_aborted) {
      return MakeError(absl::StatusCode::kCancelled, util::codes::kClientClosedRequest,
                       "tls handshake: cancelled");
    }
    if (ec == net::ssl::error::stream_truncated) {
      return HandshakeFailed("the server closed the connection");
    }
    if (ec) return HandshakeFailed(ec.message());
    const long verified = SSL_get_verify_result(ssl_);
    if (verified != X509_V_OK) {
      ERR_clear_error();
      return HandshakeFailed(fmt::format("the server's certificate could not be verified ({})",
                                         X509_verify_cert_error_string(verified)));
    }
    const std::string why = QueuedErrorText();
    return HandshakeFailed(why.empty() ? "failed" : why);
  }
}

size_t TlsStream::Read(char* data, size_t size, error_code& ec) {
  ec = {};
  while (true) {
    ERR_clear_error();
    size_t n = 0;
    const int result = SSL_read_ex(ssl_, data, size, &n);
    if (result == 1) return n;
    const int error = SSL_get_error(ssl_, result);
    // A read may have made ciphertext to send (a TLS 1.3 key update's answer).
    if (!Flush(ec)) return 0;
    if (error == SSL_ERROR_WANT_READ) {
      if (!Fill(ec)) return 0;
      continue;
    }
    if (error == SSL_ERROR_ZERO_RETURN) {
      ec = net::error::eof;  // close_notify: the server's own end of the stream
      return 0;
    }
    ec = SslFailure();
    return 0;
  }
}

bool TlsStream::WriteAll(const iovec* iov, int count, error_code& ec) {
  ec = {};
  for (int i = 0; i < count; ++i) {
    const char* data = static_cast<const char*>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left > 0) {
      ERR_clear_error();
      size_t n = 0;
      const int result = SSL_write_ex(ssl_, data, std::min(left, kChunkBytes), &n);
      if (result == 1) {
        data += n;
        left -= n;
        if (BIO_ctrl_pending(SSL_get_wbio(ssl_)) >= kMaxUnsentBytes && !Flush(ec)) return false;
        continue;
      }
      const int error = SSL_get_error(ssl_, result);
      if (!Flush(ec)) return false;
      if (error == SSL_ERROR_WANT_READ) {
        if (!Fill(ec)) return false;
        continue;
      }
      ec = SslFailure();
      return false;
    }
  }
  return Flush(ec);
}

bool TlsStream::Flush(error_code& ec) {
  BIO* out = SSL_get_wbio(ssl_);
  char chunk[kChunkBytes];
  while (BIO_ctrl_pending(out) > 0) {
    const int n = BIO_read(out, chunk, sizeof(chunk));
    if (n <= 0) break;
    iovec iov{chunk, static_cast<size_t>(n)};
    while (iov.iov_len > 0) {
      const size_t sent = transport_.Write(&iov, 1, ec);
      if (ec) return false;
      iov.iov_base = static_cast<char*>(iov.iov_base) + sent;
      iov.iov_len -= sent;
    }
  }
  return true;
}

bool TlsStream::Fill(error_code& ec) {
  char chunk[kChunkBytes];
  const size_t n = transport_.Read(chunk, sizeof(chunk), ec);
  if (ec == net::error::eof) ec = net::ssl::error::stream_truncated;
  if (ec) return false;
  if (BIO_write(SSL_get_rbio(ssl_), chunk, static_cast<int>(n)) != static_cast<int>(n)) {
    ec = make_error_code(boost::system::errc::not_enough_memory);
    return false;
  }
  return true;
}

}  // namespace deepinfer::http
