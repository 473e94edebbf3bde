// The q4_k_x4 and q5_k_x4 layouts (weight_layout.h) at the 256-bit level
// (avx2), through the x4 driver (row_dot_x86_x4.h): Q4_K in llama.cpp's GEMV
// order, bit for bit, as the 512-bit kernel (row_dot_x86_x4.cpp) and the
// rowmajor tiles; Q5_K with the 512-bit kernel's sums, the same floats.
//
// One 32-byte load at step s holds two rows' 4 bytes of each 64-value chunk
// (one 128-bit lane per row). vpmaddubsw of their low and high nibbles
// against the step's permuted activations gives int16 pairs per (row,
// chunk); they add up in int16 over the super-block's 8 steps (at most 16
// products of 15 * 128: 30720 < 2^15), and one vpmaddwd by the sub-block
// scales (as int16 pairs) per super-block makes the exact int32 sums. The
// rowmajor avx2 tile (row_dot_x86_q4_k_256.cpp) needs a vpmaddwd and a scale
// shuffle per 32 values instead, and unpacks ggml's scale bytes per row.
// The meta's 6-bit fields come out of each row's two 64-bit words with one
// vpshufb (the field's two bytes into an int16), a vpmullw by 2^(8 - its bit
// offset in the low byte) and a shift: AVX2 has no per-word variable shift.
// Tokens go two at a time through a super-block, sharing each step's load
// and nibble masks: one thread, 64 x 7168 from L2, 2 tokens 13.3-13.5 ->
// 17.3-17.7 GB/s (best of 8, alternated); 1 token and 4 (8.3: their sums
// and accumulators fill the 16 registers) unchanged.
//
// q5_k_x4 takes the same steps with each step's fifth bits put in at bit 4
// (a shift, a mask and an or: no GFNI at this level); its values reach 31,
// so the int16 sums go 4 steps at a time, each half scaled apart. The
// integer sums are the 512-bit tile's exact ones: the same floats. One
// thread hot (64 x 2048) read 22-31 GB/s of it at one token where Q5_K's
// rowmajor avx2 tile read 10 (docs/cpu-kernels.md, "Stop 61").
#include "kernels/cpu/row_dot_x86_x4.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512F__)
namespace {

// A 6-bit field of a row's meta: int16 lane l of its vector takes the
// meta bytes (at, at + 1) of its 128-bit lane's row and keeps 6 bits from
// bit `shift` (0, 2, 4 or 6) on.
struct Field {
  int8_t at;
  int8_t shift;
};
// Word h of a row's meta: sc[4h + i] at bit 6i, m[4h + i] at 24 + 6i, d or
// dmin at 48. Per chunk c (an int32 lane, as two int16), the even sub-block
// 2c's scale and the odd one's; the 8 mins in order.
constexpr Field kFields[3][8] = {
    {{0, 0}, {0, 0}, {1, 4}, {1, 4}, {8, 0}, {8, 0}, {9, 4}, {9, 4}},          // even scales
    {{0, 6}, {0, 6}, {2, 2}, {2, 2}, {8, 6}, {8, 6}, {10, 2}, {10, 2}},        // odd scales
    {{3, 0}, {3, 6}, {4, 4}, {5, 2}, {11, 0}, {11, 6}, {12, 4}, {13, 2}}};     // mins
struct FieldTables {
  alignas(32) int8_t at[3][32];   // vpshufb indices
  alignas(32) int16_t mul[3][16];  // 2^(8 - shift)
};
constexpr FieldTables field_tables() {
  FieldTables t{};
  for (int f = 0; f < 3; ++f)
    for (int l = 0; l < 8; ++l) {
      const Field x = kFields[f][l];
      t.at[f][2 * l] = t.at[f][16 + 2 * l] = x.at;
      t.at[f][2 * l + 1] = t.at[f][16 + 2 * l + 1] = int8_t(x.at + 1);
      t.mul[f][l] = t.mul[f][8 + l] = int16_t(1 << (8 - x.shift));
    }
  return t;
}
alignas(32) constexpr FieldTables kFieldTables = field_tables();
enum FieldKind { kEvenScales, kOddScales, kMins };

// Field f of a pair of rows' meta (one row per 128-bit lane).
inline __m256i meta_field(__m256i meta, FieldKind f) {
  const __m256i at = _mm256_load_si256(reinterpret_cast<const __m256i*>(kFieldTables.at[f]));
  const __m256i mul = _mm256_load_si256(reinterpret_cast<const __m256i*>(kFieldTables.mul[f]));
  return _mm256_and_si256(_mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(meta, at), mul), 8),
                          _mm256_set1_epi16(0x3F));
}

