#pragma once

// One copy per ISA of the small vector loops that are not matmul kernels (ops.cc: Dot, Axpy,
// AddInPlace, RmsNorm, ArgMax; attention.cc: the paged and MLA attention ranges; ggml_numerics.cc:
// its dots, SwiGLU, RoPE and attention row), chosen on every call from ActiveIsa().
//
// Why not GCC's target_clones, which these loops used before: its ifunc resolver picks a clone
// from CPUID once, when the binary loads, so DEEPINFER_ISA and SetIsaForTest never reached them.
// Tests under DEEPINFER_ISA=avx2 on an AVX-512 machine ran the AVX-512 clones, benchmarks of "the
// AVX2 path" there were partly AVX-512, and the "arch=haswell" clones ran only on CPUs that
// report themselves as Intel Haswell (the resolver tests the model, not the features).
//
// How: a loop's body is an always_inline function template NameBody<Isa>, and DI_ISA_DISPATCH
// defines Name, which calls one of three copies of the body compiled with
// __attribute__((target(...))). Those keep the clones' target strings (all but ggml_numerics.cc's
// AVX2 one, see there), so a copy compiles to the floating-point instructions of the clone it
// replaces and gives the same bits (checked when this replaced them, against the old clones on
// random inputs, for every loop and ISA). That matters because GCC contracts a * b + c into an FMA
// wherever the target has one (-ffp-contract=fast is its default, even with -std=c++20): the
// "avx512f" copies of ops.cc and attention.cc fuse (AVX-512F has FMA on zmm registers and
// scalars), the "avx2" and baseline copies cannot, so Dot, Axpy and the attention ranges round
// differently under kAvx512 than under kAvx2 and kScalar, as they did on AVX-512 and AVX2 hosts.
// ggml_numerics.cc is built with -ffp-contract=off and spells out every std::fma, so its copies
// agree bit for bit.
//
// Cost: one relaxed load of ActiveIsa()'s value and an indirect jump per call (the ifunc's PLT
// entry was an indirect jump too); nothing per element.
// Portability: only GCC on x86-64 compiles the copies, as it did the clones; elsewhere Name runs
// the one portable copy and VectorLoopIsa() is kScalar.

#include <array>
#include <atomic>

#include "kernels/cpu/matmul.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DI_ISA_COPIES 1
#else
#define DI_ISA_COPIES 0
#endif

#define DI_ALWAYS_INLINE inline __attribute__((always_inline))

namespace deepinfer::kernels::internal {

// ActiveIsa()'s value, or -1 before its first call (matmul.cc).
extern std::atomic<int> g_active_isa;

// Which copy of the loops above runs now: ActiveIsa() where the copies are compiled, else
// kScalar (the one portable copy). Inline, so that a dispatch is one load once ActiveIsa() has
// run.
// Threads: any; follows SetIsaForTest from the next call on.
inline Isa VectorLoopIsa() {
  if (!DI_ISA_COPIES) return Isa::kScalar;
  const int isa = g_active_isa.load(std::memory_order_relaxed);
  return isa >= 0 ? static_cast<Isa>(isa) : ActiveIsa();
}

}  // namespace deepinfer::kernels::internal

// Defines `RET NAME PARAMS`, which runs `NAME##Body<isa> ARGS` compiled for the ISA that SELECT
// returns: with target(AVX512) for kAvx512, target(AVX2) for kAvx2, baseline x86-64 for kScalar.
// Use at namespace scope after `template <Isa> RET NAME##Body PARAMS` (always inlined; the
// parameter lets a body call other loops' copies of its own ISA, NAME##Copy<isa>).
// PARAMS is the parenthesized parameter list, ARGS the parenthesized names.
// The copies, NAME##Copy<isa>, are noinline so that each is compiled as one function, like the
// clone before it. NAME tail-jumps through a table of them: one indexed indirect jump, like the
// ifunc's PLT entry.
// Levels of other architectures (kNeon) have no entry of their own: they take the portable copy.
#if DI_ISA_COPIES
#define DI_ISA_DISPATCH(SELECT, AVX512, AVX2, RET, NAME, PARAMS, ARGS)                         \
  namespace {                                                                                  \
  template <::deepinfer::kernels::Isa>                                                         \
  RET NAME##Copy PARAMS;                                                                       \
  template <>                                                                                  \
  __attribute__((noinline, target(AVX512))) RET NAME##Copy<::deepinfer::kernels::Isa::kAvx512> \
      PARAMS {                                                                                 \
    return NAME##Body<::deepinfer::kernels::Isa::kAvx512> ARGS;                                \
  }                                                                                            \
  template <>                                                                                  \
  __attribute__((noinline, target(AVX2))) RET NAME##Copy<::deepinfer::kernels::Isa::kAvx2>     \
      PARAMS {                                                                                 \
    return NAME##Body<::deepinfer::kernels::Isa::kAvx2> ARGS;                                  \
  }                                                                                            \
  template <>                                                                                  \
  __attribute__((noinline)) RET NAME##Copy<::deepinfer::kernels::Isa::kScalar> PARAMS {        \
    return NAME##Body<::deepinfer::kernels::Isa::kScalar> ARGS;                                \
  }                                                                                            \
  }                                                                                            \
  RET NAME PARAMS {                                                                            \
    using Copy = RET(*) PARAMS;                                                                \
    static constexpr auto kCopies = [] {                                                       \
      std::array<Copy, ::deepinfer::kernels::kNumIsas> copies{};                               \
      copies.fill(NAME##Copy<::deepinfer::kernels::Isa::kScalar>);                             \
      copies[static_cast<int>(::deepinfer::kernels::Isa::kAvx2)] =                             \
          NAME##Copy<::deepinfer::kernels::Isa::kAvx2>;                                        \
      copies[static_cast<int>(::deepinfer::kernels::Isa::kAvx512)] =                           \
          NAME##Copy<::deepinfer::kernels::Isa::kAvx512>;                                      \
      return copies;                                                                           \
    }();                                                                                       \
    return kCopies[static_cast<int>(SELECT)] ARGS;                                             \
  }
#else
// One portable copy serves every ISA.
#define DI_ISA_DISPATCH(SELECT, AVX512, AVX2, RET, NAME, PARAMS, ARGS) \
  namespace {                                                          \
  template <::deepinfer::kernels::Isa>                                 \
  RET NAME##Copy PARAMS {                                              \
    return NAME##Body<::deepinfer::kernels::Isa::kScalar> ARGS;        \
  }                                                                    \
  }                                                                    \
  RET NAME PARAMS { return NAME##Copy<::deepinfer::kernels::Isa::kScalar> ARGS; }
#endif
