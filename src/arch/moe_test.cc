// MoeDispatch split over expert-parallel ranks gives bit-identical output to one process. The
// ranks here are threads joined by an in-memory ExpertExchange (the MPI one is exercised by
// tests/e2e/test_expert_parallel.py with real mpirun ranks); what is tested is the split: who
// runs which expert, where each result row goes, and the order each token's sum is taken in.

#include "arch/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "kernels/cpu/ops.h"

namespace deepinfer::arch {
namespace {

// N ranks in one process: each collective posts its buffers, waits for every rank, copies, and
// waits again so no buffer is reused while another rank still reads it.
class Board {
 public:
  explicit Board(int n) : n_(n), send_(n), send_rows_(n), data_(n) {}

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

  int n_;
  std::vector<const float*> send_;
  std::vector<const int64_t*> send_rows_;
  std::vector<float*> data_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, generation_ = 0;
};

class ThreadExchange final : public ExpertExchange {
 public:
  ThreadExchange(Board& board, int rank) : board_(board), rank_(rank) {}
  int rank() const override { return rank_; }
  int ranks() const override { return board_.n_; }

  void AllToAllRows(const float* send, const int64_t* send_rows, float* recv,
                    const int64_t* recv_rows, int64_t width) override {
    board_.send_[rank_] = send;
    board_.send_rows_[rank_] = send_rows;
    board_.Wait();
    float* out = recv;
    for (int s = 0; s < ranks(); ++s) {
      int64_t offset = 0;
      for (int d = 0; d < rank_; ++d) offset += board_.send_rows_[s][d];
      EXPECT_EQ(board_.send_rows_[s][rank_], recv_rows[s]) << "counts disagree";
      std::memcpy(out, board_.send_[s] + offset * width, recv_rows[s] * width * sizeof(float));
      out += recv_rows[s] * width;
    }
    board_.Wait();
  }

  void AllGatherRows(float* data, const int64_t* rows, int64_t width) override {
    board_.data_[rank_] = data;
    board_.Wait();
    int64_t at = 0;
    for (int r = 0; r < ranks(); ++r) {
      if (r != rank_) {
        std::memcpy(data + at * width, board_.data_[r] + at * width,
                    rows[r] * width * sizeof(float));
      }
      at += rows[r];
    }
    board_.Wait();
  }

 private:
  Board& board_;
  int rank_;
};

struct Case {
  int64_t T, H;
  int E, K;
  bool weights_in_expert;
};

// A row-independent "expert": any arithmetic that depends on the expert, the row and its weight.
void FakeExpert(int e, const float* in, int64_t n, int64_t H, const float* w, bool weighted,
                float* result) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < H; ++j) {
      const float v = std::sin(in[i * H + j] * static_cast<float>(e + 1) + 0.1f * j);
      result[i * H + j] = weighted ? v * w[i] : v;
    }
  }
}

void Check(const Case& c, int ranks) {
  std::mt19937 rng(static_cast<uint32_t>(c.T * 131 + c.E * 7 + c.K + ranks));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(c.T * c.H), weights(c.T * c.K);
  std::vector<int32_t> idx(c.T * c.K);
  for (float& v : x) v = u(rng);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int> experts(c.E);
    for (int e = 0; e < c.E; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int k = 0; k < c.K; ++k) {
      idx[t * c.K + k] = experts[k];
      weights[t * c.K + k] = u(rng) + 1.5f;
    }
  }
  auto run = [&](MoeDispatch& d, std::vector<float>& out, std::set<int>* ran) {
    out.assign(c.T * c.H, -7.0f);
    int after = -1;  // the last expert run: batches come in ascending expert order
    d.Run(
        idx.data(), weights.data(), c.T, c.K, c.E, x.data(), c.H, out.data(),
        [&](const ExpertRows* rows, int count) {
          int64_t total = 0;
          for (int i = 0; i < count; ++i) {
            const ExpertRows& r = rows[i];
            EXPECT_GT(r.expert, after);
            EXPECT_GT(r.n, 0);
            EXPECT_EQ(r.row_weights != nullptr, c.weights_in_expert);  // else the dispatch scales
            after = r.expert;
            total += r.n;
            if (ran != nullptr) ran->insert(r.expert);
            FakeExpert(r.expert, r.in, r.n, c.H, r.row_weights, c.weights_in_expert, r.result);
          }
          EXPECT_TRUE(count == 1 || total <= MoeDispatch::kBatchRows) << total << " rows";
        },
        c.weights_in_expert);
  };
  MoeDispatch one;
  std::vector<float> want;
  run(one, want, nullptr);
  // One process against the sum written out: per token, its experts in ascending order.
  std::vector<float> direct(c.T * c.H, 0.0f), result(c.H);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int> order(c.K);
    for (int k = 0; k < c.K; ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return idx[t * c.K + a] < idx[t * c.K + b]; });
    for (int k : order) {
      const float w = weights[t * c.K + k];
      FakeExpert(idx[t * c.K + k], x.data() + t * c.H, 1, c.H, &w, c.weights_in_expert,
                 result.data());
      if (c.weights_in_expert) {
        kernels::AddInPlace(direct.data() + t * c.H, result.data(), c.H);
      } else {
        kernels::Axpy(w, result.data(), direct.data() + t * c.H, c.H);
      }
    }
  }
  EXPECT_EQ(std::memcmp(direct.data(), want.data(), want.size() * sizeof(float)), 0)
      << "T=" << c.T << " E=" << c.E << " K=" << c.K;

  Board board(ranks);
  std::vector<std::vector<float>> got(ranks);
  std::vector<std::set<int>> ran(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadExchange ex(board, r);
      MoeDispatch d;
      d.set_exchange(&ex);
      run(d, got[r], &ran[r]);
      run(d, got[r], &ran[r]);  // a second step on the same scratch
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE(testing::Message() << "T=" << c.T << " E=" << c.E << " K=" << c.K
                                    << " ranks=" << ranks << " rank=" << r);
    EXPECT_EQ(std::memcmp(got[r].data(), want.data(), want.size() * sizeof(float)), 0);
    const int lo = static_cast<int>(int64_t{c.E} * r / ranks);
    const int hi = static_cast<int>(int64_t{c.E} * (r + 1) / ranks);
    for (int e : ran[r]) EXPECT_TRUE(e >= lo && e < hi) << "rank ran another's expert " << e;
  }
}

