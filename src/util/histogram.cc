#include "util/histogram.h"

#include <algorithm>
#include <utility>

namespace deepinfer::util {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::Observe(double value) {
  if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  counts[i]++;
  sum += value;
  count++;
}

std::vector<double> EngineLatencyBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}

}  // namespace deepinfer::util
