#pragma once

// Test helper: the ISAs this CPU runs. The kernels with one copy per ISA (isa_dispatch.h) are
// checked under every one of them, whatever DEEPINFER_ISA says.
#include <vector>

#include "kernels/cpu/matmul.h"

namespace deepinfer::kernels {

// The levels SetIsaForTest can make active here (the active level is reset to DetectIsa()).
inline std::vector<Isa> CpuIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    SetIsaForTest(isa);
    if (ActiveIsa() == isa) isas.push_back(isa);
  }
  SetIsaForTest(DetectIsa());
  return isas;
}

}  // namespace deepinfer::kernels
