#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace deepinfer::engine {

// Fixed-bucket latency histogram filled on the engine thread and copied out for /metrics.
// Buckets follow vLLM's TTFT buckets (seconds), which cover 1 ms to 640 s.
// Threads: engine thread only; CopyTo is called under the stats lock.
class HistogramAccumulator {
 public:
  HistogramAccumulator()
      : bounds_{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0},
        counts_(bounds_.size() + 1, 0) {}

  void Add(double seconds) {
    size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
    counts_[i]++;
    sum_ += seconds;
    count_++;
  }

  void CopyTo(Histogram& out) const {
    out.bounds = bounds_;
    out.counts = counts_;
    out.sum = sum_;
    out.count = count_;
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace deepinfer::engine
