#pragma once

// The stable machine-readable error codes: each code a client of `serve` or the gateway can
// receive in an error body's "code" (or an operator sees in a start-up error), with the canonical
// status it is raised with, the HTTP status it is answered with, and what it means. Call sites
// name the constants (codes::kInvalidJson), never a string; docs/api.md's and docs/gateway.md's
// error tables list the same codes with the same HTTP status (error_codes_test checks both, and
// scripts/check_error_codes.py that no error code anywhere under src/ is a bare string).
//
// The HTTP status of a registered code raised with its canonical status comes from here
// (http::ApiErrorFromStatus); any other status is mapped by its canonical code alone.

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"

namespace deepinfer::util {

// Where a code can be seen (bits).
enum class ErrorSurface : uint8_t {
  kServe = 1,    // an answer of `deepinfer serve`
  kGateway = 2,  // an answer of `deepinfer gateway`
  kCommand = 4,  // a command's or process start-up's error line on stderr (never an HTTP body)
};
constexpr ErrorSurface operator|(ErrorSurface a, ErrorSurface b) {
  return static_cast<ErrorSurface>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
constexpr bool HasSurface(ErrorSurface set, ErrorSurface one) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(one)) != 0;
}

// One registered code. Converts to its name, so it can be passed wherever a code string is
// taken (MakeError, InvalidArgumentError, http::RequestError, ...).
struct ErrorCode {
  std::string_view name;         // the "code" field, snake_case
  absl::StatusCode status_code;  // the canonical status it is raised with
  int http_status;               // how serve / the gateway answer it (499: request log only)
  ErrorSurface surfaces;
  std::string_view meaning;  // one sentence, for the docs

  constexpr operator std::string_view() const { return name; }  // NOLINT: meant to convert
  friend constexpr bool operator==(const ErrorCode& code, std::string_view name) {
    return code.name == name;
  }
};

