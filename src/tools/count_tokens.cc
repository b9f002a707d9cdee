#include "tools/count_tokens.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <span>

#include "fmt/format.h"
#include "image/deepseek_vision.h"
#include "image/image.h"
#include "model/model.h"
#include "protocol/anthropic_types.h"
#include "protocol/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/servable.h"
#include "tokenizer/tokenizer.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

using util::Json;

// The span of `ref` on a model with `vision`, when its bytes can be read here (a data: URI, a
// file:// path) and decode; nullopt otherwise (the caller reserves for it).
std::optional<int64_t> PlannedSpan(const api::ImageRef& ref,
                                   const model::DeepseekV41VisionConfig& vision) {
  const image::DecodeLimits limits;
  std::string bytes;
  if (api::IsDataUri(ref.url)) {
    absl::StatusOr<std::string> decoded = api::DecodeDataUri(ref.url, limits.max_bytes);
    if (!decoded.ok()) return std::nullopt;
    bytes = *std::move(decoded);
  } else if (ref.url.starts_with("file:///")) {
    std::ifstream in(ref.url.substr(7), std::ios::binary);
    if (!in) return std::nullopt;
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    return std::nullopt;
  }
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()),
                                      bytes.size());
  absl::StatusOr<image::RgbImage> decoded = image::DecodeImage(data, limits);
  if (!decoded.ok()) return std::nullopt;
  image::VisionKnobs knobs;
  knobs.patch_size = vision.patch_size;
  knobs.downsample_ratio = vision.downsample_ratio;
  knobs.max_image_tokens = vision.max_image_tokens;
  knobs.min_pixels = vision.min_pixels;
  if (vision.max_wh_ratio.has_value()) knobs.max_wh_ratio = *vision.max_wh_ratio;
  absl::StatusOr<image::ImageGridPlan> plan =
      image::PlanImageGrid(decoded->width, decoded->height, knobs);
  if (!plan.ok()) return std::nullopt;
  return plan->num_image_tokens();
}

// 1234567 -> "1,234,567".
std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

bool LooksAnthropic(const util::Json& body) {
  if (!body.is_object()) return false;
  if (body.contains("system")) return true;
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) return false;
  for (const util::Json& m : *messages) {
    if (!m.is_object()) continue;
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    for (const util::Json& block : *content) {
      if (!block.is_object()) continue;
      std::string type = block.value("type", "");
      if (type == "tool_use" || type == "tool_result" || type == "thinking" ||
          type == "redacted_thinking" || (type == "image" && block.contains("source"))) {
        return true;
      }
    }
  }
  return false;
}

std::vector<std::string> ToolCallIds(const std::string& tool_calls_json) {
  std::vector<std::string> ids;
  if (tool_calls_json.empty()) return ids;
  auto calls = util::ParseJson(tool_calls_json);
  if (!calls.ok() || !calls->is_array()) return ids;
  for (const util::Json& c : *calls) {
    if (c.is_object() && c.contains("id") && c["id"].is_string()) {
      ids.push_back(c["id"].get<std::string>());
    }
  }
  return ids;
}

}  // namespace

