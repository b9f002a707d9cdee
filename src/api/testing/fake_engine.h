#pragma once

// Test doubles for the API layer: an Engine that plays a fixed script of tokens, and a tiny
// byte-level tokenizer model (one token per byte plus ChatML control tokens).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "model/model.h"

namespace deepinfer::api::testing {

// A Model whose tokenizer maps each byte to one token (ids 0..255 in byte order) and has
// <|im_start|> (256), <|im_end|> (257, end of generation) and <|endoftext|> (258, EOS). No
// weights; enough for CreateTokenizer and CreateChatTemplate (ChatML).
std::unique_ptr<model::Model> MakeByteModel();
inline constexpr int32_t kImStart = 256;
inline constexpr int32_t kImEnd = 257;
inline constexpr int32_t kEndOfText = 258;

// The ids of `text` in the byte model.
std::vector<int32_t> ByteTokens(const std::string& text);

// An Engine that answers every request with the same script of tokens, one per step.
//
// It validates like the real engine (empty prompt, token ids, context length), finishes with
// kStop at an end-of-generation token (unless ignore_eos) or at the end of the script, with
// kLength at max_tokens, honours Cancel at the next step, and reports as cached the longest
// block-aligned (16 tokens) prefix shared with an earlier prompt.
// Threads: like Engine.
class FakeEngine : public engine::Engine {
 public:
  struct Options {
    int32_t max_model_len = 512;
    std::chrono::milliseconds step{1};
    bool ready = true;
    bool accepts_images = false;  // Engine::accepts_images
  };
  FakeEngine(const model::Model& model, Options options);
  ~FakeEngine() override;

  void SetScript(std::vector<int32_t> tokens);
  // The next submitted request fails inside the engine after `after_tokens` tokens.
  void FailNextAfter(int32_t after_tokens);
  // Holds every request in the queue (no tokens) until released.
  void Pause(bool paused) { paused_.store(paused); }

  absl::StatusOr<std::shared_ptr<engine::RequestStream>> Submit(
      engine::GenerateRequest request) override;
  engine::EngineStats Stats() const override;
  int32_t max_model_len() const override { return options_.max_model_len; }
  int64_t kv_capacity_tokens() const override { return 4096; }
  int64_t kv_bytes_per_token() const override { return 0; }
  const char* numerics_name() const override { return "fast"; }
  bool ready() const override { return options_.ready; }
  bool accepts_images() const override { return options_.accepts_images; }
  const model::Model& model() const override { return model_; }

  int num_submitted() const { return num_submitted_.load(); }
  int num_cancelled() const { return num_cancelled_.load(); }
  int num_active() const;
  std::vector<engine::GenerateRequest> submitted() const;

 private:
  struct Seq {
    engine::GenerateRequest request;
    std::shared_ptr<engine::RequestStream> stream;
    int32_t generated = 0;
    int32_t cached = 0;
    int32_t fail_after = -1;
  };
  void Loop();
  // Finishes `s`'s stream and counts the finish in stats_.
  void FinishLocked(Seq& s, engine::FinishReason reason, std::string error = {},
                    std::string code = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const model::Model& model_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> script_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Seq>> active_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::GenerateRequest> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<int32_t>> seen_prompts_ ABSL_GUARDED_BY(mu_);
  int32_t fail_next_after_ ABSL_GUARDED_BY(mu_) = -1;
  engine::EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> num_submitted_{0};
  std::atomic<int> num_cancelled_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace deepinfer::api::testing
