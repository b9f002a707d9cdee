#pragma once

#include <cstdint>
#include <functional>
#include <vector>
#include "util/aligned_vector.h"

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
    double expert_seconds = 0;      // wall time running this rank's routed experts
  };
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }

 private:
  Counters counters_;
};

// The routed-expert half of a DeepSeek MoE layer over one step's tokens: groups the (token,
// weight) pairs of the routing by expert (token order within an expert), gathers each expert's
// tokens into one matrix, runs the expert on it and adds weight * output into each token's row.
// The summation order per token is expert order, whatever the batch.
//
// Shapes: idx, weights [T, K] (expert ids in [0, num_experts)); x [T, H] f32; out [T, H] f32,
//   overwritten. run_expert(e, in [n, H], n, row_weights [n], result [n, H]).
// With `weights_in_expert` the expert applies each row's weight itself (DeepSeek-V4.1 scales
// before w2) and its result is added as it is; otherwise the result is scaled by the weight.
//
// With an ExpertExchange of more than one rank (set_exchange), run_expert is called for this
// rank's experts only, and the output is exactly what one process computes: the step's tokens
// are cut into ranks() contiguous slices, each expert's owner sends each result row to the
// owner of its token (AllToAllRows), which adds them in expert order with the same Axpy /
// AddInPlace, and the slices are then gathered on every rank (AllGatherRows). Per step a rank
// sends its experts' rows (T * K / ranks on average) and the gather moves T rows.
// Threads: not thread-safe (scratch); run_expert may use a thread pool.
class MoeDispatch {
 public:
  // Null or one rank: every expert runs here. Not owned; must outlive Run calls.
  void set_exchange(ExpertExchange* exchange) { exchange_ = exchange; }
  using ExpertFn = std::function<void(int e, const float* in, int64_t n, const float* row_weights,
                                      float* result)>;
  void Run(const int32_t* idx, const float* weights, int64_t T, int K, int num_experts,
           const float* x, int64_t H, float* out, const ExpertFn& run_expert,
           bool weights_in_expert = false);

 private:
  // Runs this rank's experts and combines the slices (see the class comment).
  void RunSharded(int64_t T, int num_experts, const float* x, int64_t H, float* out,
                  const ExpertFn& run_expert, bool weights_in_expert);
  void GatherRows(int32_t begin, int32_t n, const float* x, int64_t H);

  ExpertExchange* exchange_ = nullptr;
  std::vector<int32_t> count_, fill_, tokens_, token_owner_;
  std::vector<int64_t> send_rows_, recv_rows_, cursor_;
  util::AlignedVector<float> token_weights_, in_, result_, send_, recv_;
};

}  // namespace deepinfer::arch
