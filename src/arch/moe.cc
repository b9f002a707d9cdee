#include "arch/moe.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace deepinfer::arch {

void MoeDispatch::Run(const int32_t* idx, const float* weights, int64_t T, int K, int num_experts,
                      const float* x, int64_t H, float* out, const ExpertFn& run_expert,
                      bool weights_in_expert) {
  const int E = num_experts;
  count_.assign(E + 1, 0);
  for (int64_t i = 0; i < T * K; ++i) ++count_[idx[i] + 1];
  for (int e = 0; e < E; ++e) count_[e + 1] += count_[e];
  if (static_cast<int64_t>(tokens_.size()) < T * K) {
    tokens_.resize(T * K);
    token_weights_.resize(T * K);
  }
  fill_.assign(count_.begin(), count_.end() - 1);
  for (int64_t t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) {
      const int e = idx[t * K + k];
      tokens_[fill_[e]] = static_cast<int32_t>(t);
      token_weights_[fill_[e]] = weights[t * K + k];
      ++fill_[e];
    }
  }
  std::fill(out, out + T * H, 0.0f);
  for (int e = 0; e < E; ++e) {
    const int32_t begin = count_[e], n = count_[e + 1] - begin;
    if (n == 0) continue;
    if (static_cast<int64_t>(in_.size()) < int64_t{n} * H) {
      in_.resize(int64_t{n} * H);
      result_.resize(int64_t{n} * H);
    }
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(in_.data() + int64_t{i} * H, x + int64_t{tokens_[begin + i]} * H,
                  H * sizeof(float));
    }
    run_expert(e, in_.data(), n, token_weights_.data() + begin, result_.data());
    for (int32_t i = 0; i < n; ++i) {
      float* dst = out + int64_t{tokens_[begin + i]} * H;
      const float* src = result_.data() + int64_t{i} * H;
      if (weights_in_expert) {
        kernels::AddInPlace(dst, src, H);
      } else {
        kernels::Axpy(token_weights_[begin + i], src, dst, H);
      }
    }
  }
}

}  // namespace deepinfer::arch
