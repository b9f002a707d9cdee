#include "util/error_codes.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "util/status.h"

namespace deepinfer::util {
namespace {

constexpr ErrorCode kAll[] = {
    codes::kInvalidJson,
    codes::kInvalidType,
    codes::kInvalidValue,
    codes::kMissingField,
    codes::kUnsupportedValue,
    codes::kUnsupportedContent,
    codes::kInvalidImage,
    codes::kUnsupportedImageFormat,
    codes::kImageTooLarge,
    codes::kTooManyImages,
    codes::kImageUrlNotAllowed,
    codes::kImageFetchFailed,
    codes::kInvalidToken,
    codes::kEmptyPrompt,
    codes::kInvalidMaxTokens,
    codes::kContextLengthExceeded,
    codes::kKvCacheTooSmall,
    codes::kBadChatRequest,
    codes::kSpeculativeUnsupported,
    codes::kBadHttpRequest,
    codes::kMethodNotAllowed,
    codes::kRequestTooLarge,
    codes::kBodyTooLarge,
    codes::kBadKeyId,
    codes::kKeyIdExists,
    codes::kMissingApiKey,
    codes::kInvalidApiKey,
    codes::kExpiredApiKey,
    codes::kAdminKeyRequired,
    codes::kModelNotFound,
    codes::kNotFound,
    codes::kQueueFull,
    codes::kQueueTimeout,
    codes::kKeyConcurrencyExceeded,
    codes::kClientClosedRequest,
    codes::kConnectionClosed,
    codes::kInternalError,
    codes::kInternal,
    codes::kEngineError,
    codes::kIoError,
    codes::kNoResponse,
    codes::kRedisError,
    codes::kRngFailed,
    codes::kEpollFailed,
    codes::kThreadFailed,
    codes::kBackendError,
    codes::kBackendUnavailable,
    codes::kBackendDisconnected,
    codes::kModelLoading,
    codes::kWarmingUp,
    codes::kPdPrefillUnavailable,
    codes::kPdCheckpointNotWritten,
    codes::kShuttingDown,
    codes::kKvCacheExhausted,
    codes::kCancelled,
    codes::kTooManyConnections,
    codes::kNoHealthyBackend,
    codes::kAdmissionClosed,
    codes::kSharedStateUnavailable,
    codes::kConnectFailed,
    codes::kBackendTimeout,
    codes::kConnectTimeout,
    codes::kTimeout,
    codes::kTlsHandshakeFailed,
    codes::kBadFlags,
    codes::kBadOption,
    codes::kBadAddress,
    codes::kBindFailed,
    codes::kBadUrl,
    codes::kBadBackendUrl,
    codes::kBadBackendState,
    codes::kBadBindingsFile,
    codes::kBadKeyStore,
    codes::kBadStateUrl,
    codes::kNoRedis,
    codes::kNoModel,
    codes::kUnsupportedNumerics,
    codes::kUnsupportedKvCacheDtype,
    codes::kBadWarmup,
    codes::kInvalidDpRank,
    codes::kInvalidConstraint,
    codes::kConstraintDeadEnd,
    codes::kUnsupportedOnPd,
    codes::kPdUnauthorized,
    codes::kBadTelemetry,
    codes::kBadPrefixCheckpoint,
    codes::kBadTokenizer,
    codes::kUnsupportedTokenizer,
    codes::kVocabMismatch,
    codes::kBadJson,
    codes::kBadRegex,
    codes::kUnknownChatTemplate,
    codes::kUnsupportedChatTemplate,
    codes::kBadGzip,
    codes::kFileExists,
    codes::kFileNotFound,
    codes::kNotAFile,
    codes::kBadMagic,
    codes::kUnsupportedVersion,
    codes::kTruncatedFile,
    codes::kBadHeader,
    codes::kBadMetadata,
    codes::kMissingMetadata,
    codes::kOutOfBounds,
    codes::kMissingShard,
    codes::kBadConfig,
    codes::kUnsupportedConfig,
    codes::kUnsupportedArchitecture,
    codes::kMissingTensor,
    codes::kUnexpectedTensor,
    codes::kShapeMismatch,
    codes::kUnsupportedDtype,
    codes::kBadTensor,
    codes::kNanInWeights,
    codes::kOutOfMemory,
    codes::kBadRecipe,
    codes::kBadFlag,
    codes::kBadHost,
    codes::kBadManifest,
    codes::kRootNotFound,
    codes::kBadInstance,
    codes::kWatchLocked,
    codes::kStillRunning,
    codes::kHttpError,
    codes::kBadResponse,
    codes::kNoTokenizerEndpoint,
    codes::kInputTooShort,
    codes::kInexactPrompt,
    codes::kBadNeedles,
    codes::kWindowTooSmall,
    codes::kBadStatus,
    codes::kBadBody,
};

}  // namespace

std::span<const ErrorCode> AllErrorCodes() { return kAll; }

const ErrorCode* FindErrorCode(std::string_view name) {
  static const auto* const by_name = [] {
    auto* map = new absl::flat_hash_map<std::string_view, const ErrorCode*>();
    for (const ErrorCode& code : kAll) map->emplace(code.name, &code);
    return map;
  }();
  auto it = by_name->find(name);
  return it == by_name->end() ? nullptr : it->second;
}

absl::Status CodedError(const ErrorCode& code, std::string_view message) {
  return deepinfer::MakeError(code.status_code, code.name, message);
}

}  // namespace deepinfer::util