namespace codes {

inline constexpr ErrorCode kInvalidJson{"invalid_json", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kServe | ErrorSurface::kCommand,
                                        "The body is not JSON (or nests deeper than 256 levels)."};
inline constexpr ErrorCode kInvalidType{
    "invalid_type", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kGateway | ErrorSurface::kCommand,
    "A field has the wrong JSON type; `param` names it."};
inline constexpr ErrorCode kInvalidValue{"invalid_value", absl::StatusCode::kInvalidArgument, 400,
                                         ErrorSurface::kServe | ErrorSurface::kGateway,
                                         "A field is out of range or malformed; `param` names it."};
inline constexpr ErrorCode kMissingField{"missing_field", absl::StatusCode::kInvalidArgument, 400,
                                         ErrorSurface::kServe,
                                         "A required field is absent; `param` names it."};
inline constexpr ErrorCode kUnsupportedValue{
    "unsupported_value", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "A value the API defines but this server does not implement (built-in tools, JSON schemas, "
    "audio and file parts, ...)."};
inline constexpr ErrorCode kUnsupportedContent{
    "unsupported_content", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "A message carries content the served model cannot read yet (images); `param` names it."};
// Image inputs (src/image/): what a client's image bytes can fail with.
inline constexpr ErrorCode kInvalidImage{
    "invalid_image", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kCommand,
    "An image input cannot be decoded: empty, truncated, corrupt, or its header is inconsistent."};
inline constexpr ErrorCode kUnsupportedImageFormat{
    "unsupported_image_format", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kCommand,
    "An image input is not PNG, JPEG, WebP or GIF (judged from its first bytes), or is a variant "
    "of them the decoders do not read."};
inline constexpr ErrorCode kImageTooLarge{
    "image_too_large", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kCommand,
    "An image input exceeds the byte size or pixel count limit (checked from its header before "
    "any pixel is decoded)."};
inline constexpr ErrorCode kTooManyImages{
    "too_many_images", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "A request carries more images than --limit-images-per-request allows."};
inline constexpr ErrorCode kImageUrlNotAllowed{
    "image_url_not_allowed", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "An image URL this server may not read: a host outside --allowed-media-domains, a file "
    "outside --allowed-local-media-path, or another scheme; `param` names the part."};
inline constexpr ErrorCode kImageFetchFailed{
    "image_fetch_failed", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "An allowed image URL could not be read (connection, timeout, TLS certificate, HTTP "
    "status, missing file); `param` names the part."};
inline constexpr ErrorCode kInvalidToken{
    "invalid_token", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "A token id outside the vocabulary (prompt, logit_bias, stop_token_ids)."};
inline constexpr ErrorCode kInvalidConstraint{
    "invalid_constraint", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "A structured-output constraint (JSON schema, regex, choice, grammar) is malformed or uses a "
    "feature the grammar engine does not support; the message gives the engine's reason."};
inline constexpr ErrorCode kConstraintDeadEnd{
    "constraint_dead_end", absl::StatusCode::kInternal, 500, ErrorSurface::kServe,
    "The structured-output constraint allowed no next token (or every token it allowed was "
    "banned by logit_bias); the output so far stands, the request ends with this error."};
inline constexpr ErrorCode kUnsupportedOnPd{
    "unsupported_on_pd", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "The decode side of a P/D pair serves text prompts only (no images, no structured-output "
    "constraints); `param` names the field."};
inline constexpr ErrorCode kPdUnauthorized{
    "pd_unauthorized", absl::StatusCode::kUnauthenticated, 401, ErrorSurface::kServe,
    "An internal P/D call without the prefill side's DEEPINFER_PD_API_KEY as its bearer token."};
inline constexpr ErrorCode kInvalidDpRank{
    "invalid_dp_rank", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "X-data-parallel-rank is not an integer or names a rank the server does not have."};
inline constexpr ErrorCode kEmptyPrompt{"empty_prompt", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kServe, "The prompt renders to no tokens."};
inline constexpr ErrorCode kInvalidMaxTokens{
    "invalid_max_tokens", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "max_tokens is below 1 (engine check)."};
inline constexpr ErrorCode kContextLengthExceeded{
    "context_length_exceeded", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kGateway,
    "Prompt plus output exceed the context window; carries n_prompt_tokens and n_ctx."};
inline constexpr ErrorCode kKvCacheTooSmall{
    "kv_cache_too_small", absl::StatusCode::kResourceExhausted, 400, ErrorSurface::kServe,
    "The request alone needs more KV-cache blocks than the server has; retrying cannot help."};
inline constexpr ErrorCode kBadChatRequest{"bad_chat_request", absl::StatusCode::kInvalidArgument,
                                           400, ErrorSurface::kServe,
                                           "The chat encoder refused the conversation (e.g. a "
                                           "malformed tool call or an impossible turn order)."};
inline constexpr ErrorCode kSpeculativeUnsupported{
    "speculative_unsupported", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kServe,
    "Speculative decoding was asked of a model without MTP layers."};
inline constexpr ErrorCode kBadHttpRequest{
    "bad_http_request", absl::StatusCode::kInvalidArgument, 400,
    ErrorSurface::kServe | ErrorSurface::kGateway,
    "The bytes are not an HTTP/1.1 request (request line, headers, chunked body)."};
inline constexpr ErrorCode kMethodNotAllowed{
    "method_not_allowed", absl::StatusCode::kInvalidArgument, 405,
    ErrorSurface::kServe | ErrorSurface::kGateway, "The route exists but not for this method."};
inline constexpr ErrorCode kRequestTooLarge{"request_too_large", absl::StatusCode::kInvalidArgument,
                                            413, ErrorSurface::kServe | ErrorSurface::kGateway,
                                            "The body is larger than --max-request-bytes."};
inline constexpr ErrorCode kBodyTooLarge{"body_too_large", absl::StatusCode::kResourceExhausted,
                                         429, ErrorSurface::kCommand,
                                         "An HTTP client read an answer larger than its limit."};
inline constexpr ErrorCode kBadKeyId{"bad_key_id", absl::StatusCode::kInvalidArgument, 400,
                                     ErrorSurface::kGateway,
                                     "An admin call names a key id that is not a valid id."};
inline constexpr ErrorCode kKeyIdExists{"key_id_exists", absl::StatusCode::kAlreadyExists, 400,
                                        ErrorSurface::kGateway,
                                        "An admin call creates a key id that already exists."};
inline constexpr ErrorCode kMissingApiKey{"missing_api_key", absl::StatusCode::kUnauthenticated,
                                          401, ErrorSurface::kServe | ErrorSurface::kGateway,
                                          "No API key (Authorization: Bearer or x-api-key)."};
inline constexpr ErrorCode kInvalidApiKey{"invalid_api_key", absl::StatusCode::kUnauthenticated,
                                          401, ErrorSurface::kServe | ErrorSurface::kGateway,
                                          "The API key is not one the server was given."};
inline constexpr ErrorCode kExpiredApiKey{"expired_api_key", absl::StatusCode::kUnauthenticated,
                                          401, ErrorSurface::kGateway,
                                          "The API key is past its expiry."};
inline constexpr ErrorCode kAdminKeyRequired{
    "admin_key_required", absl::StatusCode::kPermissionDenied, 403, ErrorSurface::kGateway,
    "An admin route called without an admin key."};
inline constexpr ErrorCode kModelNotFound{
    "model_not_found", absl::StatusCode::kNotFound, 404,
    ErrorSurface::kServe | ErrorSurface::kCommand,
    "The request names a model this server does not serve; `param` is \"model\" (bench: the "
    "server does not list --model)."};
inline constexpr ErrorCode kNotFound{"not_found", absl::StatusCode::kNotFound, 404,
                                     ErrorSurface::kServe | ErrorSurface::kGateway,
                                     "No such route."};
inline constexpr ErrorCode kQueueFull{"queue_full", absl::StatusCode::kResourceExhausted, 429,
                                      ErrorSurface::kGateway,
                                      "The gateway wait queue is full (Retry-After)."};
inline constexpr ErrorCode kQueueTimeout{
    "queue_timeout", absl::StatusCode::kResourceExhausted, 429, ErrorSurface::kGateway,
    "The request waited longer than --queue-timeout for a slot (Retry-After)."};
inline constexpr ErrorCode kKeyConcurrencyExceeded{
    "key_concurrency_exceeded", absl::StatusCode::kResourceExhausted, 429, ErrorSurface::kGateway,
    "The key already has its most requests in flight (Retry-After)."};
inline constexpr ErrorCode kClientClosedRequest{
    "client_closed_request", absl::StatusCode::kCancelled, 499, ErrorSurface::kServe,
    "The client left before the answer (request log only; nginx's 499)."};
inline constexpr ErrorCode kConnectionClosed{
    "connection_closed", absl::StatusCode::kCancelled, 499, ErrorSurface::kCommand,
    "The peer closed the connection mid-exchange (request log only)."};
inline constexpr ErrorCode kInternalError{
    "internal_error", absl::StatusCode::kInternal, 500, ErrorSurface::kServe,
    "A bug: an unexpected exception or state; the message says where."};
inline constexpr ErrorCode kInternal{"internal", absl::StatusCode::kInternal, 500,
                                     ErrorSurface::kServe | ErrorSurface::kGateway,
                                     "A bug: an error was reported without a status."};
inline constexpr ErrorCode kEngineError{
    "engine_error", absl::StatusCode::kInternal, 500, ErrorSurface::kServe,
    "The engine failed the request without a more specific code."};
inline constexpr ErrorCode kIoError{
    "io_error", absl::StatusCode::kInternal, 500,
    ErrorSurface::kServe | ErrorSurface::kGateway | ErrorSurface::kCommand,
    "Reading or writing a file or socket failed."};
inline constexpr ErrorCode kNoResponse{"no_response", absl::StatusCode::kInternal, 500,
                                       ErrorSurface::kServe | ErrorSurface::kGateway,
                                       "A handler returned without answering (a bug)."};
inline constexpr ErrorCode kRedisError{"redis_error", absl::StatusCode::kInternal, 500,
                                       ErrorSurface::kGateway, "Redis answered with an error."};
inline constexpr ErrorCode kRngFailed{"rng_failed", absl::StatusCode::kInternal, 500,
                                      ErrorSurface::kGateway,
                                      "The system random source failed (key generation)."};
inline constexpr ErrorCode kEpollFailed{
    "epoll_failed", absl::StatusCode::kInternal, 500,
    ErrorSurface::kServe | ErrorSurface::kGateway | ErrorSurface::kCommand,
    "epoll could not be set up or waited on."};
inline constexpr ErrorCode kThreadFailed{
    "thread_failed", absl::StatusCode::kInternal, 500,
    ErrorSurface::kServe | ErrorSurface::kGateway | ErrorSurface::kCommand,
    "A worker thread could not be started."};
inline constexpr ErrorCode kBackendError{
    "backend_error", absl::StatusCode::kUnavailable, 502, ErrorSurface::kGateway,
    "The backend failed before answering (the retry budget is spent)."};
inline constexpr ErrorCode kBackendUnavailable{
    "backend_unavailable", absl::StatusCode::kUnavailable, 502, ErrorSurface::kGateway,
    "The backend refused the connection and no other healthy backend was left."};
inline constexpr ErrorCode kBackendDisconnected{
    "backend_disconnected", absl::StatusCode::kUnavailable, 502, ErrorSurface::kGateway,
    "The backend died mid-stream (sent as the last SSE event)."};
inline constexpr ErrorCode kModelLoading{
    "model_loading", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe,
    "The model is still loading (/health is 503 until it is ready)."};
inline constexpr ErrorCode kWarmingUp{
    "warming_up", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe,
    "The model is loaded and the --warmup-file requests are running (/health is 503 until they "
    "finish)."};
inline constexpr ErrorCode kPdPrefillUnavailable{
    "pd_prefill_unavailable", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe,
    "The decode side of a P/D pair could not get the prompt prefilled: its prefill side "
    "(--pd-prefill-url) is unreachable, refused the P/D key, failed, or could not write the "
    "checkpoint."};
inline constexpr ErrorCode kPdCheckpointNotWritten{
    "pd_checkpoint_not_written", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe,
    "The prefill side of a P/D pair computed the prompt but could not write its checkpoint "
    "(folder read-only or full, write queue full); its log says which."};
inline constexpr ErrorCode kShuttingDown{"shutting_down", absl::StatusCode::kUnavailable, 503,
                                         ErrorSurface::kServe,
                                         "The server is stopping; the request was ended."};
inline constexpr ErrorCode kEpRankLost{
    "ep_rank_lost", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe | ErrorSurface::kCommand,
    "An expert-parallel rank stopped answering; the server is ending (every rank exits non-zero)."};
inline constexpr ErrorCode kKvCacheExhausted{
    "kv_cache_exhausted", absl::StatusCode::kUnavailable, 503, ErrorSurface::kServe,
    "The KV cache ran out while the request ran and it could not be preempted."};
inline constexpr ErrorCode kCancelled{"cancelled", absl::StatusCode::kUnavailable, 503,
                                      ErrorSurface::kServe,
                                      "The engine cancelled the request on its own (shutdown)."};
inline constexpr ErrorCode kTooManyConnections{
    "too_many_connections", absl::StatusCode::kUnavailable, 503,
    ErrorSurface::kServe | ErrorSurface::kGateway, "More open connections than --max-connections."};
inline constexpr ErrorCode kNoHealthyBackend{
    "no_healthy_backend", absl::StatusCode::kUnavailable, 503, ErrorSurface::kGateway,
    "No admitted backend passes its health checks (Retry-After)."};
inline constexpr ErrorCode kAdmissionClosed{
    "admission_closed", absl::StatusCode::kUnavailable, 503, ErrorSurface::kGateway,
    "The admission file closed the pool to new requests (Retry-After)."};
inline constexpr ErrorCode kSharedStateUnavailable{
    "shared_state_unavailable", absl::StatusCode::kUnavailable, 503, ErrorSurface::kGateway,
    "Redis, which holds the shared state, cannot be reached."};
inline constexpr ErrorCode kConnectFailed{"connect_failed", absl::StatusCode::kUnavailable, 503,
                                          ErrorSurface::kCommand, "A TCP connect failed."};
inline constexpr ErrorCode kBackendTimeout{
    "backend_timeout", absl::StatusCode::kDeadlineExceeded, 504, ErrorSurface::kGateway,
    "No response headers from the backend within --header-timeout."};
inline constexpr ErrorCode kConnectTimeout{"connect_timeout", absl::StatusCode::kDeadlineExceeded,
                                           504, ErrorSurface::kCommand,
                                           "A TCP connect did not finish in time."};
inline constexpr ErrorCode kTimeout{"timeout", absl::StatusCode::kDeadlineExceeded, 504,
                                    ErrorSurface::kCommand,
                                    "An HTTP exchange passed its deadline."};
inline constexpr ErrorCode kTlsHandshakeFailed{
    "tls_handshake_failed", absl::StatusCode::kUnavailable, 503, ErrorSurface::kCommand,
    "A TLS handshake failed: the server's certificate could not be verified for its host, or the "
    "server shares no TLS 1.2 or later with the client."};
inline constexpr ErrorCode kBadFlags{"bad_flags", absl::StatusCode::kInvalidArgument, 400,
                                     ErrorSurface::kCommand,
                                     "A command-line flag is malformed or out of range."};
inline constexpr ErrorCode kBadOption{"bad_option", absl::StatusCode::kInvalidArgument, 400,
                                      ErrorSurface::kCommand, "An engine option is out of range."};
inline constexpr ErrorCode kBadAddress{"bad_address", absl::StatusCode::kInvalidArgument, 400,
                                       ErrorSurface::kCommand,
                                       "--host / --port is not an address to listen on."};
inline constexpr ErrorCode kBindFailed{"bind_failed", absl::StatusCode::kUnavailable, 503,
                                       ErrorSurface::kCommand,
                                       "The port could not be bound (in use, or not allowed)."};
inline constexpr ErrorCode kBadUrl{"bad_url", absl::StatusCode::kInvalidArgument, 400,
                                   ErrorSurface::kCommand,
                                   "A URL is not http://host[:port][/path]."};
inline constexpr ErrorCode kBadBackendUrl{"bad_backend_url", absl::StatusCode::kInvalidArgument,
                                          400, ErrorSurface::kCommand,
                                          "A --backend is not a usable URL."};
inline constexpr ErrorCode kBadBackendState{"bad_backend_state", absl::StatusCode::kInvalidArgument,
                                            400, ErrorSurface::kCommand,
                                            "The gateway backend state file is malformed."};
inline constexpr ErrorCode kBadBindingsFile{"bad_bindings_file", absl::StatusCode::kInvalidArgument,
                                            400, ErrorSurface::kCommand,
                                            "The session bindings file is malformed."};
inline constexpr ErrorCode kBadKeyStore{"bad_key_store", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kCommand, "The key store file is malformed."};
inline constexpr ErrorCode kBadStateUrl{"bad_state_url", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kCommand, "--state is not a redis:// URL."};
inline constexpr ErrorCode kNoRedis{"no_redis", absl::StatusCode::kUnimplemented, 400,
                                    ErrorSurface::kCommand,
                                    "A redis:// state was asked of a build without hiredis."};
inline constexpr ErrorCode kNoModel{
    "no_model", absl::StatusCode::kNotFound, 404, ErrorSurface::kCommand,
    "No --model and the default model is not in the cache (scripts/fetch_model.sh fetches it)."};
inline constexpr ErrorCode kUnsupportedNumerics{
    "unsupported_numerics", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "--numerics ggml was asked of a model it does not cover."};
inline constexpr ErrorCode kMpiUnavailable{
    "mpi_unavailable", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "--expert-parallel was asked of a deepinfer built without MPI."};
inline constexpr ErrorCode kMpiError{
    "mpi_error", absl::StatusCode::kInternal, 500, ErrorSurface::kCommand,
    "MPI could not start the expert-parallel group (mpirun's environment, thread support)."};
inline constexpr ErrorCode kEpMismatch{
    "ep_mismatch", absl::StatusCode::kInternal, 500, ErrorSurface::kCommand,
    "The expert-parallel ranks did not load the same model, layout and build."};
inline constexpr ErrorCode kUnsupportedKvCacheDtype{
    "unsupported_kv_cache_dtype", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "--kv-cache-dtype f16/bf16 was asked of a model or numerics whose attention reads f32 only."};
inline constexpr ErrorCode kBadWarmup{
    "bad_warmup", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "--warmup-file is unreadable or malformed, or one of its requests failed: serve does not "
    "start."};
inline constexpr ErrorCode kBadTelemetry{
    "bad_telemetry", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "DEEPINFER_BATCH_TELEMETRY_DIR is not an existing folder, or the run id is missing, not a "
    "plain name, or was used by an earlier run."};
inline constexpr ErrorCode kBadPrefixCheckpoint{
    "bad_prefix_checkpoint", absl::StatusCode::kDataLoss, 500, ErrorSurface::kCommand,
    "A prefix checkpoint file failed a check (truncated, bad format, corrupt, another model "
    "revision or layout, another prefix): it is ignored, counted and recomputed."};
inline constexpr ErrorCode kBadTokenizer{"bad_tokenizer", absl::StatusCode::kInvalidArgument, 400,
                                         ErrorSurface::kCommand,
                                         "The tokenizer data of the model is malformed."};
inline constexpr ErrorCode kUnsupportedTokenizer{
    "unsupported_tokenizer", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The model's tokenizer type is not implemented."};
inline constexpr ErrorCode kVocabMismatch{
    "vocab_mismatch", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "The tokenizer and the model disagree on the vocabulary size."};
inline constexpr ErrorCode kBadJson{
    "bad_json", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A JSON file of the model (tokenizer.json, config) is malformed."};
inline constexpr ErrorCode kBadRegex{"bad_regex", absl::StatusCode::kInvalidArgument, 400,
                                     ErrorSurface::kCommand,
                                     "A pre-tokenizer regex of the model does not compile."};
inline constexpr ErrorCode kUnknownChatTemplate{
    "unknown_chat_template", absl::StatusCode::kNotFound, 404, ErrorSurface::kCommand,
    "--chat-template names no encoder."};
inline constexpr ErrorCode kUnsupportedChatTemplate{
    "unsupported_chat_template", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The model's chat template is not one of the encoders."};
inline constexpr ErrorCode kBadGzip{"bad_gzip", absl::StatusCode::kDataLoss, 500,
                                    ErrorSurface::kCommand, "A gzip stream is corrupt."};
inline constexpr ErrorCode kFileExists{"file_exists", absl::StatusCode::kAlreadyExists, 400,
                                       ErrorSurface::kCommand,
                                       "A file that must not be overwritten exists."};
inline constexpr ErrorCode kFileNotFound{"file_not_found", absl::StatusCode::kNotFound, 404,
                                         ErrorSurface::kCommand, "A file does not exist."};
inline constexpr ErrorCode kNotAFile{"not_a_file", absl::StatusCode::kInvalidArgument, 400,
                                     ErrorSurface::kCommand, "A path is not a regular file."};

// Model files and the forward pass built from them: read and checked at start-up (serve,
// generate, the tools that load a model), never while a request runs.
inline constexpr ErrorCode kBadMagic{"bad_magic", absl::StatusCode::kInvalidArgument, 400,
                                     ErrorSurface::kCommand,
                                     "A model file is neither a GGUF file (no GGUF magic) nor a "
                                     "llama2.c checkpoint (.bin)."};
inline constexpr ErrorCode kUnsupportedVersion{
    "unsupported_version", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The GGUF file's version is not one the loader reads (2 and 3)."};
inline constexpr ErrorCode kTruncatedFile{"truncated_file", absl::StatusCode::kDataLoss, 500,
                                          ErrorSurface::kCommand,
                                          "A model file ends before the data its header promises."};
inline constexpr ErrorCode kBadHeader{
    "bad_header", absl::StatusCode::kDataLoss, 500, ErrorSurface::kCommand,
    "The header of a model file (a .safetensors header, a shard index, a llama2.c header) is "
    "damaged or inconsistent."};
inline constexpr ErrorCode kBadMetadata{
    "bad_metadata", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A model file's metadata (GGUF keys, tensor infos, tokenizer records) is malformed, of the "
    "wrong type or out of range."};
inline constexpr ErrorCode kMissingMetadata{"missing_metadata", absl::StatusCode::kNotFound, 404,
                                            ErrorSurface::kCommand,
                                            "A GGUF metadata key the model needs is absent."};
inline constexpr ErrorCode kOutOfBounds{
    "out_of_bounds", absl::StatusCode::kDataLoss, 500, ErrorSurface::kCommand,
    "A tensor of a GGUF file is too large or lies past the end of the file."};
inline constexpr ErrorCode kMissingShard{
    "missing_shard", absl::StatusCode::kNotFound, 404, ErrorSurface::kCommand,
    "A checkpoint folder has no model.safetensors or index, or a shard its index names is "
    "absent."};
inline constexpr ErrorCode kBadConfig{
    "bad_config", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "config.json is not JSON, or a key is missing, ill-typed, out of range or inconsistent."};
inline constexpr ErrorCode kUnsupportedConfig{
    "unsupported_config", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The model's config asks for a variant the forward pass does not implement."};
inline constexpr ErrorCode kUnsupportedArchitecture{
    "unsupported_architecture", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The model's architecture has no forward pass here."};
inline constexpr ErrorCode kMissingTensor{"missing_tensor", absl::StatusCode::kNotFound, 404,
                                          ErrorSurface::kCommand,
                                          "A tensor the model's config requires is absent."};
inline constexpr ErrorCode kUnexpectedTensor{
    "unexpected_tensor", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "The checkpoint holds a tensor that is no part of a model with its config."};
inline constexpr ErrorCode kShapeMismatch{
    "shape_mismatch", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A tensor's shape (or its scale grid) does not match the one the config implies."};
inline constexpr ErrorCode kUnsupportedDtype{
    "unsupported_dtype", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "A tensor is stored in a dtype the loader or the kernels do not read."};
inline constexpr ErrorCode kBadTensor{
    "bad_tensor", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A tensor's values are out of range (a hash-routing table naming a missing expert)."};
inline constexpr ErrorCode kNanInWeights{
    "nan_in_weights", absl::StatusCode::kDataLoss, 500, ErrorSurface::kCommand,
    "A checked tensor (a norm, a bias, a scale or a sampled weight row) holds NaN or Inf."};
inline constexpr ErrorCode kOutOfMemory{"out_of_memory", absl::StatusCode::kResourceExhausted, 429,
                                        ErrorSurface::kCommand,
                                        "The KV cache could not be reserved at start-up."};
inline constexpr ErrorCode kBadRecipe{
    "bad_recipe", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A recipe (a synthetic checkpoint's, or the one tools render turns into a launch script) is "
    "malformed or lacks a field it needs."};

// The tools (bench, smoke, watch, verify-model, render): their error line on stderr.
inline constexpr ErrorCode kBadFlag{"bad_flag", absl::StatusCode::kInvalidArgument, 400,
                                    ErrorSurface::kCommand,
                                    "A flag of bench is malformed or out of range (bench's own "
                                    "spelling; the other commands say bad_flags)."};
inline constexpr ErrorCode kBadHost{
    "bad_host", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A host path given to tools render cannot be bind-mounted into the docker launcher."};
inline constexpr ErrorCode kBadManifest{"bad_manifest", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kCommand,
                                        "The manifest tools verify-model reads is malformed."};
inline constexpr ErrorCode kRootNotFound{
    "root_not_found", absl::StatusCode::kNotFound, 404, ErrorSurface::kCommand,
    "The folder tools verify-model is to walk is not a directory."};
inline constexpr ErrorCode kBadInstance{"bad_instance", absl::StatusCode::kInvalidArgument, 400,
                                        ErrorSurface::kCommand,
                                        "A tools watch instance file is malformed."};
inline constexpr ErrorCode kWatchLocked{
    "watch_locked", absl::StatusCode::kFailedPrecondition, 400, ErrorSurface::kCommand,
    "Another tools watch holds the lock of the same state folder."};
inline constexpr ErrorCode kStillRunning{
    "still_running", absl::StatusCode::kDeadlineExceeded, 504, ErrorSurface::kCommand,
    "A watched instance did not exit within its wait after SIGTERM."};
inline constexpr ErrorCode kHttpError{
    "http_error", absl::StatusCode::kUnavailable, 503, ErrorSurface::kCommand,
    "The server bench measures answered a call with an HTTP status other than 200."};
inline constexpr ErrorCode kBadResponse{
    "bad_response", absl::StatusCode::kUnavailable, 503, ErrorSurface::kCommand,
    "The server bench measures answered with a body that lacks what bench needs."};
inline constexpr ErrorCode kNoTokenizerEndpoint{
    "no_tokenizer_endpoint", absl::StatusCode::kUnimplemented, 400, ErrorSurface::kCommand,
    "The server bench measures has no (de)tokenize endpoint bench knows."};
inline constexpr ErrorCode kInputTooShort{
    "input_too_short", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "A bench input length leaves no room for text after the BOS tokens."};
inline constexpr ErrorCode kInexactPrompt{
    "inexact_prompt", absl::StatusCode::kInternal, 500, ErrorSurface::kCommand,
    "bench could not build a prompt of exactly the asked number of tokens."};
inline constexpr ErrorCode kBadNeedles{"bad_needles", absl::StatusCode::kInvalidArgument, 400,
                                       ErrorSurface::kCommand,
                                       "The needle depths of bench are not 1 to 4, or do not "
                                       "match the needles one to one."};
inline constexpr ErrorCode kWindowTooSmall{
    "window_too_small", absl::StatusCode::kInvalidArgument, 400, ErrorSurface::kCommand,
    "The context window is too small for the bench needle haystack and its answers."};
inline constexpr ErrorCode kBadStatus{
    "bad_status", absl::StatusCode::kInternal, 500, ErrorSurface::kCommand,
    "The server tools smoke checks answered a chat completion with a status other than 200."};
inline constexpr ErrorCode kBadBody{
    "bad_body", absl::StatusCode::kInternal, 500, ErrorSurface::kCommand,
    "The server tools smoke checks answered a chat completion with a body that is not a JSON "
    "object."};

}  // namespace codes

// Every registered code, in the order above.
std::span<const ErrorCode> AllErrorCodes();

// The registered code named `name`, or nullptr.
// Cost: one hash lookup.
const ErrorCode* FindErrorCode(std::string_view name);

// A status with `code`'s canonical status and name (util::ErrorCodeOf reads it back).
absl::Status CodedError(const ErrorCode& code, std::string_view message);

}  // namespace deepinfer::util
