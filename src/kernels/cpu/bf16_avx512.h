#pragma once

// What the bf16 kernels of the AVX-512 files share (matmul_amx.cc's tiles, matmul_avx512.cc's
// VDPBF16PS kernels): their activations, and FP4 E2M1 codes to bf16 bit patterns by AVX-512 BW
// integer operations. `static`, so each file keeps its own copy (matmul_internal.h: no inline code
// shared across ISA files).

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::kernels::internal {

// The bytes of a row of k activations: bf16, padded with zeros to a multiple of 32.
static inline size_t Bf16RowBytes(int64_t k) { return static_cast<size_t>((k + 31) / 32) * 64; }

// x[0, k) -> bf16 (round to nearest even) in order, zeros up to the next multiple of 32
// (Bf16RowBytes(k) bytes). Compiled for AVX512-BF16 whatever the file's flags.
__attribute__((target("avx512bf16"))) static inline void Bf16Activations(const float* x,
                                                                         uint8_t* out, int64_t k) {
  const auto tail = [](int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
  };
  __m512i* o = reinterpret_cast<__m512i*>(out);
  for (int64_t i = 0; i < k; i += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(tail(k - i), x + i);
    const __m512 hi =
        k - i > 16 ? _mm512_maskz_loadu_ps(tail(k - i - 16), x + i + 16) : _mm512_setzero_ps();
    _mm512_storeu_si512(o + i / 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
}

// 32 codes (16 bytes; element 2j in byte j's low nibble, 2j + 1 in its high) as 32 bf16 in
// element order, each value times 2^e where every 16-bit lane of `shift` holds e << 7 (an E8M0
// scale byte s gives e = s - 127). Exact while the nonzero results stay normal: s in [2, 252].
// A code's bf16 comes from a 16-entry table; the scale adds e to the exponent field of every
// nonzero one (the float route, through conversions and multiplies, ran at half the rate).
static inline __m512i Fp4Bf16Bits32(const uint8_t* codes, __m512i shift) {
  // The 16 values twice: VPERMW reads the low 5 bits of an index.
  alignas(64) static constexpr uint16_t kValues[32] = {
      0,      0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80,
      0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0, 0,      0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040,
      0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0};
  // Byte b as the 32-bit word b | b << 12: its low half's low 5 bits index the low nibble's value
  // (bit 4 only picks the table's second copy), its high half is the high nibble; the lookup
  // leaves the elements in order. Bits 0-2 of each half are the code's magnitude.
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512i index = _mm512_or_si512(v, _mm512_slli_epi32(v, 12));
  const __m512i bits = _mm512_permutexvar_epi16(index, _mm512_load_si512(kValues));
  const __mmask32 nonzero = _mm512_test_epi16_mask(index, _mm512_set1_epi16(0x07));
  return _mm512_mask_add_epi16(bits, nonzero, bits, shift);
}

// An FP4 row's scale bytes sc[0, n) as exponent shifts (s - 127) << 7 (Fp4Bf16Bits32's shift
// lanes) into out; false when one lies outside [2, 252] (the integer route's range).
static inline bool Fp4Shifts(const uint8_t* sc, int64_t n, int16_t* out) {
  __mmask32 bad = 0;
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n - i)) - 1;
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, sc + i));
    bad |= _mm512_mask_cmplt_epu16_mask(m, v, _mm512_set1_epi16(2)) |
           _mm512_mask_cmpgt_epu16_mask(m, v, _mm512_set1_epi16(252));
    _mm512_mask_storeu_epi16(out + i, m,
                             _mm512_slli_epi16(_mm512_sub_epi16(v, _mm512_set1_epi16(127)), 7));
  }
  return bad == 0;
}

}  // namespace deepinfer::kernels::internal