CompactionPlan PlanCompaction(const std::vector<api::ChatMessage>& messages) {
  CompactionPlan plan;
  const int32_t n = static_cast<int32_t>(messages.size());
  int32_t start = 0;
  while (start < n && (messages[start].role == "system" || messages[start].role == "developer")) {
    ++start;
  }
  // The last message is the turn being answered; it is never summarised.
  const int32_t history = n - start;
  if (history < 3) {
    plan.reason =
        fmt::format("only {} message(s) after the system prompt; nothing to summarise", history);
    return plan;
  }
  // owner[j]: the assistant turn whose tool call message j answers (-1 when j is not a result).
  std::map<std::string, int32_t> call_owner;
  std::vector<int32_t> owner(n, -1);
  int32_t last_caller = -1;
  for (int32_t i = 0; i < n; ++i) {
    const api::ChatMessage& m = messages[i];
    if (m.role == "assistant" && !m.tool_calls_json.empty()) {
      last_caller = i;
      for (const std::string& id : ToolCallIds(m.tool_calls_json)) call_owner[id] = i;
    } else if (m.role == "tool") {
      auto it = m.tool_call_id.empty() ? call_owner.end() : call_owner.find(m.tool_call_id);
      owner[i] = it != call_owner.end() ? it->second : last_caller;
    }
  }
  // A boundary b (range [start, b)) is safe when no result at or after b answers a call before b.
  auto safe = [&](int32_t b) {
    for (int32_t j = b; j < n; ++j) {
      if (owner[j] >= 0 && owner[j] < b) return false;
    }
    for (int32_t j = start; j < b; ++j) {
      if (owner[j] >= 0 && owner[j] < start) return false;
    }
    return true;
  };
  const int32_t target = start + history / 2;
  const int32_t lo = start + 1;  // at least one message summarised
  const int32_t hi = n - 1;      // the last message kept
  int32_t chosen = -1;
  for (int32_t d = 0; chosen < 0 && (target - d >= lo || target + d <= hi); ++d) {
    if (target - d >= lo && target - d <= hi && safe(target - d)) {
      chosen = target - d;
    } else if (d > 0 && target + d <= hi && target + d >= lo && safe(target + d)) {
      chosen = target + d;
    }
  }
  if (chosen < 0) {
    plan.reason = "every boundary splits a tool call from its result; no safe range exists";
    return plan;
  }
  plan.possible = true;
  plan.begin = start;
  plan.end = chosen;
  plan.num_messages = chosen - start;
  plan.reason = chosen == target
                    ? "the first half of the history"
                    : fmt::format(
                          "the first half of the history, end moved by {} message(s) to "
                          "keep tool calls with their results",
                          chosen - target);
  return plan;
}

struct RequestCounter::Impl {
  tokenizer::Servable servable;
  const tokenizer::Tokenizer* tokenizer = nullptr;          // servable's
  const tokenizer::ChatTemplate* chat_template = nullptr;  // servable's
  int32_t window = 0;  // the model's context window, in tokens
  std::string template_name;
};

RequestCounter::RequestCounter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RequestCounter::~RequestCounter() = default;

absl::StatusOr<std::unique_ptr<RequestCounter>> RequestCounter::Create(
    const std::string& model_path, const std::string& tokenizer_path,
    const std::string& chat_template) {
  auto impl = std::make_unique<Impl>();
  // The same loader as `deepinfer serve`, so the tokenizer and encoder are the server's.
  DI_ASSIGN_OR_RETURN(impl->servable,
                      tokenizer::LoadServable({.model_path = model_path,
                                               .tokenizer_path = tokenizer_path,
                                               .chat_template = chat_template}));
  impl->tokenizer = impl->servable.tokenizer.get();
  impl->chat_template = impl->servable.chat_template.get();
  impl->window = impl->servable.model->config.max_context;
  impl->template_name = std::string(impl->chat_template->name());
  return std::unique_ptr<RequestCounter>(new RequestCounter(std::move(impl)));
}

int32_t RequestCounter::model_window() const { return impl_->window; }

const std::string& RequestCounter::template_name() const { return impl_->template_name; }

absl::StatusOr<int64_t> RequestCounter::CountMessages(const std::vector<api::ChatMessage>& messages,
                                                      const tokenizer::ChatOptions& options) const {
  // Each image renders as one image token here (any id does); those are left out of the text
  // count, and the images are counted apart.
  DI_ASSIGN_OR_RETURN(api::ChatPrompt prompt,
                      api::RenderChatPrompt(*impl_->tokenizer, *impl_->chat_template, messages,
                                            options, api::kCountOnlyImageToken));
  return static_cast<int64_t>(prompt.tokens.size() - prompt.image_positions.size());
}

