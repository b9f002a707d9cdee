#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "util/sampling_params.h"

namespace deepinfer::engine {

// Per-request sampling settings (util/sampling_params.h: the protocol layer validates them, the
// engine reads them).
using SamplingParams = util::SamplingParams;

// One sampled token with its log-probability under the model's unmodified distribution.
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), best first
};

// `logits` [vocab] as log-probabilities (log-softmax, summed in double) into `out`: the model's
// raw distribution, before any sampling step, as OpenAI and vLLM ("raw_logprobs") report it.
void RawLogSoftmax(const float* logits, int32_t vocab, std::vector<float>* out);

// The `n` highest of `logprobs` as (token, logprob), best first, ties to the lower id, into
// `top` (replaced). `index` is scratch. Cost: O(vocab + n log vocab).
void TopLogprobs(const std::vector<float>& logprobs, int32_t n, std::vector<int32_t>* index,
                 std::vector<std::pair<int32_t, float>>* top);

// Chooses the next token of one sequence from its logits.
//
// The pipeline follows vLLM's order: logit bias, penalties, then greedy argmax or temperature,
// top-k, top-p, min-p and a draw from the seeded generator.
// Threads: one Sampler per sequence; not thread-safe.
// Cost: O(vocab) plus O(k log k) for the kept candidates; reuses internal buffers.
class Sampler {
 public:
  // `prompt` tokens count for the repetition penalty.
  Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt, uint64_t fallback_seed);

  // Samples from `logits` [vocab] (modified in place) and records the token as generated.
  // draft >= 0 verifies a speculative draft: a sampled request gets the draft with probability
  // p(draft), else a draw from p without it (renormalized), so the token is distributed as p
  // either way (p: the distribution after penalties, temperature, top-k, top-p and min-p); a
  // greedy one gets the argmax whatever the draft.
  // Source: Leviathan et al. 2023 and Chen et al. 2023 (speculative sampling), with the draft
  //   model's distribution a point mass on the draft (drafts are greedy guesses).
  SampledToken Sample(float* logits, int32_t vocab, int32_t draft = -1);

  // Records a token appended without sampling (speculative acceptance replays).
  void Accept(int32_t token);

  const SamplingParams& params() const { return params_; }

 private:
  void ApplyPenalties(float* logits, int32_t vocab) const;
  // The chosen token's log-probabilities (when asked for), then Accept.
  void Finish(SampledToken& out, int32_t vocab);

  SamplingParams params_;
  std::mt19937_64 rng_;
  absl::flat_hash_map<int32_t, int32_t> output_counts_;
  absl::flat_hash_map<int32_t, bool> prompt_tokens_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<float> raw_logprobs_;
  std::vector<double> probs_;
  std::vector<int32_t> top_index_;
};


}  // namespace deepinfer::engine
