// The q4_k_x4 layout (weight_layout.h), one level: Q4_K x permuted Q8_K
// (Q8_0's q8_0_x4: row_dot_x86_q8_0_x4.cpp; the driver both share:
// row_dot_x86_x4.h).
//
// A 64-byte load at step s holds, for each of a group's 4 rows (one 128-bit
// lane each), 4 bytes of each 64-value chunk c. Their low nibbles against
// the activations' 4 bytes of sub-block 2c, and the high ones against 2c+1,
// go through vpdpbusd into int32 lanes (row r, chunk c): after 8 steps each
// lane holds one sub-block's exact dot. One vpmulld by the sub-block scales,
// one vpmaddwd of the mins by Q8_K's bsums, and a short in-lane reduction
// give each row's exact integer sums for the super-block, which are added
// with one fma each: llama.cpp's GEMV order, bit for bit (the rowmajor
// tile needs vpmaddubsw + vpdpwssd and four scale shuffles per row instead;
// this one reads the same bytes at about twice the rate, row_dot_test).
// Without VNNI, vpmaddubsw + vpmaddwd stand in for vpdpbusd. The avx2
// level's kernel is row_dot_x86_q4_k_x4_256.cpp.
//
// q5_k_x4 (Q5_K; avx2: row_dot_x86_q4_k_x4_256.cpp) is the same tile with each step's
// fifth bits put in at bit 4 (weight_layout.h: one 64-byte line of them per
// four steps, byte for byte under the qs bytes), the high nibbles then
// shifted down rather than kept x16 (a fifth bit there would be 256).
#include "kernels/cpu/row_dot_x86_x4.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512F__)
namespace {

inline __m512i in_lanes(__m128i v) { return _mm512_broadcast_i32x4(v); }

// With VNNI Q4_K's high nibbles stay in place (x16): vpdpbusd sums in
// int32, and the factor is shifted out once per super-block. Without,
// vpmaddubsw would saturate.
constexpr bool kHighTimes16 = kVnni;

// Q5_K's fifth bits of step s: bit 2(s % 4) + h of each byte (h = 0: the
// low nibbles' sub-blocks, 1: the high ones') at bit 4, every other bit 0.
// (bit: a constant once the steps' loop is unrolled)
inline __m512i fifth_bits(__m512i qh, int bit) {
#if defined(__GFNI__)
  // Row i of the bit matrix (the byte that makes result bit i) is byte 7 - i.
  return _mm512_gf2p8affine_epi64_epi8(qh, _mm512_set1_epi64(int64_t(uint64_t(1u << bit) << 24)), 0);
#else
  // Per word: bit `bit` of each byte to bit 4 stays within its byte.
  const __m512i moved = bit < 4 ? _mm512_slli_epi16(qh, unsigned(4 - bit)) : _mm512_srli_epi16(qh, unsigned(bit - 4));
  return _mm512_and_si512(moved, _mm512_set1_epi8(0x10));
#endif
}

// Per 128-bit lane (one row's meta, weight_layout.h: word h holds sc[4h..],
// m[4h..] and d or dmin): the sub-block scales where the sums are, as
// dwords (r, c) of the even (2c) and odd (2c + 1) sub-blocks, and the 8
// mins as words. With VBMI one vpmultishiftqb per vector lifts each value
// out of its lane's word (and an and clears the bits above it); without,
// a dword or byte shuffle and per-element shifts.
struct Meta {
#if defined(__AVX512VBMI__)
  // bit offsets in each 64-bit word, byte by byte: even sc at 0, 12; odd at
  // 6, 18; mins at 24, 30, 36, 42
  __m512i ctl_even = _mm512_set1_epi64(0x0000000C00000000ll), ctl_odd = _mm512_set1_epi64(0x0000001200000006ll);
  __m512i ctl_mins = _mm512_set1_epi64(0x002A0024001E0018ll);
#else
  __m512i shift_even = _mm512_set1_epi64(0x0000000C00000000ll), shift_odd = _mm512_set1_epi64(0x0000001200000006ll);
  // mins: word j of each half from bytes (3, 4), (3, 4), (4, 5), (5, 6) of its word, shifted by 0, 6, 4, 2
  __m512i min_bytes = in_lanes(_mm_setr_epi8(3, 4, 3, 4, 4, 5, 5, 6, 11, 12, 11, 12, 12, 13, 13, 14));
  __m512i shift_mins = _mm512_set1_epi64(0x0002000400060000ll);
#endif
  __m512i keep_dw = _mm512_set1_epi64(0x0000003F0000003Fll), keep_w = _mm512_set1_epi64(0x003F003F003F003Fll);
  // d, dmin (words 3 and 7 of each row): of one group, and of two groups
  // interleaved per row (m[g] words 0-31, m[g + 1] words 32-63)
  __m512i halves = _mm512_castsi128_si512(_mm_setr_epi16(3, 7, 11, 15, 19, 23, 27, 31));
  __m512i pair_halves =
      _mm512_castsi256_si512(_mm256_setr_epi16(3, 7, 35, 39, 11, 15, 43, 47, 19, 23, 51, 55, 27, 31, 59, 63));
  __m512i pick = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 0, 0, 0, 0, 0, 0, 0);

