// The q6_k_x4 layout (weight_layout.h) at the 256-bit level (avx2), through
// the x4 driver (row_dot_x86_x4.h): the 512-bit tile's sums
// (row_dot_x86_q6_k_x4.cpp), the same floats, in q4_k_x4's avx2 steps
// (row_dot_x86_q4_k_x4_256.cpp). Why: the rowmajor avx2 tile decodes each
// row's super-block apart; at avx2 the layer's Q6_K rows ran at about 40%
// of the read at one token (docs/cpu-kernels.md, "Stop 61").
//
// One 32-byte load of a step's qs line holds two rows (a 128-bit lane
// each); the part's top-bits line under it gives each value's bits 4-5
// (a shift and a mask: no GFNI at this level). vpmaddubsw of the 6-bit
// values (0..63) against the permuted activations adds up in int16 over a
// part's two steps (at most 4 products of 63 * 128: 32256 < 2^15), then one
// vpmaddwd by the sub-block scales per part makes int32 lanes (row, chunk).
// Each half super-block (steps 0-3: sub-blocks 4c and 4c + 2, steps 4-7:
// 4c + 1 and 4c + 3) takes its -32 off through Q8_K's bsums (one vpmaddwd
// of the scales by them) and is added with one fma, as the 512-bit tile.
#include "kernels/cpu/row_dot_x86_x4.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512F__)
namespace {

struct Q6KX4Avx2 : KQuantX4Avx2Driving {
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};

// Step s's top bits of the low (h = 0) or high (h = 1) nibbles (bits
// 4(s % 2) + 2h and the one above, weight_layout.h) at bits 4-5, every
// other bit 0.
inline __m256i top_bits(__m256i qh, int bit) { return bits_to_4(qh, bit, 0x30); }

// A pair of rows' scales for half `half` (row r's 16 int8 in its 128-bit
// lane, weight_layout.h), as int16 pairs per chunk c: lo = sc[4c + half]
// twice, hi = sc[4c + 2 + half] twice, both = (sc[4c + half], sc[4c + 2 +
// half]). Each byte goes to the high byte of its word, then an arithmetic
// shift sign-extends it.
struct HalfScales {
  __m256i lo, hi, both;
};
inline HalfScales half_scales(__m256i sc, int half) {
  const auto word_high = [&](int a0, int a1, int a2, int a3) {
    const __m128i idx = _mm_setr_epi8(-1, char(a0), -1, char(a0 + 0), -1, char(a1), -1, char(a1), -1, char(a2), -1,
                                      char(a2), -1, char(a3), -1, char(a3));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(sc, _mm256_broadcastsi128_si256(idx)), 8);
  };
  HalfScales s;
  s.lo = word_high(half, 4 + half, 8 + half, 12 + half);
  s.hi = word_high(2 + half, 6 + half, 10 + half, 14 + half);
  const __m128i idx = _mm_setr_epi8(-1, char(half), -1, char(2 + half), -1, char(4 + half), -1, char(6 + half), -1,
                                    char(8 + half), -1, char(10 + half), -1, char(12 + half), -1, char(14 + half));
  s.both = _mm256_srai_epi16(_mm256_shuffle_epi8(sc, _mm256_broadcastsi128_si256(idx)), 8);
  return s;
}

// N tokens' (1 or 2) int16 pair sums of part p (steps 2p, 2p + 1) of one
// group's super-block at blk: lo/hi[u][h] for token u, rows 2h, 2h + 1.
template <int N>
inline void q6_k_x4_part(const uint8_t* blk, int p, const uint8_t* const (&x)[N], const uint8_t* pf, bool prefetch,
                         __m256i (&lo)[N][2], __m256i (&hi)[N][2]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 2
  for (int u = 0; u < N; ++u) lo[u][0] = lo[u][1] = hi[u][0] = hi[u][1] = _mm256_setzero_si256();
  if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(pf + q6_k_x4_qh_at(p)), _MM_HINT_T0);
#pragma GCC unroll 2
  for (int s = 2 * p; s < 2 * p + 2; ++s) {
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(pf + q6_k_x4_qs_at(s)), _MM_HINT_T0);
    __m256i x_lo[N], x_hi[N];
#pragma GCC unroll 2
    for (int u = 0; u < N; ++u) x_lo[u] = broadcast16(x[u] + 32 * s), x_hi[u] = broadcast16(x[u] + 32 * s + 16);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i w = load256(blk + q6_k_x4_qs_at(s) + 32 * h);
      const __m256i qh = load256(blk + q6_k_x4_qh_at(p) + 32 * h);
      const __m256i w_lo = _mm256_or_si256(_mm256_and_si256(w, low4), top_bits(qh, 4 * (s % 2)));
      const __m256i w_hi =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), low4), top_bits(qh, 4 * (s % 2) + 2));
