// Before any OpenSSL header: SHA256_Init and friends are deprecated in OpenSSL 3.
#define OPENSSL_SUPPRESS_DEPRECATED

#include "util/sha256.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace deepinfer::util {

Sha256Digest Sha256(std::string_view data) {
  // OpenSSL's SHA256_* functions, not EVP: in OpenSSL 3.0 every EVP_DigestInit_ex frees and
  // allocates (and cleanses) the provider's context, even with the algorithm fetched once and
  // the EVP context reused. This runs once per request (a key); measured: 90 ns hot through
  // EVP, 50 ns this way, and EVP was 1.6-2.6 % of the gateway's CPU at 5,000 req/s
  // (docs/gateway.md). Deprecated in OpenSSL 3, not removed.
  Sha256Digest out{};
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, data.data(), data.size());
  SHA256_Final(out.data(), &ctx);
  OPENSSL_cleanse(&ctx, sizeof(ctx));
  return out;
}

}  // namespace deepinfer::util