TokenBudget ResolveBudget(const BudgetFlags& flags, int64_t model_window,
                          std::optional<int64_t> request_max_tokens) {
  TokenBudget budget;
  budget.image_tokens = flags.image_tokens;
  if (flags.profile == BudgetProfile::kModel) {
    budget.window = flags.window ? std::min(*flags.window, model_window) : model_window;
    budget.output_tokens = std::max<int64_t>(request_max_tokens.value_or(1), 1);
    budget.headroom_tokens = 0;
    budget.answer_fills_window = true;
  } else if (flags.window) {
    budget.window = *flags.window;
  }
  if (flags.output_tokens) budget.output_tokens = *flags.output_tokens;
  if (flags.headroom_tokens) budget.headroom_tokens = *flags.headroom_tokens;
  return budget;
}

absl::StatusOr<TokenCount> RequestCounter::Count(std::string_view body, RequestFormat format,
                                                 const BudgetFlags& flags) const {
  TokenCount count;
  if (format == RequestFormat::kAuto) {
    auto json = util::ParseJson(body);
    if (!json.ok()) return json.status();
    format = LooksAnthropic(*json) ? RequestFormat::kAnthropic : RequestFormat::kOpenAi;
  }
  if (format == RequestFormat::kAnthropic) {
    count.format = "anthropic";
    DI_ASSIGN_OR_RETURN(util::Json json, util::ParseJson(body));
    if (!json.is_object()) {
      return InvalidArgumentError(util::codes::kInvalidType,
                                  "The request body must be a JSON object.");
    }
    DI_ASSIGN_OR_RETURN(api::AnthropicChat chat, api::ParseAnthropicChat(json));
    if (auto it = json.find("max_tokens"); it != json.end() && it->is_number_integer()) {
      count.max_tokens = it->get<int64_t>();
    }
    count.messages = std::move(chat.messages);
    count.options = std::move(chat.options);
    count.num_images = chat.num_images;
  } else {
    count.format = "openai";
    DI_ASSIGN_OR_RETURN(
        api::ChatRequest request,
        api::ParseChatRequestForCount(body, api::ParseLimits{impl_->tokenizer->vocab_size()},
                                      &count.num_images));
    count.options = api::ChatOptionsFor(request);
    count.messages = std::move(request.messages);
    count.max_tokens = request.params.max_tokens;
  }
  count.budget = ResolveBudget(flags, model_window(), count.max_tokens);
  // The request's own max_tokens may leave no room (the server refuses it: COMPACT); flags that
  // do are a mistake of the command line.
  const bool flags_set_reservation = flags.profile == BudgetProfile::kOperator ||
                                     flags.output_tokens.has_value() ||
                                     flags.headroom_tokens.has_value();
  if (count.budget.limit() <= 0 && flags_set_reservation) {
    return InvalidArgumentError(
        util::codes::kBadFlags,
        fmt::format("the output reservation ({}) and headroom ({}) leave no room in "
                    "the window of {} tokens",
                    count.budget.output_tokens, count.budget.headroom_tokens, count.budget.window));
  }
  DI_ASSIGN_OR_RETURN(count.text_tokens, CountMessages(count.messages, count.options));
  const model::ModelConfig& config = impl_->servable.model->config;
  const model::DeepseekV41VisionConfig* vision =
      config.deepseek_v4.has_value() && config.deepseek_v4->vision.has_value()
          ? &*config.deepseek_v4->vision
          : nullptr;
  for (const api::ChatMessage& m : count.messages) {
    for (const api::ImageRef& ref : m.images) {
      std::optional<int64_t> span = vision ? PlannedSpan(ref, *vision) : std::nullopt;
      count.num_planned_images += span.has_value() ? 1 : 0;
      count.image_tokens += span.value_or(count.budget.image_tokens);
    }
  }
  count.input_tokens = count.text_tokens + count.image_tokens;
  count.needs_compaction = count.input_tokens >= count.budget.limit();
  return count;
}