  void scales(__m512i m, __m512i& sc_even, __m512i& sc_odd, __m512i& mins) const {
#if defined(__AVX512VBMI__)
    sc_even = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl_even, m), keep_dw);
    sc_odd = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl_odd, m), keep_dw);
    mins = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl_mins, m), keep_w);
#else
    const __m512i lows = _mm512_shuffle_epi32(m, _MM_PERM_CCAA);  // each word's low dword, twice
    sc_even = _mm512_and_si512(_mm512_srlv_epi32(lows, shift_even), keep_dw);
    sc_odd = _mm512_and_si512(_mm512_srlv_epi32(lows, shift_odd), keep_dw);
    mins = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_epi8(m, min_bytes), shift_mins), keep_w);
#endif
  }
};

// kFive: Q5_K in q5_k_x4, else Q4_K in q4_k_x4.
template <bool kFive>
struct QKX4 : KQuantX4Driving {
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};

// Q4KX4::tile's sums of one group (256 bits) or of a pair (512 bits). Not
// std::conditional_t, whose template argument drops the vector attributes.
template <bool kPair>
struct Q4KSums {
  using type = __m256;
};
template <>
struct Q4KSums<true> {
  using type = __m512;
};

template <bool kFive>
template <int G, int T>
void QKX4<kFive>::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                 float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  constexpr int kS = G * T <= 2 ? 2 : 1;  // chains per sum: enough in flight
  constexpr size_t kAhead = ahead(T);
  constexpr size_t kGroupBlock = kFive ? kQ5KX4GroupBlock : kQ4KX4GroupBlock;
  constexpr bool kTimes16 = kHighTimes16 && !kFive;
  const Meta meta;
  const __m512i low4 = _mm512_set1_epi8(0x0F), high4 = _mm512_set1_epi8(char(0xF0));
  // The sums: odd G, per group, lanes (sum, min) of rows 0..3; even G
  // (kPaired), per pair of groups, per 128-bit lane r, (sum, min) of group
  // g then g + 1.
  constexpr bool kPaired = G % 2 == 0;
  using Acc = typename Q4KSums<kPaired>::type;
  Acc acc[kPaired ? G / 2 : G][T];
