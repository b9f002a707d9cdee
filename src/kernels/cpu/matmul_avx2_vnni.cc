// The AVX2 level's Q4_0 / Q4_1 / Q8_0 kernels with AVX-VNNI (VEX-encoded VPDPBUSD on 256-bit
// vectors: Intel Alder Lake and later cores, Sapphire Rapids and later Xeons, AMD Zen 5). Compiled
// with -mavx2 -mfma -mf16c -mavxvnni; matmul.cc installs them over FillAvx2Kernels' entries only
// where CPUID reports AVX-VNNI (AVX-512 VNNI alone, as on Zen 4, has only the EVEX form, which
// the AVX-512 level uses). Same activation records and the same bits as the plain AVX2 kernels
// (matmul_avx2_block.h: DotU8S8); one instruction where those take two.

#if !defined(__AVXVNNI__)
#error "matmul_avx2_vnni.cc is compiled with -mavxvnni"
#endif

#include "kernels/cpu/matmul_avx2_block.h"
#include "kernels/cpu/matmul_internal.h"

namespace deepinfer::kernels::internal {

void FillAvx2VnniKernels(KernelTable* t) {
  t->q4_0 = {BlockGemm<WKind::kQ4_0>, QuantizeRecords<ActKind::kBias8>, RecRowBytes};
  t->q4_1 = {BlockGemm<WKind::kQ4_1>, QuantizeRecords<ActKind::kQ8_1>, RecRowBytes};
  t->q8_0 = {BlockGemm<WKind::kQ8_0>, QuantizeRecords<ActKind::kPlain>, RecRowBytes};
}

}  // namespace deepinfer::kernels::internal
