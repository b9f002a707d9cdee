#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "tensor/tensor.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// Expert parallelism (EP): every MoE layer's routed experts split over ranks() processes, rank r
// owning the contiguous range [FirstExpert(r), FirstExpert(r + 1)). Every rank runs the same
// step on the same tokens (attention, routing and the shared expert are replicated), runs only
// its own experts, and the results meet through two collectives (MoeDispatch::Run has the
// order). engine/expert_parallel.h implements it over MPI.
//
// Threads: collectives; call from the one thread that drives the forward pass, in the same order
//   on every rank (each call blocks until every rank has made it).
// Errors: none returned; a transport failure ends the process (a half-done collective cannot be
//   recovered from, and the other ranks would wait forever).
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // First expert of rank r out of `experts`: floor(experts * r / ranks()), so ranks differ by at
  // most one expert. FirstExpert(ranks(), E) == E.
  int FirstExpert(int r, int experts) const {
    return static_cast<int>(int64_t{experts} * r / ranks());
  }
  bool Owns(int expert, int experts) const {
    return expert >= FirstExpert(rank(), experts) && expert < FirstExpert(rank() + 1, experts);
  }
  // All-to-all of rows of `width` f32: send holds send_rows[d] rows for rank d, destinations in
  // rank order; recv receives recv_rows[s] rows from rank s, sources in rank order. Counts must
  // match pairwise (send_rows[d] on rank s == recv_rows[s] on rank d). Shapes: send_rows,
  // recv_rows [ranks()].
  virtual void AllToAllRows(const float* send, const int64_t* send_rows, float* recv,
                            const int64_t* recv_rows, int64_t width) = 0;
  // In-place all-gather: rank r holds rows [sum(rows[0..r)), + rows[r]) of `data` [sum(rows),
  // width] f32 and every rank ends with all of them. Shapes: rows [ranks()].
  virtual void AllGatherRows(float* data, const int64_t* rows, int64_t width) = 0;

  // What this rank's MoE layers spent, for telemetry. Written by the thread that drives the
  // forward pass (MoeDispatch and the collectives), read by it too (the engine publishes them).
  struct Counters {
    int64_t collectives = 0;        // AllToAllRows and AllGatherRows calls
    int64_t bytes = 0;              // row bytes this rank sent to and received from the others
    double exchange_seconds = 0;    // wall time inside those calls, waits for slower ranks included
    // Wall time running this rank's routed experts (with what the caller runs in their batches:
    // DeepSeek-V4's shared expert joins the first).
    double expert_seconds = 0;
  };
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }

 private:
  Counters counters_;
};

// One expert's rows in a MoE step. Shapes: in [n, H] f32; row_weights [n] (the rows' routing
// weights for an expert that applies them; null where it applies none: a shared expert, or
// MoeDispatch without weights_in_expert, which scales the results itself); result [n, H] f32.
struct ExpertRows {
  int expert;  // index among the routed experts; -1 for a shared expert
  const float* in;
  int64_t n;
  const float* row_weights;
  float* result;
};

// The routed-expert half of a DeepSeek MoE layer over one step's tokens: groups the (token,
// weight) pairs of the routing by expert (token order within an expert), gathers each expert's
// tokens into one matrix, runs the expert on it and adds weight * output into each token's row.
// The summation order per token is expert order, whatever the batch.
// Experts are handed to run_experts in batches, ascending, of about kBatchRows rows in all (an
// expert with more rows comes alone), so a decode step's experts can share parallel regions.
//
// Shapes: idx, weights [T, K] (expert ids in [0, num_experts)); x [T, H] f32; out [T, H] f32,
//   overwritten. run_experts(rows, count): for each entry, result = expert(in) over its rows.
// With `weights_in_expert` the expert applies each row's weight itself (DeepSeek-V4.1 scales
// before w2) and its result is added as it is; otherwise the result is scaled by the weight.
//
// With an ExpertExchange of more than one rank (set_exchange), run_experts is called for this
// rank's experts only, and the output is exactly what one process computes: the step's tokens
// are cut into ranks() contiguous slices, each expert's owner sends each result row to the
// owner of its token (AllToAllRows), which adds them in expert order with the same Axpy /
// AddInPlace, and the slices are then gathered on every rank (AllGatherRows). Per step a rank
// sends its experts' rows (T * K / ranks on average) and the gather moves T rows.
// Threads: not thread-safe (scratch); run_experts may use a thread pool.
class MoeDispatch {
 public:
  // Null or one rank: every expert runs here. Not owned; must outlive Run calls.
  void set_exchange(ExpertExchange* exchange) { exchange_ = exchange; }
  using ExpertBatchFn = std::function<void(const ExpertRows* rows, int count)>;
  // Rows per batch of experts handed to run_experts: a decode step's experts (a few rows each)
  // come in one batch, a long prefill's in batches of a few experts.
  static constexpr int64_t kBatchRows = 256;
  void Run(const int32_t* idx, const float* weights, int64_t T, int K, int num_experts,
           const float* x, int64_t H, float* out, const ExpertBatchFn& run_experts,
           bool weights_in_expert = false);

 private:
  // Runs this rank's experts and combines the slices (see the class comment).
  void RunSharded(int64_t T, int num_experts, const float* x, int64_t H, float* out,
                  const ExpertBatchFn& run_experts, bool weights_in_expert);
  // Runs experts [lo, hi) (those with rows) in batches, with the rows' weights only when the
  // expert applies them; after each batch, done(first, last) reads the results of experts
  // [first, last): expert e's rows are at result_ + (count_[e] - count_[first]) * H.
  void RunExperts(int lo, int hi, const float* x, int64_t H, bool weights_in_expert,
                  const ExpertBatchFn& run_experts,
                  const std::function<void(int first, int last)>& done);

  ExpertExchange* exchange_ = nullptr;
  std::vector<int32_t> count_, fill_, tokens_, token_owner_;
  std::vector<int64_t> send_rows_, recv_rows_, cursor_;
  std::vector<ExpertRows> batch_;
  util::AlignedVector<float> token_weights_, in_, result_, send_, recv_;
};

// One SwiGLU expert's matrices: w1 (gate) and w3 (up) [I, H], w2 (down) [H, I]. Not owned.
struct SwiGluWeights {
  const tensor::TensorView* w1 = nullptr;
  const tensor::TensorView* w3 = nullptr;
  const tensor::TensorView* w2 = nullptr;
};

// SwiGLU experts over their rows: result = w2(r * silu(g) * u) with g = w1 in, u = w3 in,
// clamped (g <= limit, |u| <= limit) when `clamp`, and r the row's routing weight (1 when
// row_weights is null). All the experts' w1 and w3 run in one MatMulBatch, then all their w2 in
// another: two parallel regions for a decode step's experts instead of two per expert. Each
// result is bit-identical to running its expert alone.
// Shapes: weights[i] for rows[i]; I may differ per expert.
// Threads: call from the pool's owner; not thread-safe (scratch).
class SwiGluExperts {
 public:
  void Run(const SwiGluWeights* weights, const ExpertRows* rows, int count, float limit, bool clamp,
           util::ThreadPool& pool);

 private:
  util::AlignedVector<float> gate_, up_;
  std::vector<int64_t> offset_;
  std::vector<kernels::MatMulJob> jobs_;
};

}  // namespace deepinfer::arch
