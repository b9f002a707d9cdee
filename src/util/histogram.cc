#include "util/histogram.h"

#include <algorithm>
#include <utility>

#include "util/status.h"

namespace deepinfer::util {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::Observe(double value) {
  DI_CHECK(counts.size() == bounds.size() + 1);  // built with Histogram(upper_bounds)
  size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  counts[i]++;
  sum += value;
  count++;
}

}  // namespace deepinfer::util