// d and dmin (bytes 6, 7 and 14, 15 of a row's meta) of rows 0..3 as 8
// floats [d0, d2, dmin0, dmin2, d1, d3, dmin1, dmin3], from the meta of rows
// 0, 1 and of rows 2, 3.
inline __m256 meta_d_dmin(__m256i m01, __m256i m23) {
  const __m256i first = _mm256_broadcastsi128_si256(_mm_setr_epi8(6, 7, -1, -1, 14, 15, -1, -1, -1, -1, -1, -1, -1,
                                                                  -1, -1, -1));
  const __m256i second = _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, 6, 7, -1, -1, 14, 15, -1, -1, -1, -1,
                                                                   -1, -1, -1, -1));
  const __m256i dd = _mm256_or_si256(_mm256_shuffle_epi8(m01, first), _mm256_shuffle_epi8(m23, second));
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(dd, 0x08)));
}

// kFive: Q5_K in q5_k_x4 (weight_layout.h), else Q4_K in q4_k_x4.
template <bool kFive>
struct QKX4Avx2 : KQuantX4Avx2Driving {
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};

// Q5_K's fifth bits of step s (bit 2(s % 4) + h of each byte of its part's
// line, weight_layout.h) at bit 4, every other bit 0.
inline __m256i fifth_bits(__m256i qh, int bit) { return bits_to_4(qh, bit, 0x10); }

// N tokens' (1 or 2) int16 pair sums over steps kFrom..kTo-1 of one group's
// super-block at blk: lo/hi[u][h] for token u, rows 2h, 2h + 1. The tokens
// share each step's weight loads and unpacking (3 of a step's 7
// instructions for one Q4_K token). Q4_K's 8 steps add up in int16 (at most
// 16 products of 15 * 128: 30720 < 2^15); Q5_K's values reach 31, so a
// call takes 4 steps (31744).
template <bool kFive, int kFrom, int kTo, int N>
inline void qk_x4_pairs(const uint8_t* blk, const uint8_t* const (&x)[N], const uint8_t* pf, bool prefetch,
                        __m256i (&lo)[N][2], __m256i (&hi)[N][2]) {
  static_assert(!kFive || kTo - kFrom <= 4);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 2
  for (int u = 0; u < N; ++u) lo[u][0] = lo[u][1] = hi[u][0] = hi[u][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = kFrom; s < kTo; ++s) {
    const size_t at = kFive ? q5_k_x4_qs_at(s) : 64 + 64 * size_t(s);
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + at), _MM_HINT_T0);
      if (kFive && s % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(pf + q5_k_x4_qh_at(s / 4)), _MM_HINT_T0);
    }
    __m256i x_lo[N], x_hi[N];
#pragma GCC unroll 2
    for (int u = 0; u < N; ++u) x_lo[u] = broadcast16(x[u] + 32 * s), x_hi[u] = broadcast16(x[u] + 32 * s + 16);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i w = load256(blk + at + 32 * h);
      __m256i w_lo = _mm256_and_si256(w, low4), w_hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
      if constexpr (kFive) {
        const __m256i qh = load256(blk + q5_k_x4_qh_at(s / 4) + 32 * h);
        w_lo = _mm256_or_si256(w_lo, fifth_bits(qh, 2 * (s % 4)));
        w_hi = _mm256_or_si256(w_hi, fifth_bits(qh, 2 * (s % 4) + 1));
      }
#pragma GCC unroll 2
      for (int u = 0; u < N; ++u) {
        lo[u][h] = _mm256_add_epi16(lo[u][h], _mm256_maddubs_epi16(w_lo, x_lo[u]));
        hi[u][h] = _mm256_add_epi16(hi[u][h], _mm256_maddubs_epi16(w_hi, x_hi[u]));
      }
    }
  }
}

