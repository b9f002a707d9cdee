#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "util/status.h"

namespace deepinfer::kernels {
namespace {

using internal::GemmArgs;
using internal::KernelTable;
using tensor::DType;

// Rows per unit of work handed to a thread; a multiple of every micro-kernel's row tile.
constexpr int64_t kRowGrain = 16;
// Below this many tokens the activations are quantized on the calling thread only.
constexpr int64_t kParallelQuantizeTokens = 8;

bool CpuHasAvx2() {
#if defined(__x86_64__)
  // F16C and FMA come from CPUID leaf 1 (ECX bits 29 and 12): clang 14 does not accept "f16c"
  // in __builtin_cpu_supports.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool f16c = (ecx >> 29) & 1, fma = (ecx >> 12) & 1;
  return __builtin_cpu_supports("avx2") && fma && f16c;
#else
  return false;
#endif
}

// Bit `bit` of EAX of CPUID leaf 7 subleaf 1 (false off x86 or where the leaf is missing).
bool CpuidLeaf7Sub1EaxBit(int bit) {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> bit) & 1;
#else
  (void)bit;
  return false;
#endif
}

// AVX-VNNI, the VEX form of VPDPBUSD on 256-bit vectors: CPUID leaf 7 subleaf 1, EAX bit 4.
bool CpuHasAvxVnni() { return CpuHasAvx2() && CpuidLeaf7Sub1EaxBit(4); }

bool CpuHasAvx512() {
#if defined(__x86_64__)
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// AVX512-BF16 (VDPBF16PS, VCVTNE2PS2BF16): CPUID leaf 7 subleaf 1, EAX bit 5.
bool CpuHasAvx512Bf16() { return CpuHasAvx512() && CpuidLeaf7Sub1EaxBit(5); }

// AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22) with AVX512-BF16, the OS saving the tile
// state (XCR0 bits 17 and 18), and this process allowed to use it: Linux hands out the 8 KiB tile
// state only on request (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA,
// Documentation/arch/x86/xstate.rst), once for every thread of the process.
bool CpuHasAmx() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!CpuHasAvx512Bf16() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!((edx >> 24) & 1) || !((edx >> 22) & 1)) return false;
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

// Opt-in: the AMX and AVX512-BF16 kernels round activations to bf16, which moves logits by about
// 1e-3 (past the reference-parity tests' 1e-4). DEEPINFER_BF16_ACTIVATIONS, or its first name
// DEEPINFER_AMX, "1" or "on".
bool Bf16ActivationsWanted() {
  for (const char* name : {"DEEPINFER_BF16_ACTIVATIONS", "DEEPINFER_AMX"}) {
    const char* env = std::getenv(name);
    if (env != nullptr && (std::strcmp(env, "1") == 0 || std::strcmp(env, "on") == 0)) return true;
  }
  return false;
}

bool CpuHasNeon() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#else
  return false;
#endif
}

// SDOT / UDOT (armv8.2-a dotprod, optional from 8.2 on): the NEON integer kernels' faster copy.
bool CpuHasNeonDotProd() {
#if defined(__aarch64__) && defined(__linux__)
  return CpuHasNeon() && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return false;
#endif
}

// SMMLA (FEAT_I8MM: armv8.6-a, optional from 8.2): the NEON integer kernels' prefill tiles. The
// copy that has them also uses SDOT, so it needs dotprod too.
bool CpuHasNeonI8mm() {
#if defined(__aarch64__) && defined(__linux__)
  return CpuHasNeonDotProd() && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
  return false;
#endif
}

// SVE with 256-bit vectors (Neoverse V1 / Graviton 3): the SVE copies of the NEON integer
// kernels, written for that length (matmul_neon_sve.inc). They are the dotprod copy's (or the
// i8mm one's) otherwise, so they need dotprod too. svcntb() is read only where HWCAP_SVE says
// the instruction exists.
bool CpuHasSve256() {
#if defined(__aarch64__) && defined(__linux__) && defined(DI_KERNELS_NEON)
  return CpuHasNeonDotProd() && (getauxval(AT_HWCAP) & HWCAP_SVE) != 0 &&
         internal::SveVectorBytes() == 32;
#else
  return false;
#endif
}

