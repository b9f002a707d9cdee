// MoeDispatch split over expert-parallel ranks gives bit-identical output to one process. The
// ranks here are threads joined by an in-memory ExpertExchange (the MPI one is exercised by
// tests/e2e/test_expert_parallel.py with real mpirun ranks); what is tested is the split: who
// runs which expert, where each result row goes, and the order each token's sum is taken in.

#include "arch/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

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
    d.Run(idx.data(), weights.data(), c.T, c.K, c.E, x.data(), c.H, out.data(),
          [&](int e, const float* in, int64_t n, const float* w, float* result) {
            if (ran != nullptr) ran->insert(e);
            FakeExpert(e, in, n, c.H, w, c.weights_in_expert, result);
          },
          c.weights_in_expert);
  };
  MoeDispatch one;
  std::vector<float> want;
  run(one, want, nullptr);

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
  for (const Case& c : {Case{1, 16, 8, 2, false}, Case{3, 16, 8, 2, true}, Case{7, 24, 3, 1, false},
                        Case{64, 32, 8, 2, false}, Case{64, 32, 8, 3, true},
                        Case{33, 8, 5, 5, false}}) {
    for (int ranks : {2, 3, 4, 5}) Check(c, ranks);
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
