// What serve logs about the matmul kernels: the ISA and, per weight type, which ISA's kernels
// multiply it (a type without a kernel of the ISA in use silently runs a lower one's).

#include "engine/engine.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace deepinfer::engine {

std::string MatMulKernelsSummary(const model::Model& model) {
  std::vector<const tensor::TensorView*> matrices;
  for (const auto& [name, t] : model.tensors)
    if (t.shape.size() == 2 && kernels::HasCpuMatMul(t)) matrices.push_back(&t);
  const kernels::Isa isa = kernels::ActiveIsa(), cpu = kernels::HardwareIsa();
  std::string kernel_notes;
  if (isa == kernels::Isa::kAvx2 && kernels::Avx2UsesVnni())
    kernel_notes = " (AVX-VNNI for Q4_0/Q4_1/Q8_0)";
  if (isa == kernels::Isa::kAvx512 && kernels::Avx512UsesAmx())
    kernel_notes =
        " (AMX-BF16 tiles for F8_E4M3/FP4_E2M1, activations rounded to bf16; "
        "DEEPINFER_BF16_ACTIVATIONS)";
  if (isa == kernels::Isa::kAvx512 && kernels::Avx512UsesBf16Dot())
    kernel_notes =
        " (AVX512-BF16 dot products for F8_E4M3/FP4_E2M1, activations rounded to bf16; "
        "DEEPINFER_BF16_ACTIVATIONS)";
  if (isa == kernels::Isa::kNeon && kernels::NeonUsesDotProd()) {
    kernel_notes = fmt::format(" (dotprod{} for the integer quants{})",
                              kernels::NeonUsesI8mm() ? " and i8mm" : "",
                              kernels::NeonUsesSve() ? ", 256-bit SVE for Q4_0/Q4_1/Q8_0" : "");
  }
  return fmt::format("ISA {}{}{}; by weight type: {}", kernels::IsaName(isa), kernel_notes,
                     isa == cpu ? "" : fmt::format(" (the CPU has {}; DEEPINFER_ISA)",
                                                   kernels::IsaName(cpu)),
                     kernels::MatMulKernelsByType(matrices));
}

}  // namespace deepinfer::engine
