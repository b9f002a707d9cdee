#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace deepinfer::engine {

Sampler::Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt,
                 uint64_t fallback_seed)
    : params_(params), rng_(params.has_seed ? params.seed : fallback_seed) {
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t t : prompt) prompt_tokens_[t] = true;
  }
}

void Sampler::Accept(int32_t token) { output_counts_[token]++; }

void Sampler::ApplyPenalties(float* logits, int32_t vocab) const {
  for (const auto& [tok, bias] : params_.logit_bias) {
    if (tok >= 0 && tok < vocab) logits[tok] += bias;
  }
  const float rep = params_.repetition_penalty;
  if (rep != 1.0f) {
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      logits[t] = logits[t] > 0 ? logits[t] / rep : logits[t] * rep;
    };
    for (const auto& [t, unused] : prompt_tokens_) penalize(t);
    for (const auto& [t, unused] : output_counts_) {
      if (!prompt_tokens_.contains(t)) penalize(t);
    }
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : output_counts_) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= params_.presence_penalty + params_.frequency_penalty * count;
    }
  }
}

void RawLogSoftmax(const float* logits, int32_t vocab, std::vector<float>* out) {
  out->assign(logits, logits + vocab);
  const float mx = *std::max_element(out->begin(), out->end());
  double sum = 0;
  for (float v : *out) sum += std::exp(static_cast<double>(v - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (float& v : *out) v -= lse;
}

void TopLogprobs(const std::vector<float>& logprobs, int32_t n, std::vector<int32_t>* index,
                 std::vector<std::pair<int32_t, float>>* top) {
  top->clear();
  const int32_t vocab = static_cast<int32_t>(logprobs.size());
  n = std::min(n, vocab);
  if (n <= 0) return;
  std::vector<int32_t>& idx = *index;
  idx.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b);
  });
  for (int32_t i = 0; i < n; ++i) top->emplace_back(idx[i], logprobs[idx[i]]);
}

SampledToken Sampler::Sample(float* logits, int32_t vocab, int32_t draft) {
  SampledToken out;
  const bool want_logprobs = params_.num_top_logprobs >= 0;
  // Log-probabilities are reported for the model's own distribution, before any processing.
  if (want_logprobs) RawLogSoftmax(logits, vocab, &raw_logprobs_);
  ApplyPenalties(logits, vocab);

  if (params_.greedy()) {
    out.token = kernels::ArgMax(logits, vocab);
  } else {
    candidates_.clear();
    candidates_.reserve(vocab);
    for (int32_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i], i);
    auto by_logit = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t keep = candidates_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
      keep = params_.top_k;
      std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                        by_logit);
    } else {
      std::sort(candidates_.begin(), candidates_.end(), by_logit);
    }
    candidates_.resize(keep);
    // Softmax at temperature over the kept candidates (sorted, so [0] is the max).
    const double inv_t = 1.0 / params_.temperature;
    std::vector<double>& probs = probs_;
    probs.resize(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) {
      probs[i] = std::exp((candidates_[i].first - candidates_[0].first) * inv_t);
      sum += probs[i];
    }
    for (double& p : probs) p /= sum;
    if (params_.top_p < 1.0f) {
      double cum = 0;
      size_t n = 0;
      while (n < keep) {
        cum += probs[n++];
        if (cum >= params_.top_p) break;
      }
      keep = std::max<size_t>(1, n);
    }
    if (params_.min_p > 0.0f) {
      double floor_p = probs[0] * params_.min_p;
      size_t n = 1;
      while (n < keep && probs[n] >= floor_p) ++n;
      keep = n;
    }
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
    // A draft among the kept candidates is accepted with its probability; on rejection (or
    // when it is not a candidate: probability 0) the draw below leaves it out.
    size_t skip = keep;
    if (draft >= 0) {
      for (size_t i = 0; i < keep; ++i) {
        if (candidates_[i].second == draft) skip = i;
      }
      if (skip < keep) {
        if (std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < probs[skip] / total) {
          out.token = draft;
          Finish(out, vocab);
          return out;
        }
        total -= probs[skip];
      }
    }
    double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
    size_t chosen = keep;
    double acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      if (i == skip) continue;
      chosen = i;  // the last candidate left, should rounding carry r past the end
      acc += probs[i];
      if (r < acc) break;
    }
    out.token = candidates_[chosen].second;
  }

  Finish(out, vocab);
  return out;
}

void Sampler::Finish(SampledToken& out, int32_t vocab) {
  if (params_.num_top_logprobs >= 0) {
    out.logprob = raw_logprobs_[out.token];
    TopLogprobs(raw_logprobs_, params_.num_top_logprobs, &top_index_, &out.top);
  }
  Accept(out.token);
}

}  // namespace deepinfer::engine
