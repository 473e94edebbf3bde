// FP8 E4M3 -> bf16 through two 128-entry byte tables (vpermi2b), shared by
// the FP8 kernels of every level that has VBMI (row_dot_x86_float.cpp,
// row_dot_x86_fp8_loop.cpp and row_dot_x86_fp8_x16.cpp) and
// the amx level's (row_dot_amx_fp8.cpp), and the widening step itself for
// translation units compiled with VBMI (internal linkage: each level's copy
// keeps its own flags).
//
// hi/lo: the high and the low byte of each magnitude's bf16 (subnormals,
// m * 2^-9, are normal in bf16; 0x7F is NaN); the sign goes back into the
// high byte. Interleaving low and high bytes (vpunpck*bw) yields the bf16
// values of columns [0-7, 16-23, 32-39, 48-55] (kFp8OrderA) and [8-15, ...]
// (kFp8OrderB) of each 64, the order the activations are permuted into.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tandem::kernels {

struct Fp8Tables {
  alignas(64) uint8_t hi[128], lo[128];
  constexpr Fp8Tables() : hi(), lo() {
    for (int v = 0; v < 128; ++v) {
      const int e = v >> 3, m = v & 7;
      int bits = 0;
      if (v == 127) {
        bits = 0x7FC0;  // NaN
      } else if (e > 0) {
        bits = ((e + 120) << 7) | (m << 4);
      } else if (m > 0) {  // m * 2^-9, normal in bf16
        const int k = m >= 4 ? 2 : m >= 2 ? 1 : 0;
        bits = ((118 + k) << 7) | ((m - (1 << k)) << (7 - k));
      }
      hi[v] = uint8_t(bits >> 8);
      lo[v] = uint8_t(bits & 0xFF);
    }
  }
};
alignas(64) inline constexpr Fp8Tables kFp8Tables{};
alignas(64) inline constexpr int16_t kFp8OrderA[32] = {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18,
                                                19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
                                                38, 39, 48, 49, 50, 51, 52, 53, 54, 55};
alignas(64) inline constexpr int16_t kFp8OrderB[32] = {8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26,
                                                27, 28, 29, 30, 31, 40, 41, 42, 43, 44, 45,
                                                46, 47, 56, 57, 58, 59, 60, 61, 62, 63};


#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
namespace {
// The tables in registers; widen() turns 64 FP8 weights into their bf16
// values in kFp8OrderA's and kFp8OrderB's column order.
struct Fp8Widener {
  __m512i hi0 = _mm512_load_si512(kFp8Tables.hi), hi1 = _mm512_load_si512(kFp8Tables.hi + 64);
  __m512i lo0 = _mm512_load_si512(kFp8Tables.lo), lo1 = _mm512_load_si512(kFp8Tables.lo + 64);
  __m512i sign = _mm512_set1_epi8(char(0x80));

  void widen(__m512i q, __m512i& order_a, __m512i& order_b) const {
    __m512i h = _mm512_permutex2var_epi8(hi0, q, hi1);
    const __m512i l = _mm512_permutex2var_epi8(lo0, q, lo1);
    h = _mm512_ternarylogic_epi32(h, q, sign, 0xF8);  // h | (q & 0x80)
    order_a = _mm512_unpacklo_epi8(l, h);
    order_b = _mm512_unpackhi_epi8(l, h);
  }
};
}  // namespace
#endif

#if defined(__GFNI__) && defined(__AVX512VBMI__)
namespace {
// The FP8 loop's widening (row_dot_x86_fp8_loop.cpp), 4 instructions per 64
// weights where the tables take 5: an FP8 byte's sign, exponent and
// mantissa bits go into its bf16's high and low byte, with the exponent's
// top bit set, i.e. the value times 2^8 (exponent field 128 + e), for every
// normal FP8; the caller takes the 2^-8 out (the FP8 loop once per row).
// - The high byte, s 1 0 0 0 e3 e2 e1, by a GF(2) affine byte map
//   (vgf2p8affineqb, constant 0x40).
// - The low byte, e0 m2 m1 m0 0 0 0 0, is the byte's low nibble shifted up:
//   a vpermb of a table indexed by the byte's low 6 bits. A second affine
//   map gives the same byte, but AMD's Zen 4 runs vgf2p8affineqb on the
//   pipes of vdpbf16ps (the two took 4 cycles per 64 weights between them),
//   and vpermb mostly on others: 3.9-4.2 cycles per 64 weights of one token
//   where the two maps took 4.4-4.7 (L1-resident, one thread), 1.07x in L2.
// The 18 other bytes, +-0 and the 14 subnormals (exponent field 0, which the
// map would give a leading 1) and the NaNs 0x7F/0xFF, it cannot map;
// special(q) gives exactly those bytes a value below kFp8SpecialBelow (a
// bijective map of the 7 magnitude bits that sends 0..7 and 127 to 0..8),
// so a running vpminub finds a block that needs the tables.
inline constexpr uint64_t kFp8GfHi = 0x1020400000000080;   // s e3 e2 e1 -> bits 7, 2, 1, 0
inline constexpr uint64_t kFp8GfSpecial = 0x4142444050604800;
inline constexpr int kFp8SpecialBelow = 9;
// Entry i: (i & 15) << 4, for each of the 64 indices.
inline constexpr int64_t kFp8LowNibbleUp[2] = {0x7060504030201000, int64_t(0xF0E0D0C0B0A09080)};
struct Fp8BitWidener {
  __m512i hi = _mm512_set1_epi64(int64_t(kFp8GfHi));
  __m512i low_nibble_up = _mm512_broadcast_i32x4(_mm_set_epi64x(kFp8LowNibbleUp[1], kFp8LowNibbleUp[0]));
  __m512i special_map = _mm512_set1_epi64(int64_t(kFp8GfSpecial));

  // Fp8Widener's column order, values times 2^8.
  void widen(__m512i q, __m512i& order_a, __m512i& order_b) const {
    const __m512i h = _mm512_gf2p8affine_epi64_epi8(q, hi, 0x40);
    const __m512i l = _mm512_permutexvar_epi8(q, low_nibble_up);
    order_a = _mm512_unpacklo_epi8(l, h);
    order_b = _mm512_unpackhi_epi8(l, h);
  }
  __m512i special(__m512i q) const { return _mm512_gf2p8affine_epi64_epi8(q, special_map, 0); }
};
}  // namespace
#endif

}  // namespace tandem::kernels
