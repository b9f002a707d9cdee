#pragma once

// The sampling settings of one request: what the protocol layer (protocol/openai_types.h)
// validates out of a request body and the engine's sampler (engine/sampler.h) reads. Plain data,
// here so that both use the one type without either including the other.

#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer::util {

// Per-request sampling settings, validated at the API boundary.
//
// Units: temperature >= 0 (0 means greedy); top_p in (0, 1]; min_p in [0, 1]; top_k <= 0 means
//   off; repetition_penalty > 0 (1 means off); presence/frequency penalties in [-2, 2].
// Source: OpenAI API reference (presence/frequency penalty, logit_bias); vLLM SamplingParams
//   (top_k, min_p, repetition_penalty semantics: repetition over prompt and output, presence and
//   frequency over output only); Keskar et al. 2019 (repetition penalty).
struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
  bool has_seed = false;
  int32_t num_top_logprobs = -1;  // -1: no logprobs; 0..20: chosen token (+ that many top ones)

  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace deepinfer::util