// The NEON integer copy MatMul uses: the best one this CPU runs.
[[maybe_unused]] internal::NeonIntDot BestNeonIntCopy() {
  using internal::NeonIntDot;
  if (CpuHasSve256()) return CpuHasNeonI8mm() ? NeonIntDot::kSveI8mm : NeonIntDot::kSve;
  return CpuHasNeonI8mm()      ? NeonIntDot::kI8mm
         : CpuHasNeonDotProd() ? NeonIntDot::kDotProd
                               : NeonIntDot::kBaseline;
}

bool CpuHas(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return CpuHasAvx2();
    case Isa::kAvx512:
      return CpuHasAvx512();
    case Isa::kNeon:
      return CpuHasNeon();
  }
  return false;
}

Isa ClampToHardware(Isa want) {
  while (!CpuHas(want)) want = LowerIsa(want);
  return want;
}

// The highest level of this CPU's architecture that it has.
Isa BestIsa() { return CpuHasNeon() ? Isa::kNeon : ClampToHardware(Isa::kAvx512); }

// The kernel tables of every ISA after fallbacks, and which ISA's kernel each entry is.
struct Tables {
  KernelTable table[kNumIsas];
  Isa origin[kNumIsas][internal::kKernelTableEntries];
};

const Tables& AllTables() {
  static const Tables* tables = [] {
    static Tables all;
    KernelTable* t = all.table;
    internal::FillScalarKernels(&t[0]);
#if defined(DI_KERNELS_X86)
    // Even the Fill functions are compiled for their ISA (the compiler may use wide stores), so
    // they run only where the CPU has it.
    if (CpuHasAvx2()) internal::FillAvx2Kernels(&t[1]);
    if (CpuHasAvxVnni()) internal::FillAvx2VnniKernels(&t[1]);
    if (CpuHasAvx512()) internal::FillAvx512Kernels(&t[2]);
    if (Avx512UsesAmx()) internal::FillAmxKernels(&t[2]);
    if (Avx512UsesBf16Dot()) internal::FillAvx512Bf16DotKernels(&t[2]);
#endif
#if defined(DI_KERNELS_NEON)
    if (CpuHasNeon()) internal::FillNeonKernels(&t[3], BestNeonIntCopy());
#endif
    for (int k = 0; k < internal::kKernelTableEntries; ++k) all.origin[0][k] = Isa::kScalar;
    // A type an ISA does not implement uses the next lower ISA's kernels (LowerIsa's index is
    // below the ISA's own, so it is complete by then).
    for (int i = 1; i < kNumIsas; ++i) {
      const int l = static_cast<int>(LowerIsa(static_cast<Isa>(i)));
      internal::TypeKernels* lower = &t[l].f32;
      internal::TypeKernels* mine = &t[i].f32;
      for (int k = 0; k < internal::kKernelTableEntries; ++k) {
        all.origin[i][k] = static_cast<Isa>(i);
        if (mine[k].gemm == nullptr) {
          mine[k] = lower[k];
          all.origin[i][k] = all.origin[l][k];
        }
      }
    }
    return &all;
  }();
  return *tables;
}

const KernelTable& Table(Isa isa) { return AllTables().table[static_cast<int>(isa)]; }

// The AVX-512 table with the ggml-order Q4_1 / Q8_0 kernels in place of the default ones.
const KernelTable& GgmlOrderTable() {
  static const KernelTable* table = [] {
    static KernelTable t = Table(Isa::kAvx512);
#if defined(DI_KERNELS_X86)
    if (CpuHasAvx512()) internal::FillAvx512GgmlKernels(&t);
#endif
    return &t;
  }();
  return *table;
}

}  // namespace

