#pragma once

// TLS for the HTTP client (https:// image fetches): one client session over a connected socket,
// through OpenSSL. The ciphertext moves through the socket's FdStream, so every wait of the
// handshake and of the reads obeys the same timeouts, deadline and cancel check as plain HTTP.

#include <sys/uio.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "boost/asio/buffer.hpp"
#include "boost/system/error_code.hpp"
#include "http/socket_io.h"

typedef struct ssl_st SSL;

namespace deepinfer::http {

// A TLS client session on `transport`, shaped as a Beast SyncReadStream. The server's certificate
// chain must verify against the system's default CA store (OpenSSL's default file and folder, or
// SSL_CERT_FILE / SSL_CERT_DIR when set; the file is read once per process, at the first
// handshake) and name the host (a DNS name, or an IP address in an IP SAN); SNI carries a DNS
// name. TLS 1.2 or later.
// Errors: Handshake: Unavailable "tls_handshake_failed" (a certificate that could not be
//   verified, no common protocol, the server closed), DeadlineExceeded "connect_timeout",
//   Cancelled "client_closed_request". Read and Write: FdStream's error_codes, OpenSSL's
//   (boost::asio::error::get_ssl_category()), and boost::asio::ssl::error::stream_truncated when
//   the connection ends without TLS's close_notify (a body cut short, not its end); eof after
//   close_notify.
// Threads: one thread at a time. Lifetime: borrows `transport`.
class TlsStream : public SyncReadSome<TlsStream> {
 public:
  explicit TlsStream(FdStream& transport);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Runs the handshake with the server `host` (as in the URL: a name or an IP address).
  absl::Status Handshake(const std::string& host);

  // Reads decrypted bytes: what is there now, else waits as FdStream::Read does. Returns bytes
  // read; 0 with ec set on an error.
  size_t Read(char* data, size_t size, boost::system::error_code& ec);
  // Writes all of the `count` buffers of `iov`, in one send when they fit the socket. False with
  // ec set on an error.
  bool WriteAll(const iovec* iov, int count, boost::system::error_code& ec);


 private:
  // Sends the ciphertext the session has made. False with ec on an error.
  bool Flush(boost::system::error_code& ec);
  // Waits for the next ciphertext from the socket and hands it to the session. False with ec on
  // an error; stream_truncated when the socket ended.
  bool Fill(boost::system::error_code& ec);

  FdStream& transport_;
  SSL* ssl_ = nullptr;  // null when OpenSSL could not set up a session (out of memory)
};

}  // namespace deepinfer::http
