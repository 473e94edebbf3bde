// The q6_k_x4 layout (weight_layout.h), the avx512 levels (avx2:
// row_dot_x86_q6_k_x4_256.cpp, the same floats): Q6_K x permuted
// Q8_K, q4_k_x4's steps (row_dot_x86_x4.cpp) over 6-bit values. Why: the
// rowmajor Q6_K tile (row_dot_x86_k_quant_512.cpp) decodes each row's
// super-block apart and sums every token with vpmaddubsw, a subtraction of
// the -32's pair sums and vpmaddwd; one thread hot read 21-28 GB/s of it at
// one token, 48-51 of this (docs/cpu-kernels.md, "Stop 60").
#include "kernels/cpu/row_dot_x86_x4.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512F__)
namespace {

// q6_k_x4 (weight_layout.h): the same steps over 6-bit values. Steps 0-3
// hold sub-blocks 4c (low nibbles) and 4c + 2 (high) of each 64-value chunk
// c, steps 4-7 sub-blocks 4c + 1 and 4c + 3: each half's exact sums, less
// 32 times the activations' bsums of their sub-blocks, times the scales
// (vpmulld), are reduced per row and added with one fma a half.
struct Q6KX4 : KQuantX4Driving {
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};

// Step s's top bits of the low (h = 0) or high (h = 1) nibbles: bits
// 4(s % 2) + 2h and the one above it of each byte at bits 4-5, every other
// bit 0 (bit: a constant once the steps' loop is unrolled).
inline __m512i top_bits(__m512i qh, int bit) {
#if defined(__GFNI__)
  // result bit 4 from `bit` (matrix byte 3), bit 5 from bit + 1 (byte 2)
  return _mm512_gf2p8affine_epi64_epi8(
      qh, _mm512_set1_epi64(int64_t(uint64_t(1u << bit) << 24 | uint64_t(2u << bit) << 16)), 0);
#else
  const __m512i moved = bit < 4 ? _mm512_slli_epi16(qh, unsigned(4 - bit)) : _mm512_srli_epi16(qh, unsigned(bit - 4));
  return _mm512_and_si512(moved, _mm512_set1_epi8(0x30));
#endif
}

template <int G, int T>
void Q6KX4::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                 float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  constexpr int kS = G * T <= 2 ? 2 : 1;  // chains per sum: enough in flight
  constexpr size_t kAhead = ahead(T);
  constexpr int kPairs = (G + 1) / 2;  // a lone group pairs with itself
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // dword (r, c) of each 128-bit lane: bsum 4c + k (cvtepi16 puts bsum j in dword j)
  const __m512i pick_bsums = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
  // lanes 4r + j: d of row r of the pair's first group (j even) or second (odd)
  const __m256i pick_d = _mm256_setr_epi16(0, 4, 0, 4, 1, 5, 1, 5, 2, 6, 2, 6, 3, 7, 3, 7);
  __m512 acc[kPairs][T];
#pragma GCC unroll 4
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kQ6KX4GroupBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    const uint8_t* pf[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      pf[g] = ah.at(grp[g] + woff + kAhead, g);
      if constexpr (kAhead > 0)
        if (ah.ask) _mm_prefetch(reinterpret_cast<const char*>(pf[g]), _MM_HINT_T0);
    }
    __m512i bs[T];
    __m512 dx[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = act[t] + aoff;
      bs[t] = _mm512_slli_epi32(_mm512_cvtepi16_epi32(load256(xb + offsetof(BlockQ8_K, bsums))), 5);  // 32 bsum
      dx[t] = _mm512_set1_ps(load_unaligned<float>(xb));
    }
    __m512 dd[kPairs];
#pragma GCC unroll 2
    for (int i = 0; i < kPairs; ++i) {
      const int g1 = 2 * i + 1 < G ? 2 * i + 1 : 2 * i;
      const __m128i d8 = _mm_set_epi64x(load_unaligned<int64_t>(grp[g1] + woff + kQ6KX4D),
                                        load_unaligned<int64_t>(grp[2 * i] + woff + kQ6KX4D));
      dd[i] = _mm512_cvtph_ps(_mm256_permutexvar_epi16(pick_d, _mm256_castsi128_si256(d8)));
    }
    // (w & 0x0F) | top bits, (w >> 4 & 0x0F) | top bits
    const auto decode = [&](int g, int s, __m512i& lo, __m512i& hi) __attribute__((always_inline)) {
      const __m512i w = _mm512_loadu_si512(grp[g] + woff + q6_k_x4_qs_at(s));
      const __m512i qh = _mm512_loadu_si512(grp[g] + woff + q6_k_x4_qh_at(s / 2));
      if constexpr (kAhead > 0)
        if (ah.ask) {
          _mm_prefetch(reinterpret_cast<const char*>(pf[g] + q6_k_x4_qs_at(s)), _MM_HINT_T0);
          if (s % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(pf[g] + q6_k_x4_qh_at(s / 2)), _MM_HINT_T0);
          if (s == 7) _mm_prefetch(reinterpret_cast<const char*>(pf[g] + kQ6KX4D), _MM_HINT_T0);
        }
      lo = _mm512_ternarylogic_epi32(w, top_bits(qh, 4 * (s % 2)), low4, 0xEC);
      hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), top_bits(qh, 4 * (s % 2) + 2), low4, 0xEC);
    };
    __m512i D[G][T][2][kS];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      if (half == 0)
        k_quant_x4_steps<0, 4>(act, aoff, D, decode);
      else
        k_quant_x4_steps<4, 8>(act, aoff, D, decode);
      // this half's sub-blocks: 4c + half (low nibbles), 4c + 2 + half (high)
      const __m512i pick_lo = _mm512_add_epi32(pick_bsums, _mm512_set1_epi32(half));
      const __m512i pick_hi = _mm512_add_epi32(pick_bsums, _mm512_set1_epi32(2 + half));
      __m512i isum[G][T];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        // row r's scales sc[4c..4c+3] are dword c of its 128-bit lane: byte
        // `half` and 2 + half of each dword, sign-extended
        const __m512i sc = _mm512_loadu_si512(grp[g] + woff);
        const __m512i sc_lo = _mm512_srai_epi32(_mm512_slli_epi32(sc, 24 - 8 * half), 24);
        const __m512i sc_hi = _mm512_srai_epi32(_mm512_slli_epi32(sc, 8 - 8 * half), 24);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          __m512i d0 = D[g][t][0][0], d1 = D[g][t][1][0];
          if constexpr (kS == 2) {
            d0 = _mm512_add_epi32(d0, D[g][t][0][1]);
            d1 = _mm512_add_epi32(d1, D[g][t][1][1]);
          }
          d0 = _mm512_sub_epi32(d0, _mm512_permutexvar_epi32(pick_lo, bs[t]));
          d1 = _mm512_sub_epi32(d1, _mm512_permutexvar_epi32(pick_hi, bs[t]));
          isum[g][t] = _mm512_add_epi32(_mm512_mullo_epi32(d0, sc_lo), _mm512_mullo_epi32(d1, sc_hi));
        }
      }
#pragma GCC unroll 2
      for (int i = 0; i < kPairs; ++i) {
        const int g1 = 2 * i + 1 < G ? 2 * i + 1 : 2 * i;
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          // per 128-bit lane r: [S_g, S_g1, S_g, S_g1], S the row's sum over its 4 dwords
          const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(isum[2 * i][t], isum[g1][t]),
                                             _mm512_unpackhi_epi32(isum[2 * i][t], isum[g1][t]));
          const __m512i sums = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dd[i], dx[t]), acc[i][t]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < kPairs; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[i][t]);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        yg[2 * i][size_t(t) * y_row_stride + size_t(r)] = out[4 * r];
        if (2 * i + 1 < G) yg[2 * i + 1][size_t(t) * y_row_stride + size_t(r)] = out[4 * r + 1];
      }
    }
}
}  // namespace

void q6_k_x4_rows(const RowDotParams& p) { x4_rows<Q6KX4>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