absl::Status RequestCounter::CountPlan(const TokenCount& count, CompactionPlan* plan) const {
  if (!plan->possible) return absl::OkStatus();
  std::vector<api::ChatMessage> kept;
  for (int32_t i = 0; i < static_cast<int32_t>(count.messages.size()); ++i) {
    if (i < plan->begin || i >= plan->end) kept.push_back(count.messages[i]);
  }
  DI_ASSIGN_OR_RETURN(int64_t kept_tokens, CountMessages(kept, count.options));
  plan->input_tokens_after = kept_tokens + count.image_tokens;
  return absl::OkStatus();
}

std::string FormatTokenCount(const TokenCount& count, const CompactionPlan* plan) {
  const TokenBudget& budget = count.budget;
  std::string out;
  std::string images;
  if (count.num_images > 0 && count.num_planned_images == 0) {
    images = fmt::format("  (text {} + {} image(s) x {})", Grouped(count.text_tokens),
                         count.num_images, Grouped(budget.image_tokens));
  } else if (count.num_images > 0) {
    images = fmt::format("  (text {} + {} image(s): {} tokens, {} at their span)",
                         Grouped(count.text_tokens), count.num_images,
                         Grouped(count.image_tokens), count.num_planned_images);
  }
  out += fmt::format("{:<20} {:>11}{}\n", "input tokens", Grouped(count.input_tokens), images);
  out += fmt::format("{:<20} {:>11}\n", "output reservation", Grouped(budget.output_tokens));
  out += fmt::format("{:<20} {:>11}\n", "headroom", Grouped(budget.headroom_tokens));
  out += fmt::format("{:<20} {:>11}\n", "window", Grouped(budget.window));
  out += fmt::format("{:<20} {:>11}  (compaction from here)\n", "limit", Grouped(budget.limit()));
  if (count.needs_compaction) {
    out += fmt::format("{:<20} {:>11}  compaction needed: {} tokens over the limit\n", "verdict",
                       "COMPACT", Grouped(count.input_tokens - budget.limit() + 1));
  } else {
    out += fmt::format("{:<20} {:>11}  {} tokens to spare\n", "verdict", "fits",
                       Grouped(budget.limit() - 1 - count.input_tokens));
  }
  if (plan != nullptr) {
    if (plan->possible) {
      out += fmt::format("{:<20} messages [{}, {}) ({} messages): {}; {} tokens without them\n",
                         "compaction plan", plan->begin, plan->end, plan->num_messages,
                         plan->reason, Grouped(plan->input_tokens_after));
    } else {
      out += fmt::format("{:<20} none: {}\n", "compaction plan", plan->reason);
    }
  }
  return out;
}

std::string TokenCountJson(const TokenCount& count, const CompactionPlan* plan,
                           int32_t model_window) {
  const TokenBudget& budget = count.budget;
  util::Json out = util::Json::object();
  out["format"] = count.format;
  out["input_tokens"] = count.input_tokens;
  out["text_tokens"] = count.text_tokens;
  out["num_images"] = count.num_images;
  out["image_tokens_each"] = budget.image_tokens;
  out["image_tokens"] = count.image_tokens;
  out["num_planned_images"] = count.num_planned_images;
  out["output_tokens"] = budget.output_tokens;
  out["headroom_tokens"] = budget.headroom_tokens;
  out["window"] = budget.window;
  out["limit"] = budget.limit();
  out["profile"] = budget.answer_fills_window ? "model" : "operator";
  out["model_window"] = model_window;
  out["verdict"] = count.needs_compaction ? "compact" : "fits";
  out["num_messages"] = count.messages.size();
  if (plan != nullptr) {
    util::Json p = util::Json::object();
    p["possible"] = plan->possible;
    if (plan->possible) {
      p["begin"] = plan->begin;
      p["end"] = plan->end;
      p["num_messages"] = plan->num_messages;
      p["input_tokens_after"] = plan->input_tokens_after;
    }
    p["reason"] = plan->reason;
    out["compaction_plan"] = std::move(p);
  }
  return util::DumpJson(out) + "\n";
}

}  // namespace deepinfer::tools