// N tokens' exact int32 sums of one group's super-block at blk, per
// (row, chunk) lane times the sub-blocks' scales: isum[u][h] for rows 2h,
// 2h + 1 (Q5_K: two calls of 4 steps, each scaled).
template <bool kFive, int N>
inline void qk_x4_sums(const uint8_t* blk, const uint8_t* const (&x)[N], const uint8_t* pf, bool prefetch,
                       __m256i m01, __m256i m23, __m256i (&isum)[N][2]) {
  __m256i lo[N][2], hi[N][2];
  const auto add = [&](bool first) __attribute__((always_inline)) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i mh = h ? m23 : m01;
      const __m256i even = meta_field(mh, kEvenScales), odd = meta_field(mh, kOddScales);
#pragma GCC unroll 2
      for (int u = 0; u < N; ++u) {
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(lo[u][h], even), _mm256_madd_epi16(hi[u][h], odd));
        isum[u][h] = first ? s : _mm256_add_epi32(isum[u][h], s);
      }
    }
  };
  if constexpr (kFive) {
    qk_x4_pairs<true, 0, 4, N>(blk, x, pf, prefetch, lo, hi);
    add(true);
    qk_x4_pairs<true, 4, 8, N>(blk, x, pf, prefetch, lo, hi);
    add(false);
  } else {
    qk_x4_pairs<false, 0, 8, N>(blk, x, pf, prefetch, lo, hi);
    add(true);
  }
}

template <bool kFive>
template <int G, int T>
void QKX4Avx2<kFive>::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                           float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  constexpr size_t kAhead = ahead(T);
  constexpr size_t kGroupBlock = kFive ? kQ5KX4GroupBlock : kQ4KX4GroupBlock;
  // Per group and token, lanes as `sums` below.
  __m256 acc[G][T];
#pragma GCC unroll 4
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kGroupBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = grp[g] + woff;
      const uint8_t* pf = ah.at(blk + kAhead, g);
      if (ah.ask) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
      // rows 0, 1 and rows 2, 3: their meta, scales (int16 pairs per chunk) and mins
      const __m256i m01 = load256(blk), m23 = load256(blk + 32);
      // One token's sums into acc[g][t].
      auto finish = [&](int t, const __m256i (&isum)[2]) {
        const __m256i bs = load256(act[t] + aoff + offsetof(BlockQ8_K, bsums));
        const __m256i pairs =
            _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
        const __m256i imin0 = _mm256_madd_epi16(meta_field(m01, kMins), pairs);
        const __m256i imin1 = _mm256_madd_epi16(meta_field(m23, kMins), pairs);
        // [sum r0, sum r2, min r0, min r2 | sum r1, sum r3, min r1, min r3]
        const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(isum[0], isum[1]), _mm256_hadd_epi32(imin0, imin1));
        const __m256 dd = meta_d_dmin(m01, m23);
        const float dx = load_unaligned<float>(act[t] + aoff);
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dd, _mm256_set1_ps(dx)), acc[g][t]);
      };
      // Q5_K: two tokens share the weights' unpacking, other counts go one at
      // a time, whose sums stay in registers (one thread hot, 64 x 2048: 3-8
      // tokens 100-114 -> 107-137 GFLOP/s; Q4_K's pairs keep theirs).
      if constexpr (kFive && T != 2) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const uint8_t* const x[1] = {act[t] + aoff + offsetof(BlockQ8_K, qs)};
          __m256i isum[1][2];
          qk_x4_sums<kFive, 1>(blk, x, pf, t == 0 && ah.ask, m01, m23, isum);
          finish(t, isum[0]);
        }
        continue;
      }
      // tokens two at a time (sharing the weights' unpacking), the last alone
#pragma GCC unroll 2
      for (int t = 0; t + 2 <= T; t += 2) {
        const uint8_t* const x[2] = {act[t] + aoff + offsetof(BlockQ8_K, qs),
                                     act[t + 1] + aoff + offsetof(BlockQ8_K, qs)};
        __m256i isum[2][2];
        qk_x4_sums<kFive, 2>(blk, x, pf, t == 0 && ah.ask, m01, m23, isum);
        finish(t, isum[0]);
        finish(t + 1, isum[1]);
      }
      if constexpr (T % 2 == 1) {
        const uint8_t* const x[1] = {act[T - 1] + aoff + offsetof(BlockQ8_K, qs)};
        __m256i isum[1][2];
        qk_x4_sums<kFive, 1>(blk, x, pf, T == 1 && ah.ask, m01, m23, isum);
        finish(T - 1, isum[0]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      alignas(32) float r[8];
      _mm256_store_ps(r, acc[g][t]);
      float* yt = yg[g] + size_t(t) * y_row_stride;
      yt[0] = r[0] - r[2];
      yt[1] = r[4] - r[6];
      yt[2] = r[1] - r[3];
      yt[3] = r[5] - r[7];
    }
}

}  // namespace

void q4_k_x4_rows(const RowDotParams& p) { x4_rows<QKX4Avx2<false>>(p); }
void q5_k_x4_rows(const RowDotParams& p) { x4_rows<QKX4Avx2<true>>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
