#pragma once

#include <cstdint>
#include <functional>
#include <vector>
#include "util/aligned_vector.h"

namespace deepinfer::arch {

// The routed-expert half of a DeepSeek MoE layer over one step's tokens: groups the (token,
// weight) pairs of the routing by expert (token order within an expert), gathers each expert's
// tokens into one matrix, runs the expert on it and adds weight * output into each token's row.
// The summation order per token is expert order, whatever the batch.
//
// Shapes: idx, weights [T, K] (expert ids in [0, num_experts)); x [T, H] f32; out [T, H] f32,
//   overwritten. run_expert(e, in [n, H], n, row_weights [n], result [n, H]).
// With `weights_in_expert` the expert applies each row's weight itself (DeepSeek-V4.1 scales
// before w2) and its result is added as it is; otherwise the result is scaled by the weight.
// Threads: not thread-safe (scratch); run_expert may use a thread pool.
class MoeDispatch {
 public:
  using ExpertFn = std::function<void(int e, const float* in, int64_t n, const float* row_weights,
                                      float* result)>;
  void Run(const int32_t* idx, const float* weights, int64_t T, int K, int num_experts,
           const float* x, int64_t H, float* out, const ExpertFn& run_expert,
           bool weights_in_expert = false);

 private:
  std::vector<int32_t> count_, fill_, tokens_;
  util::AlignedVector<float> token_weights_, in_, result_;
};

}  // namespace deepinfer::arch