#pragma GCC unroll 4
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = Acc{};
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kGroupBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    // One line per group here (the scales' line), then one per 64 weight
    // bytes in the loop below: requests at the pace of the arithmetic rather
    // than a burst of nine per block.
    const uint8_t* pf[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      pf[g] = ah.at(grp[g] + woff + kAhead, g);
      if constexpr (kAhead > 0)
        if (ah.ask) _mm_prefetch(reinterpret_cast<const char*>(pf[g]), _MM_HINT_T0);
    }
    __m512i D[G][T][2][kS];
    k_quant_x4_steps<0, 8>(act, aoff, D, [&](int g, int s, __m512i& lo, __m512i& hi) __attribute__((always_inline)) {
      // q5_k_x4: each part's fifth bits, then its 4 steps' lines (weight_layout.h)
      const size_t at = kFive ? q5_k_x4_qs_at(s) : 64 + 64 * size_t(s);
      const __m512i w = _mm512_loadu_si512(grp[g] + woff + at);
      if constexpr (kAhead > 0)
        if (ah.ask) _mm_prefetch(reinterpret_cast<const char*>(pf[g] + at), _MM_HINT_T0);
      if constexpr (kFive) {
        // (w & 0x0F) | bit 4, (w >> 4 & 0x0F) | bit 4
        const __m512i qh = _mm512_loadu_si512(grp[g] + woff + q5_k_x4_qh_at(s / 4));
        if constexpr (kAhead > 0)
          if (s % 4 == 0 && ah.ask)
            _mm_prefetch(reinterpret_cast<const char*>(pf[g] + q5_k_x4_qh_at(s / 4)), _MM_HINT_T0);
        lo = _mm512_ternarylogic_epi32(w, fifth_bits(qh, 2 * (s % 4)), low4, 0xEC);
        hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), fifth_bits(qh, 2 * (s % 4) + 1), low4, 0xEC);
      } else {
        lo = _mm512_and_si512(w, low4);
        hi = kTimes16 ? _mm512_and_si512(w, high4) : _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
      }
    });
    __m512i bsums[T];
    float dx[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = act[t] + aoff;
      const __m256i bs = load256(xb + offsetof(BlockQ8_K, bsums));
      bsums[t] = in_lanes(_mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
      dx[t] = load_unaligned<float>(xb);
    }
    // Each group's exact (sum, min) per row and token: lanes (r, c) of
    // isum and imin, c = the 64-value chunk (or pair of mins).
    __m512i isum[G][T], imin[G][T], m[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      m[g] = _mm512_loadu_si512(grp[g] + woff);
      __m512i sc_even, sc_odd, mins;
      meta.scales(m[g], sc_even, sc_odd, mins);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m512i d0 = D[g][t][0][0], d1 = D[g][t][1][0];
        if constexpr (kS == 2) {
          d0 = _mm512_add_epi32(d0, D[g][t][0][1]);
          d1 = _mm512_add_epi32(d1, D[g][t][1][1]);
        }
        if constexpr (kTimes16) d1 = _mm512_srai_epi32(d1, 4);
        isum[g][t] = _mm512_add_epi32(_mm512_mullo_epi32(d0, sc_even), _mm512_mullo_epi32(d1, sc_odd));
        imin[g][t] = _mm512_madd_epi16(mins, bsums[t]);
      }
    }
    if constexpr (kPaired) {
      // Two groups' sums reduced together: per 128-bit lane (row r), the
      // dwords (sum, min) of group g, then of group g + 1, against d, dmin of
      // both in the same order (one vpermt2w and one conversion per pair).
#pragma GCC unroll 2
      for (int g = 0; g < G; g += 2) {
        const __m512 dd =
            _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(m[g], meta.pair_halves, m[g + 1])));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m512i s0 = _mm512_add_epi32(_mm512_unpacklo_epi32(isum[g][t], imin[g][t]),
                                              _mm512_unpackhi_epi32(isum[g][t], imin[g][t]));
          const __m512i s1 = _mm512_add_epi32(_mm512_unpacklo_epi32(isum[g + 1][t], imin[g + 1][t]),
                                              _mm512_unpackhi_epi32(isum[g + 1][t], imin[g + 1][t]));
          const __m512i sums = _mm512_add_epi32(_mm512_unpacklo_epi64(s0, s1), _mm512_unpackhi_epi64(s0, s1));
          acc[g / 2][t] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dd, _mm512_set1_ps(dx[t])), acc[g / 2][t]);
        }
      }
    } else {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        // d, dmin of rows 0..3, interleaved as the sums below
        const __m256 dd = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(meta.halves, m[g])));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          // per lane: (isum, imin) summed over its 4 dwords into dwords 0, 1
          const __m512i s1 = _mm512_add_epi32(_mm512_unpacklo_epi32(isum[g][t], imin[g][t]),
                                              _mm512_unpackhi_epi32(isum[g][t], imin[g][t]));
          const __m512i s2 = _mm512_add_epi32(s1, _mm512_shuffle_epi32(s1, _MM_PERM_BADC));
          const __m256i sums = _mm512_castsi512_si256(_mm512_permutexvar_epi32(meta.pick, s2));
          acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dd, _mm256_set1_ps(dx[t])), acc[g][t]);
        }
      }
    }
  }
  if constexpr (kPaired) {
#pragma GCC unroll 2
    for (int g = 0; g < G; g += 2)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        // lanes 4r, 4r + 2: sum - min of row r of group g, g + 1
        alignas(64) float out[16];
        _mm512_store_ps(out, _mm512_sub_ps(acc[g / 2][t], _mm512_permute_ps(acc[g / 2][t], 0xB1)));
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          yg[g][size_t(t) * y_row_stride + size_t(r)] = out[4 * r];
          yg[g + 1][size_t(t) * y_row_stride + size_t(r)] = out[4 * r + 2];
        }
      }
  } else {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        // rows 0..3: sum - min, from lanes (0, 1), (2, 3), (4, 5), (6, 7)
        const __m128 lo = _mm256_castps256_ps128(acc[g][t]), hi = _mm256_extractf128_ps(acc[g][t], 1);
        _mm_storeu_ps(yg[g] + size_t(t) * y_row_stride,
                      _mm_sub_ps(_mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))));
      }
  }
}
}  // namespace

void q4_k_x4_rows(const RowDotParams& p) { x4_rows<QKX4<false>>(p); }
void q5_k_x4_rows(const RowDotParams& p) { x4_rows<QKX4<true>>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