namespace internal {

const TypeKernels& KernelsForType(const KernelTable& k, DType t) {
  switch (t) {
    case DType::kF32:
      return k.f32;
    case DType::kF16:
      return k.f16;
    case DType::kBF16:
      return k.bf16;
    case DType::kQ4_0:
      return k.q4_0;
    case DType::kQ4_1:
      return k.q4_1;
    case DType::kQ8_0:
      return k.q8_0;
    case DType::kQ4_K:
      return k.q4_k;
    case DType::kQ6_K:
      return k.q6_k;
    case DType::kF8E4M3:
      return k.fp8;
    case DType::kFp4E2M1:
      return k.fp4;
    default:
      DI_CHECK(false && "MatMul: unsupported weight dtype");
      return k.f32;
  }
}

}  // namespace internal

namespace {

using internal::KernelsForType;

// The SIMD kernels take one scale per 16 columns (FP4: per 32, the loader's 1 x 32); other
// block widths run the portable kernel.
bool SimdScaleBlocks(const tensor::TensorView& w) {
  // The FP4 kernels walk whole 32s: a row with a shorter last block takes the portable kernel
  // too (the SIMD ones read past the row and left its last outputs wrong).
  if (w.dtype == DType::kFp4E2M1) return w.scale_block_cols % 32 == 0 && w.cols() % 32 == 0;
  return w.scale_block_cols % 16 == 0;
}

// Grows but never shrinks, so steady-state calls do not allocate.
uint8_t* Scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes + bytes / 4);
  return buf.data();
}

struct Prepared {
  GemmArgs args;
  const internal::TypeKernels* kernels;
};

// Validates shapes and fills everything but the row range and the activation pointer.
Prepared Prepare(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                 const KernelTable& table) {
  DI_CHECK(w.shape.size() >= 2);
  const int64_t in = w.cols();
  const int64_t out = w.rows();
  DI_CHECK(HasCpuMatMul(w));
  const int64_t wb = tensor::BlockSize(w.dtype);
  DI_CHECK(in % wb == 0);
  Prepared p{};
  p.kernels = &KernelsForType(table, w.dtype);
  if (IsBlockScaled(w.dtype)) {
    p.args.scale = w.scale;
    p.args.scale_block_rows = w.scale_block_rows;
    p.args.scale_block_cols = w.scale_block_cols;
    p.args.scale_cols = (in + w.scale_block_cols - 1) / w.scale_block_cols;
    if (!SimdScaleBlocks(w)) p.kernels = &KernelsForType(Table(Isa::kScalar), w.dtype);
  }
  p.args.w = w.data;
  p.args.w_row_bytes = tensor::BlockBytes(w.dtype) * static_cast<size_t>(in / wb);
  DI_CHECK(w.data != nullptr && p.args.w_row_bytes * static_cast<size_t>(out) <= w.size_bytes);
  p.args.a = reinterpret_cast<const uint8_t*>(x);
  p.args.a_row_bytes = p.kernels->act_row_bytes(in);
  p.args.k = in;
  p.args.num_tokens = num_tokens;
  p.args.y = y;
  p.args.y_stride = out;
  p.args.row_begin = 0;
  p.args.row_end = out;
  return p;
}

Isa IsaFromEnv() {
  const char* env = std::getenv("DEEPINFER_ISA");
  if (env == nullptr) return BestIsa();
  if (std::strcmp(env, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) return Isa::kAvx512;
  if (std::strcmp(env, "neon") == 0) return Isa::kNeon;
  return BestIsa();
}

}  // namespace

namespace internal {
const KernelTable& KernelsForIsa(int isa_index) { return Table(static_cast<Isa>(isa_index)); }

// Constant-initialized (no guard, valid during static initialization) so that isa_dispatch.h can
// read it inline; -1 until the first ActiveIsa() resolves DetectIsa().
constinit std::atomic<int> g_active_isa{-1};
}  // namespace internal

