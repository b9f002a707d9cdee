#include "arch/moe.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace deepinfer::arch {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void MoeDispatch::Run(const int32_t* idx, const float* weights, int64_t T, int K, int num_experts,
                      const float* x, int64_t H, float* out, const ExpertBatchFn& run_experts,
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
  if (exchange_ != nullptr && exchange_->ranks() > 1) {
    RunSharded(T, E, x, H, out, run_experts, weights_in_expert);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::fill(out, out + T * H, 0.0f);
  RunExperts(0, E, x, H, weights_in_expert, run_experts, [&](int first, int last) {
    const float* src = result_.data();
    for (int32_t i = count_[first]; i < count_[last]; ++i, src += H) {
      float* dst = out + int64_t{tokens_[i]} * H;
      if (weights_in_expert) {
        kernels::AddInPlace(dst, src, H);
      } else {
        kernels::Axpy(token_weights_[i], src, dst, H);
      }
    }
  });
  if (exchange_ != nullptr) exchange_->counters().expert_seconds += SecondsSince(start);
}

void MoeDispatch::RunExperts(int lo, int hi, const float* x, int64_t H, bool weights_in_expert,
                             const ExpertBatchFn& run_experts,
                             const std::function<void(int first, int last)>& done) {
  for (int first = lo; first < hi;) {
    // The batch: experts from `first` while the rows stay within kBatchRows (at least one).
    int last = first + 1;
    while (last < hi && count_[last + 1] - count_[first] <= kBatchRows) ++last;
    const int64_t rows = count_[last] - count_[first];
    if (rows == 0) {
      first = last;
      continue;
    }
    if (static_cast<int64_t>(in_.size()) < rows * H) {
      in_.resize(rows * H);
      result_.resize(rows * H);
    }
    batch_.clear();
    for (int e = first; e < last; ++e) {
      const int32_t begin = count_[e], n = count_[e + 1] - begin;
      if (n == 0) continue;
      const int64_t at = int64_t{begin - count_[first]} * H;
      for (int32_t i = 0; i < n; ++i) {
        std::memcpy(in_.data() + at + int64_t{i} * H, x + int64_t{tokens_[begin + i]} * H,
                    H * sizeof(float));
      }
      batch_.push_back({e, in_.data() + at, n,
                        weights_in_expert ? token_weights_.data() + begin : nullptr,
                        result_.data() + at});
    }
    run_experts(batch_.data(), static_cast<int>(batch_.size()));
    done(first, last);
    first = last;
  }
}

void MoeDispatch::RunSharded(int64_t T, int E, const float* x, int64_t H, float* out,
                             const ExpertBatchFn& run_experts, bool weights_in_expert) {
  ExpertExchange& ex = *exchange_;
  const int N = ex.ranks(), me = ex.rank();
  // Token t belongs to slice r when T * r / N <= t < T * (r + 1) / N.
  token_owner_.resize(T);
  for (int r = 0; r < N; ++r) {
    for (int64_t t = T * r / N; t < T * (r + 1) / N; ++t) token_owner_[t] = r;
  }
  const int lo = ex.FirstExpert(me, E), hi = ex.FirstExpert(me + 1, E);
  send_rows_.assign(N, 0);
  recv_rows_.assign(N, 0);
  for (int r = 0, e = 0; e < E; ++e) {
    while (e >= ex.FirstExpert(r + 1, E)) ++r;  // r owns expert e
    for (int32_t i = count_[e]; i < count_[e + 1]; ++i) {
      const int d = token_owner_[tokens_[i]];
      if (e >= lo && e < hi) ++send_rows_[d];
      if (d == me) ++recv_rows_[r];
    }
  }
  int64_t total_send = 0, total_recv = 0;
  cursor_.resize(N);
  for (int d = 0; d < N; ++d) {
    cursor_[d] = total_send;
    total_send += send_rows_[d];
    total_recv += recv_rows_[d];
  }
  if (static_cast<int64_t>(send_.size()) < total_send * H) send_.resize(total_send * H);
  if (static_cast<int64_t>(recv_.size()) < total_recv * H) recv_.resize(total_recv * H);
  // Own experts, in expert order; each result row goes to its token's slice in the send buffer,
  // so every destination's rows stay in (expert, token) order.
  const auto start = std::chrono::steady_clock::now();
  RunExperts(lo, hi, x, H, weights_in_expert, run_experts, [&](int first, int last) {
    const float* src = result_.data();
    for (int32_t i = count_[first]; i < count_[last]; ++i, src += H) {
      const int d = token_owner_[tokens_[i]];
      std::memcpy(send_.data() + cursor_[d]++ * H, src, H * sizeof(float));
    }
  });
  ex.counters().expert_seconds += SecondsSince(start);
  ex.AllToAllRows(send_.data(), send_rows_.data(), recv_.data(), recv_rows_.data(), H);
  // Sources arrive in rank order and ranks own ascending expert ranges, so the received rows
  // are in global expert order: each token's sum runs in the order one process uses.
  const int64_t first = T * me / N, last = T * (me + 1) / N;
  std::fill(out + first * H, out + last * H, 0.0f);
  const float* row = recv_.data();
  for (int e = 0; e < E; ++e) {
    for (int32_t i = count_[e]; i < count_[e + 1]; ++i) {
      if (token_owner_[tokens_[i]] != me) continue;
      float* dst = out + int64_t{tokens_[i]} * H;
      if (weights_in_expert) {
        kernels::AddInPlace(dst, row, H);
      } else {
        kernels::Axpy(token_weights_[i], row, dst, H);
      }
      row += H;
    }
  }
  std::vector<int64_t>& slice_rows = cursor_;  // free again
  for (int r = 0; r < N; ++r) slice_rows[r] = T * (r + 1) / N - T * r / N;
  ex.AllGatherRows(out, slice_rows.data(), H);
}

void SwiGluExperts::Run(const SwiGluWeights* weights, const ExpertRows* rows, int count,
                        float limit, bool clamp, util::ThreadPool& pool) {
  offset_.assign(1, 0);
  for (int i = 0; i < count; ++i)
    offset_.push_back(offset_.back() + rows[i].n * weights[i].w1->rows());
  util::Grow(gate_, offset_.back());
  util::Grow(up_, offset_.back());
  jobs_.clear();
  for (int i = 0; i < count; ++i) {
    jobs_.push_back({weights[i].w1, rows[i].in, rows[i].n, gate_.data() + offset_[i]});
    jobs_.push_back({weights[i].w3, rows[i].in, rows[i].n, up_.data() + offset_[i]});
  }
  kernels::MatMulBatch(jobs_.data(), static_cast<int>(jobs_.size()), pool);
  jobs_.clear();
  for (int i = 0; i < count; ++i) {
    const int64_t I = weights[i].w1->rows(), n = rows[i].n;
    float* gate = gate_.data() + offset_[i];
    float* up = up_.data() + offset_[i];
    if (clamp) {
      for (int64_t j = 0; j < n * I; ++j) {
        gate[j] = std::min(gate[j], limit);
        up[j] = std::clamp(up[j], -limit, limit);
      }
    }
    kernels::SiluMul(gate, up, n * I, gate);
    if (rows[i].row_weights != nullptr) {
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < I; ++j) gate[r * I + j] = rows[i].row_weights[r] * gate[r * I + j];
      }
    }
    jobs_.push_back({weights[i].w2, gate, n, rows[i].result});
  }
  kernels::MatMulBatch(jobs_.data(), static_cast<int>(jobs_.size()), pool);
}

}  // namespace deepinfer::arch
