#include "protocol/warmup_file.h"

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

absl::Status Bad(int line, const std::string& what) {
  return InvalidArgumentError(util::codes::kBadWarmup,
                              fmt::format("warm-up file line {}: {}", line, what));
}

absl::StatusOr<WarmupRequest> Classify(const util::Json& body, std::string_view text, int line) {
  if (!body.is_object()) return Bad(line, "a request body must be a JSON object");
  const bool chat = body.contains("messages"), completion = body.contains("prompt");
  if (chat == completion) {
    return Bad(line, chat ? "a body has either \"messages\" (chat) or \"prompt\" (completion), "
                            "not both"
                          : "a body needs \"messages\" (chat) or \"prompt\" (completion)");
  }
  return WarmupRequest{chat ? "/v1/chat/completions" : "/v1/completions", std::string(text), line};
}

}  // namespace

absl::StatusOr<std::vector<WarmupRequest>> ParseWarmupFile(std::string_view text) {
  std::vector<WarmupRequest> out;
  // The whole file as one value first: a pretty-printed body spans lines.
  absl::StatusOr<util::Json> whole = util::ParseJson(text);
  if (whole.ok() && whole->is_object()) {
    size_t first = text.find_first_not_of(" \t\r\n");
    int line = 1;
    for (size_t i = 0; i < first && i < text.size(); ++i) line += text[i] == '\n';
    DI_ASSIGN_OR_RETURN(WarmupRequest r, Classify(*whole, text, line));
    out.push_back(std::move(r));
    return out;
  }
  int line = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view one = text.substr(pos, end - pos);
    ++line;
    pos = end + 1;
    if (one.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<util::Json> body = util::ParseJson(one);
    if (!body.ok()) {
      return Bad(line, "not JSON (one request body per line, or the whole file one body): " +
                           std::string(body.status().message()));
    }
    DI_ASSIGN_OR_RETURN(WarmupRequest r, Classify(*body, one, line));
    out.push_back(std::move(r));
  }
  if (out.empty()) return Bad(1, "no request body in the file");
  return out;
}

}  // namespace deepinfer::api