Isa DetectIsa() { return ClampToHardware(IsaFromEnv()); }

Isa ActiveIsa() {
  int isa = internal::g_active_isa.load(std::memory_order_relaxed);
  if (isa < 0) {
    // The first call: threads that race here all detect the same ISA, and a SetIsaForTest that
    // came first wins.
    int unset = -1;
    internal::g_active_isa.compare_exchange_strong(unset, static_cast<int>(DetectIsa()),
                                                   std::memory_order_relaxed);
    isa = internal::g_active_isa.load(std::memory_order_relaxed);
  }
  return static_cast<Isa>(isa);
}

void SetIsaForTest(Isa isa) {
  internal::g_active_isa.store(static_cast<int>(ClampToHardware(isa)), std::memory_order_relaxed);
}

Isa HardwareIsa() { return BestIsa(); }

bool Avx2UsesVnni() { return CpuHasAvxVnni(); }

bool Avx512UsesAmx() {
  static const bool uses = Bf16ActivationsWanted() && CpuHasAmx();
  return uses;
}

bool Avx512UsesBf16Dot() {
  static const bool uses = Bf16ActivationsWanted() && !CpuHasAmx() && CpuHasAvx512Bf16();
  return uses;
}

bool NeonUsesDotProd() { return CpuHasNeonDotProd(); }

bool NeonUsesI8mm() { return CpuHasNeonI8mm(); }

bool NeonUsesSve() { return CpuHasSve256(); }

Isa MatMulKernelIsa(const tensor::TensorView& w) {
  DI_CHECK(HasCpuMatMul(w));
  if (IsBlockScaled(w.dtype) && !SimdScaleBlocks(w)) return Isa::kScalar;
  const int isa = static_cast<int>(ActiveIsa());
  const Tables& all = AllTables();
  const internal::TypeKernels* entry = &KernelsForType(all.table[isa], w.dtype);
  return all.origin[isa][entry - &all.table[isa].f32];
}

std::string MatMulKernelsByType(const std::vector<const tensor::TensorView*>& weights) {
  std::string out;
  for (const tensor::DTypeInfo& info : tensor::AllDTypes()) {
    bool used[kNumIsas] = {};
    for (const tensor::TensorView* w : weights)
      if (w->dtype == info.type) used[static_cast<int>(MatMulKernelIsa(*w))] = true;
    std::string isas;
    for (int i = kNumIsas - 1; i >= 0; --i) {
      if (!used[i]) continue;
      if (!isas.empty()) isas += '+';
      isas += IsaName(static_cast<Isa>(i));
    }
    if (isas.empty()) continue;
    if (!out.empty()) out += ", ";
    out.append(info.name).append(" ").append(isas);
  }
  return out;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
  }
  return "unknown";
}

void MatMulRows(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                int64_t row_begin, int64_t row_end) {
  if (num_tokens <= 0 || row_begin >= row_end) return;
  Prepared p = Prepare(w, x, num_tokens, y, Table(ActiveIsa()));
  DI_CHECK(row_begin >= 0 && row_end <= p.args.row_end);
  if (p.kernels->quantize != nullptr) {
    uint8_t* a = Scratch(p.args.a_row_bytes * static_cast<size_t>(num_tokens));
    for (int64_t t = 0; t < num_tokens; ++t)
      p.kernels->quantize(x + t * p.args.k, a + t * p.args.a_row_bytes, p.args.k);
    p.args.a = a;
  }
  p.args.row_begin = row_begin;
  p.args.row_end = row_end;
  p.kernels->gemm(p.args);
}

