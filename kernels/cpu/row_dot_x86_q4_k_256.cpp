// Q4_K x Q8_K rowmajor rows at the 256-bit level (avx2): llama.cpp's GEMV
// order, as k45_tile at the other levels sums it — per super-block one exact
// integer sum of the scales' terms and one of the mins', each added with an
// fma — in fewer instructions:
// - the 6-bit scales and mins unpack with four 32-bit masks and shifts
//   (llama.cpp's), not one branchy byte at a time;
// - a sub-block's products meet its scale in vpmaddwd, which also pairs the
//   vpmaddubsw sums (u4 * s8 pairs reach 3840, times a scale of at most 63
//   twice: far inside int32), instead of a vpmaddwd by ones and a vpmulld;
// - the four rows' integer sums reduce together (three vphaddd for the
//   scales' sums, three for the mins'), and their
//   fmas run as the lanes of one vector: lane 2i row i's scales' sum, lane
//   2i + 1 its mins'. Each lane does the scalar fma of llama.cpp's GEMV, so
//   the floats are that order's (as the AVX-512 levels' k4_tile512), bit
//   for bit (RowDot.KQuantsSumInLlamaCppsX86OrderAtEveryLevel).
// Below AVX-512 routed experts are stored as q4_k_x4 (row_dot_x86_q4_k_x4_256.cpp,
// faster still); this takes Q4_K kept rowmajor (attention, dense layers, the
// bench's --rowmajor). On a Zen 3: 3.6 GB/s a thread with k45_tile, 14-18 with this.
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512F__)
namespace {

// Sub-block k's scale (byte k of both 128-bit lanes of scales) zero-extended
// into every int16 lane: an index byte with its top bit set gives 0.
inline __m256i broadcast_scale(__m256i scales, int k) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(int16_t(0x8000 | k)));
}

// Lane i: the sum of v[i]'s lanes (i < 4).
inline __m128i hsum4(const __m256i (&v)[4]) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m128i hsum4(const __m128i (&v)[4]) {
  return _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
}

template <int R, int T>
struct Q4KGemv256Tile {
  static_assert(R <= 4, "a tile's rows are lanes of one vector");
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[T];  // lane 2i: row i's scales' fmas, lane 2i + 1: its mins'
    #pragma GCC unroll 4
    for (auto& v : acc) v = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const bool contiguous = ah.next == intptr_t(ah.row_bytes);
    const int64_t nb = p.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t woff = size_t(b) * sizeof(BlockQ4_K), aoff = size_t(b) * sizeof(BlockQ8_K);
      __m128i pairs[T];  // bsums of sub-block j's two halves added, int16 lane j
      #pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i bs = load256(a[t] + aoff + offsetof(BlockQ8_K, bsums));
        pairs[t] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      }
      __m256i isum[T][4];
      __m128i msum[T][4];
      alignas(16) uint32_t dd[4] = {};  // each row's fp16 d and dmin
      #pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          isum[t][i] = _mm256_setzero_si256();
          msum[t][i] = _mm_setzero_si128();
        }
      }
      #pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const uint8_t* wb = w[i] + woff;
        if (contiguous) {  // every tile but a call's last: the prefetch runs on into the next row
          #pragma GCC unroll 4
          for (size_t o = 0; o < sizeof(BlockQ4_K); o += 64)
            _mm_prefetch(reinterpret_cast<const char*>(wb + kPrefetch + o), _MM_HINT_T0);
        } else {
          ah.step(w[i], woff, sizeof(BlockQ4_K));
        }
        dd[i] = load_unaligned<uint32_t>(wb);
        const __m128i sm = k4_unpack_vec(wb + 4);
        const __m256i sc = _mm256_broadcastq_epi64(sm);
        const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) msum[t][i] = _mm_madd_epi16(mins, pairs[t]);
        #pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // 32 bytes: sub-block 2c low nibbles, 2c + 1 high
          const __m256i raw = load256(wb + offsetof(BlockQ4_K, qs) + 32 * c);
          const __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          const __m256i s_lo = broadcast_scale(sc, 2 * c), s_hi = broadcast_scale(sc, 2 * c + 1);
          #pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const uint8_t* x = a[t] + aoff + offsetof(BlockQ8_K, qs) + 64 * c;
            const __m256i plo = _mm256_madd_epi16(s_lo, _mm256_maddubs_epi16(lo, load256(x)));
            const __m256i phi = _mm256_madd_epi16(s_hi, _mm256_maddubs_epi16(hi, load256(x + 32)));
            isum[t][i] = _mm256_add_epi32(isum[t][i], _mm256_add_epi32(plo, phi));
          }
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dd)));
      #pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m128i is = hsum4(isum[t]), ms = hsum4(msum[t]);
        const __m256i both = _mm256_set_m128i(_mm_unpackhi_epi32(is, ms), _mm_unpacklo_epi32(is, ms));
        const __m256 dx = _mm256_mul_ps(dw, _mm256_set1_ps(load_unaligned<float>(a[t] + aoff)));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(both), dx, acc[t]);
      }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      alignas(32) float r[8];
      _mm256_store_ps(r, acc[t]);
      #pragma GCC unroll 4
      for (int i = 0; i < R; ++i) out[i][t] = r[2 * i] - r[2 * i + 1];
    }
  }
};

}  // namespace

void q4_k_gemv256_rows(const RowDotParams& p) { drive<Q4KGemv256Tile>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