TEST(MoeDispatchTest, ExpertParallelRanksGiveTheBitsOfOneProcess) {
  for (const Case& c :
       {Case{1, 16, 8, 2, false}, Case{3, 16, 8, 2, true}, Case{7, 24, 3, 1, false},
        Case{64, 32, 8, 2, false}, Case{64, 32, 8, 3, true}, Case{33, 8, 5, 5, false},
        // Past kBatchRows: experts come in several batches.
        Case{300, 8, 6, 3, true}, Case{600, 8, 3, 1, false}}) {
    for (int ranks : {2, 3, 4, 5}) Check(c, ranks);
  }
}

// SwiGluExperts over a batch (experts of two widths, one row and several, clamped or not, weighted
// or not) gives each expert the bits of its own matmuls run alone, at 1 and 3 threads.
TEST(SwiGluExpertsTest, EachExpertGetsTheBitsOfRunningAlone) {
  const int64_t H = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Owned {
    std::vector<float> w1, w3, w2;
    tensor::TensorView v1, v3, v2;
  };
  auto view = [](std::vector<float>& data, int64_t rows, int64_t cols) {
    tensor::TensorView v;
    v.dtype = tensor::DType::kF32;
    v.shape = {rows, cols};
    v.data = reinterpret_cast<const uint8_t*>(data.data());
    v.size_bytes = data.size() * sizeof(float);
    return v;
  };
  std::vector<Owned> experts(3);
  const int64_t widths[] = {32, 48, 32};
  for (int e = 0; e < 3; ++e) {
    Owned& o = experts[e];
    const int64_t I = widths[e];
    for (auto* w : {&o.w1, &o.w3, &o.w2}) {
      w->resize(I * H);
      for (float& v : *w) v = normal(rng) * 0.3f;
    }
    o.v1 = view(o.w1, I, H);
    o.v3 = view(o.w3, I, H);
    o.v2 = view(o.w2, H, I);
  }
  const int64_t ns[] = {1, 5, 3};
  std::vector<std::vector<float>> in(3), row_w(3);
  for (int e = 0; e < 3; ++e) {
    in[e].resize(ns[e] * H);
    for (float& v : in[e]) v = normal(rng) * 2.0f;
    row_w[e].resize(ns[e]);
    for (float& v : row_w[e]) v = normal(rng);
  }
  for (bool clamp : {false, true}) {
    for (bool weighted : {false, true}) {
      for (int threads : {1, 3}) {
        util::ThreadPool pool(threads);
        const float limit = 1.5f;
        std::vector<SwiGluWeights> weights;
        std::vector<ExpertRows> rows;
        std::vector<std::vector<float>> got(3);
        for (int e = 0; e < 3; ++e) {
          got[e].assign(ns[e] * H, -1.0f);
          weights.push_back({&experts[e].v1, &experts[e].v3, &experts[e].v2});
          rows.push_back(
              {e, in[e].data(), ns[e], weighted ? row_w[e].data() : nullptr, got[e].data()});
        }
        SwiGluExperts batch;
        batch.Run(weights.data(), rows.data(), 3, limit, clamp, pool);
        for (int e = 0; e < 3; ++e) {
          const int64_t I = widths[e], n = ns[e];
          std::vector<float> g(n * I), u(n * I), want(n * H);
          kernels::MatMul(experts[e].v1, in[e].data(), n, g.data(), pool);
          kernels::MatMul(experts[e].v3, in[e].data(), n, u.data(), pool);
          for (int64_t j = 0; j < n * I && clamp; ++j) {
            g[j] = std::min(g[j], limit);
            u[j] = std::clamp(u[j], -limit, limit);
          }
          kernels::SiluMul(g.data(), u.data(), n * I, g.data());
          for (int64_t j = 0; j < n * I && weighted; ++j) g[j] = row_w[e][j / I] * g[j];
          kernels::MatMul(experts[e].v2, g.data(), n, want.data(), pool);
          EXPECT_EQ(got[e], want) << "expert " << e << " clamp " << clamp << " weighted "
                                  << weighted << " threads " << threads;
        }
      }
    }
  }
}

TEST(MoeDispatchTest, FirstExpertSplitsEvenly) {
  Board board(3);
  ThreadExchange ex(board, 1);
  EXPECT_EQ(ex.FirstExpert(0, 8), 0);
  EXPECT_EQ(ex.FirstExpert(1, 8), 2);
  EXPECT_EQ(ex.FirstExpert(2, 8), 5);
  EXPECT_EQ(ex.FirstExpert(3, 8), 8);
  EXPECT_TRUE(ex.Owns(2, 8));
  EXPECT_TRUE(ex.Owns(4, 8));
  EXPECT_FALSE(ex.Owns(5, 8));
}

}  // namespace
}  // namespace deepinfer::arch