namespace {

// The m with starts[m] <= v < starts[m + 1], for ascending starts[0..count] and v < starts[count].
int Segment(const int64_t* starts, int count, int64_t v) {
  return static_cast<int>(std::upper_bound(starts, starts + count + 1, v) - starts) - 1;
}

// Quantizes each job's activations once (a job whose input equals the latest quantizing job's
// reuses its rows), then runs one parallel region over the row chunks of every job. Each output is
// computed whole by one task with the same arithmetic, so the split (and which thread runs what)
// does not change the results: a job's outputs are MatMul's whatever else is in the batch.
void MatMulBatchWith(const KernelTable& table, const MatMulJob* jobs, int count,
                     util::ThreadPool& pool) {
  // Thread-local so steady-state calls do not allocate; a batch is never nested on one thread.
  thread_local std::vector<Prepared> prepared;
  thread_local std::vector<int64_t> first_chunk, first_row;
  thread_local std::vector<int> owner;        // jobs that quantize their own rows
  thread_local std::vector<size_t> a_offset;  // of each job's activations in the scratch
  thread_local std::vector<const float*> inputs;
  prepared.clear();
  inputs.clear();
  owner.clear();
  a_offset.clear();
  size_t bytes = 0;
  int64_t widest = 0;  // the most tokens one owner quantizes
  for (int i = 0; i < count; ++i) {
    const MatMulJob& job = jobs[i];
    if (job.num_tokens <= 0) continue;
    Prepared p = Prepare(*job.w, job.x, job.num_tokens, job.y, table);
    size_t offset = 0;
    if (p.kernels->quantize != nullptr) {
      // Callers put the jobs that share an input next to each other (MatMulGroup, an expert's
      // w1 and w3), so only the latest owner is compared: no quadratic search in big batches.
      const int o = owner.empty() ? -1 : owner.back();
      if (o >= 0 && inputs[o] == job.x && prepared[o].args.num_tokens == p.args.num_tokens &&
          prepared[o].kernels->quantize == p.kernels->quantize &&
          prepared[o].args.a_row_bytes == p.args.a_row_bytes && prepared[o].args.k == p.args.k) {
        offset = a_offset[o];
      } else {
        owner.push_back(static_cast<int>(prepared.size()));
        offset = bytes;
        // Each owner's rows start at a multiple of 64 bytes into the scratch, whatever the row
        // sizes before them (as aligned as the scratch itself).
        bytes += (p.args.a_row_bytes * static_cast<size_t>(p.args.num_tokens) + 63) & ~size_t{63};
        widest = std::max(widest, p.args.num_tokens);
      }
    }
    prepared.push_back(p);
    inputs.push_back(job.x);
    a_offset.push_back(offset);
  }
  const int n = static_cast<int>(prepared.size());
  if (n == 0) return;
  if (!owner.empty()) {
    uint8_t* a = Scratch(bytes);
    for (int i = 0; i < n; ++i)
      if (prepared[i].kernels->quantize != nullptr) prepared[i].args.a = a + a_offset[i];
    // The owners' activation rows, numbered in order, so a long prompt quantizes in parallel.
    first_row.assign(1, 0);
    for (int o : owner) first_row.push_back(first_row.back() + prepared[o].args.num_tokens);
    // Workers see the owner's thread-local vectors only through these pointers (by name they
    // would reach their own).
    struct Quantize {
      const Prepared* p;
      const float* const* x;
      const int* owner;
      const int64_t* first_row;
      const size_t* a_offset;
      uint8_t* a;
      int owners;
    } q{.p = prepared.data(),
        .x = inputs.data(),
        .owner = owner.data(),
        .first_row = first_row.data(),
        .a_offset = a_offset.data(),
        .a = a,
        .owners = static_cast<int>(owner.size())};
    auto rows = [&q](int64_t begin, int64_t end) {
      for (int m = Segment(q.first_row, q.owners, begin); begin < end; ++begin) {
        while (begin >= q.first_row[m + 1]) ++m;
        const Prepared& p = q.p[q.owner[m]];
        const int64_t t = begin - q.first_row[m];
        p.kernels->quantize(q.x[q.owner[m]] + t * p.args.k,
                            q.a + q.a_offset[q.owner[m]] + t * p.args.a_row_bytes, p.args.k);
      }
    };
    // In parallel for a long prompt, as MatMul does; a decode step's few rows per job (however
    // many jobs) stay on this thread rather than cost a parallel region of their own.
    const int64_t total = first_row.back();
    if (widest >= kParallelQuantizeTokens && pool.num_threads() > 1) {
      auto* r = &rows;
      pool.ParallelFor(total, [r](int64_t begin, int64_t end, int) { (*r)(begin, end); });
    } else {
      rows(0, total);
    }
  }
  first_chunk.assign(1, 0);
  for (const Prepared& p : prepared)
    first_chunk.push_back(first_chunk.back() + (p.args.row_end + kRowGrain - 1) / kRowGrain);
  if (pool.num_threads() == 1 || first_chunk.back() == 1) {
    for (const Prepared& p : prepared) p.kernels->gemm(p.args);
    return;
  }
  struct Region {
    const Prepared* p;
    const int64_t* first_chunk;
    int count;
  } region{prepared.data(), first_chunk.data(), n};
  Region* j = &region;
  pool.ParallelFor(first_chunk.back(), [j](int64_t begin, int64_t end, int) {
    for (int m = Segment(j->first_chunk, j->count, begin); m < j->count && begin < end; ++m) {
      const int64_t lo = std::max(begin, j->first_chunk[m]);
      const int64_t hi = std::min(end, j->first_chunk[m + 1]);
      if (lo >= hi) continue;
      GemmArgs a = j->p[m].args;
      a.row_begin = (lo - j->first_chunk[m]) * kRowGrain;
      a.row_end = std::min(a.row_end, (hi - j->first_chunk[m]) * kRowGrain);
      j->p[m].kernels->gemm(a);
    }
  });
}

void MatMulGroupWith(const KernelTable& table, const tensor::TensorView* const* ws,
                     float* const* ys, int count, const float* x, int64_t num_tokens,
                     util::ThreadPool& pool) {
  constexpr int kMaxGroup = 8;
  DI_CHECK(count <= kMaxGroup);
  MatMulJob jobs[kMaxGroup];
  for (int i = 0; i < count; ++i) jobs[i] = {ws[i], x, num_tokens, ys[i]};
  MatMulBatchWith(table, jobs, count, pool);
}

}  // namespace

