#include "tokenizer/unicode16.h"

#include <algorithm>
#include <iterator>

namespace deepinfer::tokenizer {
namespace {

struct DeltaRange {
  uint32_t first;
  uint32_t last;
  uint8_t cls;
};

constexpr DeltaRange kDelta[] = {
#include "tokenizer/unicode16_delta.inc"
};

}  // namespace

CpClass ClassOfUnicode16(uint32_t cp) {
  // The first range that ends at or after cp.
  const DeltaRange* it =
      std::lower_bound(std::begin(kDelta), std::end(kDelta), cp,
                       [](const DeltaRange& r, uint32_t value) { return r.last < value; });
  if (it != std::end(kDelta) && it->first <= cp) return static_cast<CpClass>(it->cls);
  return ClassOf(cp);
}

}  // namespace deepinfer::tokenizer