#pragma GCC unroll 2
      for (int u = 0; u < N; ++u) {
        lo[u][h] = _mm256_add_epi16(lo[u][h], _mm256_maddubs_epi16(w_lo, x_lo[u]));
        hi[u][h] = _mm256_add_epi16(hi[u][h], _mm256_maddubs_epi16(w_hi, x_hi[u]));
      }
    }
  }
}

// Q8_K's bsums of half `half` as int16 pairs per chunk c, (bsum[4c + half],
// bsum[4c + 2 + half]), in both 128-bit lanes.
inline __m256i half_bsums(const uint8_t* bsums, int half) {
  const __m256i bs = load256(bsums);  // 16 int16
  // dword j's word `half` (bsum 2j + half) as a sign-extended dword
  const __m256i d = half ? _mm256_srai_epi32(bs, 16) : _mm256_srai_epi32(_mm256_slli_epi32(bs, 16), 16);
  // words: lane 0 [b(half), b(2+half), b(4+half), b(6+half)] twice, lane 1 the rest
  const __m256i w = _mm256_packs_epi32(d, d);
  return _mm256_permute4x64_epi64(w, 0x88);  // qwords 0, 2, 0, 2
}

template <int G, int T>
void Q6KX4Avx2::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                     float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  constexpr size_t kAhead = ahead(T);
  // Per group and token: lanes [r0, r2, r0, r2 | r1, r3, r1, r3].
  __m256 acc[G][T];
#pragma GCC unroll 4
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kQ6KX4GroupBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = grp[g] + woff;
      const uint8_t* pf = ah.at(blk + kAhead, g);
      if (ah.ask) {
        _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(pf + kQ6KX4D), _MM_HINT_T0);
      }
      // d of rows [0, 2, 0, 2 | 1, 3, 1, 3]
      const __m128i d4 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kQ6KX4D));
      const __m256 dd = _mm256_cvtph_ps(_mm_shuffle_epi8(d4, _mm_setr_epi8(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7)));
      // One half's sums of N tokens from t on, into acc[g][t..].
      const auto half_sums = [&]<int N>(int t, int half) __attribute__((always_inline)) {
        const uint8_t* x[N];
#pragma GCC unroll 2
        for (int u = 0; u < N; ++u) x[u] = act[t + u] + aoff + offsetof(BlockQ8_K, qs);
        const bool ask = t == 0 && ah.ask;
        __m256i isum[N][2];
        HalfScales sc[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) sc[h] = half_scales(load256(blk + 32 * h), half);
#pragma GCC unroll 2
        for (int p = 2 * half; p < 2 * half + 2; ++p) {
          __m256i lo[N][2], hi[N][2];
          q6_k_x4_part<N>(blk, p, x, pf, ask, lo, hi);
#pragma GCC unroll 2
          for (int u = 0; u < N; ++u)
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
              const __m256i s =
                  _mm256_add_epi32(_mm256_madd_epi16(lo[u][h], sc[h].lo), _mm256_madd_epi16(hi[u][h], sc[h].hi));
              isum[u][h] = p == 2 * half ? s : _mm256_add_epi32(isum[u][h], s);
            }
        }
#pragma GCC unroll 2
        for (int u = 0; u < N; ++u) {
          const uint8_t* xb = act[t + u] + aoff;
          const __m256i bs = half_bsums(xb + offsetof(BlockQ8_K, bsums), half);
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h)
            isum[u][h] = _mm256_sub_epi32(isum[u][h], _mm256_slli_epi32(_mm256_madd_epi16(sc[h].both, bs), 5));
          // [r0 c01, r0 c23, r2 c01, r2 c23 | r1 .., r3 ..], then each row's sum twice
          const __m256i s = _mm256_hadd_epi32(isum[u][0], isum[u][1]);
          const __m256i sums = _mm256_hadd_epi32(s, s);
          const __m256 m = _mm256_mul_ps(dd, _mm256_set1_ps(load_unaligned<float>(xb)));
          acc[g][t + u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), m, acc[g][t + u]);
        }
      };
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        // Two tokens share the weights' unpacking; other counts go one at a
        // time, whose sums stay in registers (one thread hot, 64 x 2048:
        // 3-8 tokens 90-100 -> 100-118 GFLOP/s).
        if constexpr (T != 2) {
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) half_sums.template operator()<1>(t, half);
        } else {
          half_sums.template operator()<2>(0, half);
        }
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
      yt[0] = r[0];
      yt[1] = r[4];
      yt[2] = r[1];
      yt[3] = r[5];
    }
}

}  // namespace

void q6_k_x4_rows(const RowDotParams& p) { x4_rows<Q6KX4Avx2>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
