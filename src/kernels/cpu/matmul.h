#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "util/thread_pool.h"

namespace deepinfer::kernels {

// Instruction-set level chosen at run time from CPUID on x86 and getauxval(AT_HWCAP) on Arm (and
// DEEPINFER_ISA=scalar|avx2|avx512|neon for tests and benchmarks; a level the CPU lacks, the
// other architecture's included, is lowered to one it has).
// x86: kAvx2 needs AVX2 + FMA + F16C; kAvx512 needs AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Zen 4
// and later; older AVX-512 parts run the AVX2 path). Types without an AVX-512 kernel (K-quants
// and float weights) use the AVX2 one; every weight type MatMul accepts has an AVX2 kernel.
// Where the CPU has AVX-VNNI (Alder Lake, Sapphire Rapids, Zen 5 and later), kAvx2's Q4_0, Q4_1
// and Q8_0 kernels use it, with the same bits (Avx2UsesVnni).
// Arm (aarch64): kNeon needs Advanced SIMD (every aarch64 Linux CPU has it); every weight type
// MatMul accepts has a NEON kernel, and the integer ones use SDOT where the CPU has dotprod
// (HWCAP_ASIMDDP) and, for 2 or more tokens, SMMLA where it has i8mm too (HWCAP2_I8MM); where
// it has SVE with 256-bit vectors too (Graviton 3), Q4_0 / Q4_1 / Q8_0 use SVE's SDOT for single
// tokens (without i8mm, for every token count); the same results as the baseline copy, bit for
// bit.
// A level's missing kernels come from LowerIsa's: kAvx512 -> kAvx2 -> kScalar, kNeon -> kScalar.
enum class Isa { kScalar, kAvx2, kAvx512, kNeon };
inline constexpr int kNumIsas = 4;
constexpr Isa LowerIsa(Isa isa) { return isa == Isa::kAvx512 ? Isa::kAvx2 : Isa::kScalar; }
Isa DetectIsa();
// The highest level this CPU has, whatever DEEPINFER_ISA says.
Isa HardwareIsa();
// The ISA the kernels use now, the matmuls and the small vector loops of ops.h, attention.h and
// ggml_numerics.h alike (isa_dispatch.h); SetIsaForTest overrides it (tests compare paths).
// Threads: any; a relaxed atomic load.
Isa ActiveIsa();
void SetIsaForTest(Isa isa);
const char* IsaName(Isa isa);
// Whether kAvx2's Q4_0 / Q4_1 / Q8_0 kernels use AVX-VNNI on this CPU (CPUID; always false off
// x86). Their results are the same either way.
bool Avx2UsesVnni();
// Whether kAvx512's FP8 E4M3 and FP4 E2M1 kernels run on AMX-BF16 tiles (matmul_amx.cc): the CPU
// has AMX-TILE, AMX-BF16 and AVX512-BF16, Linux grants the tile state, and bf16 activations are
// wanted: DEEPINFER_BF16_ACTIVATIONS (or its first name DEEPINFER_AMX) is "1" or "on" (read once;
// off by default). Unlike the other copies these round the activations to bf16 (round to
// nearest even) before the dot products, so their results differ from kAvx512's f32 kernels by
// about 2^-9 relative per product; they stay batch and thread invariant. Always false off x86.
bool Avx512UsesAmx();
// Whether they run on AVX512-BF16's VDPBF16PS instead (matmul_avx512.cc): bf16 activations are
// wanted as above and the CPU has AVX512-BF16 but not AMX (AMD Zen 4 and later, Intel Cooper
// Lake). Same rounding of the activations, same invariances; a different order of additions
// than the AMX tiles. Always false off x86.
bool Avx512UsesBf16Dot();
// Whether kNeon's integer kernels (Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K) use SDOT on this CPU
// (HWCAP_ASIMDDP; always false off aarch64). Their results are the same either way.
bool NeonUsesDotProd();
// Whether kNeon's integer kernels (Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K) multiply 2 or more tokens
// with SMMLA tiles (2 weight rows x 2 tokens per instruction) on this CPU: HWCAP2_I8MM and
// HWCAP_ASIMDDP (single tokens keep SDOT), always false off aarch64. Implies NeonUsesDotProd().
// Their results are the same either way.
bool NeonUsesI8mm();
// Whether kNeon's Q4_0 / Q4_1 / Q8_0 kernels use SVE's SDOT on 256-bit vectors for single tokens
// (and, where NeonUsesI8mm() is false, for every tile) on this CPU: HWCAP_SVE, svcntb() == 32
// and HWCAP_ASIMDDP, always false off aarch64. Other vector lengths keep the NEON tiles (at 128
// bits SVE is no wider than NEON; the SVE tiles are written for 256). Implies NeonUsesDotProd().
// Their results are the same either way.
bool NeonUsesSve();
// Which ISA's kernel MatMul runs for `w` under ActiveIsa(): a type that ISA has no kernel for
// uses the next lower one's, and block-scaled weights whose scale blocks the SIMD kernels do not
// take (FP8 blocks not a multiple of 16 columns wide, FP4 of 32) the portable one.
// REQUIRES: HasCpuMatMul(w) (kernels/cpu/quant.h).
Isa MatMulKernelIsa(const tensor::TensorView& w);
// Per weight type among `weights` (each HasCpuMatMul), in tensor/dtype.h's table order, the
// type's name and MatMulKernelIsa's ISA name(s) joined by '+': "BF16 avx2, F8_E4M3 avx2+scalar".
// What serve logs at start-up.
std::string MatMulKernelsByType(const std::vector<const tensor::TensorView*>& weights);

// y = x W^T for a weight in any supported dtype, computed directly on quantized blocks.
//
// For quantized weights the activations are first quantized per 32-element block the way
// llama.cpp does (Q8_0 for Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for Q4_K/Q6_K; with the x86 CPU
// backend's rounding, see QuantizeRowQ8_0Cpu), and the dot products are integer within a block,
// so results track llama.cpp's CPU backend closely: they differ only in the order of the float
// additions across blocks (MatMulGgml in ggml_numerics.h keeps ggml's order too, slower).
// F32/F16/BF16 weights multiply the f32 activations as they are (llama.cpp rounds them to
// F16/BF16 first).
// Shapes: w [out, in] (w.shape = {out, in}); x [num_tokens, in] f32 row-major;
//   y [num_tokens, out] f32 row-major. `in` must be a multiple of the weight's block size.
// Threads: activations are quantized once (in parallel over tokens when there are many), then
//   output rows are split across the pool; call from the pool's owner. Each output is computed by
//   one thread in a fixed order, so results do not depend on the thread count.
// Cost: no heap allocation after the first call with a given size (thread-local scratch).
//   Prefill tiles 4 rows x 4 tokens (AVX-512) so each weight block is decoded once per 4 tokens.
void MatMul(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
            util::ThreadPool& pool);

// ys[i] = x ws[i]^T for `count` (<= 8) weights that share the input x, in one parallel region;
// the activations are quantized once when all weights use the same activation format.
// Shapes: as MatMul, per weight; every ws[i] has the same `in`.
// Threads, Cost: as MatMul.
void MatMulGroup(const tensor::TensorView* const* ws, float* const* ys, int count, const float* x,
                 int64_t num_tokens, util::ThreadPool& pool);

// One matmul of a MatMulBatch: y = x w^T, shapes as MatMul's. Not owned.
struct MatMulJob {
  const tensor::TensorView* w;
  const float* x;
  int64_t num_tokens;
  float* y;
};

// Runs `count` matmuls with their own weights and inputs in one parallel region over the row
// chunks of all of them: a decode step's experts (each about half a megabyte of weights) share
// one fork/join instead of paying one per matrix. A job whose x, num_tokens and activation
// format equal those of the latest earlier job that quantized its own reuses them (put jobs that
// share an input next to each other). Each job's y is bit-identical to MatMul's, whatever else
// is in the batch. Jobs with num_tokens <= 0 are skipped; the ys must not overlap each other or
// any x.
// Threads: as MatMul. Cost: no heap allocation once the thread-local scratch has grown to the
//   jobs' quantized activations.
void MatMulBatch(const MatMulJob* jobs, int count, util::ThreadPool& pool);

// Same as MatMul but only for output rows [row_begin, row_end) and single-threaded; y is still
// [num_tokens, out] with the full `out` stride. Used by callers that fuse several matmuls into
// one parallel region. Results are bit-identical to MatMul's.
// Cost: quantizes all num_tokens activation rows on every call (into thread-local scratch), which
//   is negligible for decode but repeats per thread for long prefills.
void MatMulRows(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                int64_t row_begin, int64_t row_end);

// y = x W^T for float weights (F32, F16, BF16) with every output accumulated over k in order,
// one FMA per weight (a plain mul + add without FMA on the portable path): W is widened into f32
// panels of 2 vector widths of output rows by 256 k, each reused from L1 by every token, and
// 6 tokens x 2 vectors of outputs stay in registers. For encoders that multiply whole prompts
// (the vision tower): about 80% of the FMA peak on AVX-512 where MatMul's dot-product tiles reach
// about 55%.
// Rounding differs from MatMul's (which sums 16-lane partial dots), so a model uses one or the
// other for a weight, never both. A token's outputs do not depend on the other tokens of the call
// or on the thread count (batch invariant, bit for bit).
// Shapes: as MatMul. REQUIRES: MatMulPanelsSupports(w.dtype).
// Threads: output panels are split across the pool; call from the pool's owner.
// Cost: no heap allocation (a 32 KiB panel on each thread's stack).
bool MatMulPanelsSupports(tensor::DType dtype);
void MatMulPanels(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                  util::ThreadPool& pool);

}  // namespace deepinfer::kernels
