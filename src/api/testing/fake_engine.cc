#include "api/testing/fake_engine.h"

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "util/status.h"

namespace deepinfer::api::testing {
namespace {

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to U+0100 onward.
std::string ByteLevelPiece(int byte) {
  static const std::vector<int> kCodepoints = [] {
    std::vector<int> cp(256, -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      cp[b] = printable ? b : next++;
    }
    return cp;
  }();
  int c = kCodepoints[byte];
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

}  // namespace

std::unique_ptr<model::Model> MakeByteModel() {
  auto m = std::make_unique<model::Model>();
  m->config.architecture = "llama";
  m->config.name = "byte-model";
  m->config.vocab = 259;
  m->config.max_context = 512;
  model::TokenizerData& t = m->tokenizer;
  t.kind = model::TokenizerData::Kind::kByteLevelBpe;
  t.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    t.tokens.push_back(ByteLevelPiece(b));
    t.token_types.push_back(model::TokenType::kNormal);
  }
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    t.tokens.push_back(special);
    t.token_types.push_back(model::TokenType::kControl);
  }
  t.eos_id = kEndOfText;
  t.eog_ids = {kImEnd, kEndOfText};
  return m;
}

std::vector<int32_t> ByteTokens(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

FakeEngine::FakeEngine(const model::Model& model, Options options)
    : model_(model), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

FakeEngine::~FakeEngine() {
  stop_.store(true);
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& s : active_) s->stream->Finish(engine::FinishReason::kCancelled, 0, 0, 0);
}

void FakeEngine::SetScript(std::vector<int32_t> tokens) {
  absl::MutexLock lock(&mu_);
  script_ = std::move(tokens);
}

void FakeEngine::FailNextAfter(int32_t after_tokens) {
  absl::MutexLock lock(&mu_);
  fail_next_after_ = after_tokens;
}

int FakeEngine::num_active() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(active_.size());
}

std::vector<engine::GenerateRequest> FakeEngine::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

absl::StatusOr<std::shared_ptr<engine::RequestStream>> FakeEngine::Submit(
    engine::GenerateRequest request) {
  if (request.prompt.empty()) return InvalidArgumentError("empty_prompt", "empty prompt");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= model_.config.vocab) {
      return InvalidArgumentError("invalid_token", "token id outside the vocabulary");
    }
  }
  if (static_cast<int64_t>(request.prompt.size()) + request.max_tokens > options_.max_model_len) {
    return InvalidArgumentError("context_length_exceeded", "too long");
  }
  auto seq = std::make_unique<Seq>();
  seq->stream = std::make_shared<engine::RequestStream>(64);
  absl::MutexLock lock(&mu_);
  int32_t best = 0;
  for (const auto& p : seen_prompts_) {
    size_t n =
        std::mismatch(p.begin(), p.end(), request.prompt.begin(), request.prompt.end()).first -
        p.begin();
    best = std::max<int32_t>(best, static_cast<int32_t>(n / 16 * 16));
  }
  // A fully cached prompt still needs its last token computed.
  if (best == static_cast<int32_t>(request.prompt.size())) best -= 16;
  seq->cached = best;
  seen_prompts_.push_back(request.prompt);
  seq->fail_after = fail_next_after_;
  fail_next_after_ = -1;
  submitted_.push_back(request);
  seq->request = std::move(request);
  auto stream = seq->stream;
  active_.push_back(std::move(seq));
  num_submitted_.fetch_add(1);
  stats_.num_waiting++;
  return stream;
}

engine::EngineStats FakeEngine::Stats() const {
  absl::MutexLock lock(&mu_);
  engine::EngineStats s = stats_;
  s.num_running = static_cast<int64_t>(active_.size());
  s.num_waiting = 0;
  return s;
}

void FakeEngine::FinishLocked(Seq& s, engine::FinishReason reason, std::string error,
                              std::string code) {
  const int32_t prompt_len = static_cast<int32_t>(s.request.prompt.size());
  s.stream->Finish(reason, prompt_len, s.cached, s.generated, error, code);
  stats_.num_requests_finished[static_cast<int>(reason)]++;
  stats_.prompt_tokens += prompt_len;
}

void FakeEngine::Loop() {
  while (!stop_.load()) {
    std::this_thread::sleep_for(options_.step);
    if (paused_.load()) {
      // Queued requests still notice cancellation, like the real scheduler.
      absl::MutexLock lock(&mu_);
      for (auto it = active_.begin(); it != active_.end();) {
        if ((*it)->stream->cancelled()) {
          (*it)->stream->Finish(engine::FinishReason::kCancelled, (*it)->request.prompt.size(), 0,
                                0);
          num_cancelled_.fetch_add(1);
          stats_.num_requests_finished[3]++;
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      continue;
    }
    absl::MutexLock lock(&mu_);
    for (auto it = active_.begin(); it != active_.end();) {
      Seq& s = **it;
      if (s.stream->cancelled()) {
        FinishLocked(s, engine::FinishReason::kCancelled);
        num_cancelled_.fetch_add(1);
        it = active_.erase(it);
        continue;
      }
      if (s.stream->Full()) {
        ++it;
        continue;
      }
      if (s.fail_after >= 0 && s.generated >= s.fail_after) {
        FinishLocked(s, engine::FinishReason::kError, "injected failure", "kv_cache_exhausted");
        it = active_.erase(it);
        continue;
      }
      if (s.generated >= static_cast<int32_t>(script_.size())) {
        FinishLocked(s, engine::FinishReason::kStop);
        it = active_.erase(it);
        continue;
      }
      engine::TokenEvent event;
      event.token = script_[s.generated];
      event.logprob = -0.5f;
      for (int32_t k = 0; k < s.request.sampling.num_top_logprobs; ++k) {
        event.top_logprobs.emplace_back((event.token + k) % model_.config.vocab,
                                        -0.5f - static_cast<float>(k));
      }
      s.stream->PushToken(event);
      s.generated++;
      stats_.generation_tokens++;
      bool eog = std::find(model_.tokenizer.eog_ids.begin(), model_.tokenizer.eog_ids.end(),
                           event.token) != model_.tokenizer.eog_ids.end();
      bool stop_id = std::find(s.request.stop_token_ids.begin(), s.request.stop_token_ids.end(),
                               event.token) != s.request.stop_token_ids.end();
      if ((eog && !s.request.ignore_eos) || stop_id) {
        FinishLocked(s, engine::FinishReason::kStop);
        it = active_.erase(it);
      } else if (s.generated >= s.request.max_tokens) {
        FinishLocked(s, engine::FinishReason::kLength);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace deepinfer::api::testing
