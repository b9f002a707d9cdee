#pragma once

// A fixed-bucket histogram, the one shape shared by the engine's latency stats, serve's HTTP
// metrics and the gateway's metrics (Prometheus histogram semantics: a value lands in the first
// bucket whose upper bound is >= the value).

#include <cstdint>
#include <vector>

namespace deepinfer::util {

// Shapes: bounds [num_bounds], increasing upper bounds (+Inf implied); counts
//   [num_bounds + 1], per bucket and not cumulative, the last one the +Inf bucket.
// Units: those of the observed values (seconds for every histogram in the tree).
// Threads: not thread-safe; owners lock around it or keep it on one thread. Observe does not
//   allocate, so the engine thread may call it.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;

  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds);

  // Adds one value. The histogram must have been built with Histogram(upper_bounds) (a
  // default-constructed one only receives copies). Cost: O(log num_bounds).
  void Observe(double value);
};

}  // namespace deepinfer::util