void MatMul(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
            util::ThreadPool& pool) {
  const MatMulJob job{&w, x, num_tokens, y};
  MatMulBatchWith(Table(ActiveIsa()), &job, 1, pool);
}

void MatMulGroup(const tensor::TensorView* const* ws, float* const* ys, int count, const float* x,
                 int64_t num_tokens, util::ThreadPool& pool) {
  MatMulGroupWith(Table(ActiveIsa()), ws, ys, count, x, num_tokens, pool);
}

void MatMulBatch(const MatMulJob* jobs, int count, util::ThreadPool& pool) {
  MatMulBatchWith(Table(ActiveIsa()), jobs, count, pool);
}

namespace internal {

void MatMulGgmlOrderAvx512(const tensor::TensorView& w, const float* x, int64_t num_tokens, float* y,
                           util::ThreadPool& pool) {
  DI_CHECK(ActiveIsa() == Isa::kAvx512 && (w.dtype == DType::kQ4_1 || w.dtype == DType::kQ8_0));
  const MatMulJob job{&w, x, num_tokens, y};
  MatMulBatchWith(GgmlOrderTable(), &job, 1, pool);
}

void MatMulGroupGgmlOrderAvx512(const tensor::TensorView* const* ws, float* const* ys, int count,
                                const float* x, int64_t num_tokens, util::ThreadPool& pool) {
  DI_CHECK(ActiveIsa() == Isa::kAvx512);
  MatMulGroupWith(GgmlOrderTable(), ws, ys, count, x, num_tokens, pool);
}

}  // namespace internal
}  // namespace deepinfer::kernels
