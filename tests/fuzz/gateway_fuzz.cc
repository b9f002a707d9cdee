// Feeds arbitrary bytes to what the gateway reads from clients and operators before anything
// else: the Authorization / x-api-key headers, the request body (session id extraction and the
// context pre-check), the admission file, the key store and backend URLs. None may crash or
// break its documented invariants, whatever the bytes.
//
// Input layout: bytes up to the first '\n' are the Authorization header, up to the second '\n'
// the session header; the rest is the body (and, in turn, each file format).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/admission.h"
#include "gateway/backends.h"
#include "gateway/key_store.h"
#include "gateway/request_info.h"
#include "http/errors.h"

namespace gw = deepinfer::gateway;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t first = input.find('\n');
  std::string_view authorization = input.substr(0, first);
  std::string_view rest = first == std::string_view::npos ? "" : input.substr(first + 1);
  size_t second = rest.find('\n');
  std::string_view session_header = rest.substr(0, second);
  std::string_view body = second == std::string_view::npos ? rest : rest.substr(second + 1);

  std::string_view key = gw::PresentedKey(authorization, session_header);
  // The key is a trimmed piece of one of the two headers.
  if (!key.empty() && (key.front() == ' ' || key.back() == ' ')) __builtin_trap();
  if (key.size() > authorization.size() + session_header.size()) __builtin_trap();

  gw::BodyInfo info = gw::InspectBody(body);
  if (info.prompt_text_bytes < 0 || info.prompt_text_bytes > static_cast<int64_t>(body.size())) {
    __builtin_trap();
  }
  if (info.prompt_token_ids < 0 || info.prompt_token_ids > static_cast<int64_t>(body.size())) {
    __builtin_trap();
  }
  if (!info.conversation_digest.empty() && info.conversation_digest.size() != 32)
    __builtin_trap();  // XXH3-128 hex
  // Whatever the request path (simdjson) accepts, nlohmann's parser accepts and reads the same.
  gw::BodyInfo ref = info.json_object ? gw::InspectBodyWithNlohmann(body) : info;
  if (info.json_object != ref.json_object || info.max_tokens != ref.max_tokens ||
      info.stream != ref.stream || info.model != ref.model || info.user != ref.user ||
      info.metadata_user_id != ref.metadata_user_id ||
      info.prompt_text_bytes != ref.prompt_text_bytes ||
      info.prompt_token_ids != ref.prompt_token_ids ||
      info.conversation_digest != ref.conversation_digest) {
    __builtin_trap();
  }

  gw::SessionId session = gw::ExtractSession("fuzz", session_header, info);
  if (session.key.empty() != session.source.empty()) __builtin_trap();
  if (!session.key.empty() && session.key.size() != 32) __builtin_trap();

  for (int64_t limit : {int64_t{1}, int64_t{4096}, int64_t{1} << 20}) {
    absl::Status check = gw::PreCheck(info, gw::PreCheckLimits{limit, 32});
    if (!check.ok()) {
      // A context verdict, or serve's own answer to a max-tokens value it cannot read as a
      // count (beyond int32, or a non-integral float such as 4000.15).
      deepinfer::http::ApiError error = deepinfer::http::ApiErrorFromStatus(check);
      if (error.http_status != 400) __builtin_trap();
      if (error.code != "context_length_exceeded" && error.code != "invalid_type" &&
          error.code != "invalid_value") {
        __builtin_trap();
      }
    }
  }

  static const std::vector<gw::BackendAddress> kPool = {
      *gw::ParseBackendUrl("http://127.0.0.1:9001"), *gw::ParseBackendUrl("http://[::1]:9002")};
  gw::Admission admission = gw::ParseAdmission(body, kPool);
  if (admission.admitted.size() != kPool.size()) __builtin_trap();
  bool any = admission.admitted[0] || admission.admitted[1];
  if (admission.open != any) __builtin_trap();
  if (!admission.open && admission.reason == "ok") __builtin_trap();

  auto store = gw::KeyStore::Parse(body);
  if (store.ok()) {
    // A parsed store serializes to a store that parses to the same records.
    auto again = gw::KeyStore::Parse((*store)->Serialize());
    if (!again.ok() || (*again)->records().size() != (*store)->records().size()) __builtin_trap();
    (*store)->Authenticate(key, 0);
  }

  auto url = gw::ParseBackendUrl(authorization);
  if (url.ok()) {
    auto normalized = gw::ParseBackendUrl(url->origin());
    if (!normalized.ok() || normalized->origin() != url->origin()) __builtin_trap();
  }
  return 0;
}
