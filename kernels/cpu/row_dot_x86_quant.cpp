// The quantised row dots of one level (see row_dot_x86_tile.h): Q8_0 x Q8_0
// and the k-quants Q4_K, Q5_K, Q6_K x Q8_K.
//
// Q8_0, and the k-quants below AVX-512, use 256-bit blocks: one Q8_0 block
// or one 32-value sub-block of a k-quant is one register, and u8 x s8
// products go through vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (exact
// either way: no pair of products here reaches int16's limit). At the
// avx512 levels Q4_K takes the 512-bit tile below, Q5_K and Q6_K
// row_dot_x86_k_quant_512.cpp's.
#include <cmath>

#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
namespace {

// ---- Q8_0 x Q8_0 -------------------------------------------------------------------
// Per 32-value block: |w| (u8) against x with w's sign, one int32 vector,
// scaled by d_w * d_x into an f32 vector.
template <int R, int T>
struct Q8_0Tile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
    const int64_t nb = p.cols / kQK8_0;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t off = size_t(b) * sizeof(BlockQ8_0);
      __m256i wq[R], wabs[R];
      float dw[R];
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        ah.at(w[i], off);
        wq[i] = load256(w[i] + off + 2);
        wabs[i] = _mm256_sign_epi8(wq[i], wq[i]);
        dw[i] = half(w[i] + off);
      }
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m256i xq = load256(a[j] + off + 2);
        const float dx = half(a[j] + off);
        #pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i s = dot_u8s8(wabs[i], _mm256_sign_epi8(xq, wq[i]));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = hsum256(acc[i][j]);
  }
};

// ---- k-quants x Q8_K -----------------------------------------------------------------
// A super-block of 256 values in 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 of 16
// (Q6_K) with small integer scales: the integer dots of a super-block are
// scaled by their sub-block scales in int32 and summed, then converted to
// f32 once with d_w * d_x; the mins (Q4_K, Q5_K) and Q6_K's -32 offset go
// through Q8_K's precomputed 16-value sums (bsums).
struct Q8KRef {
  float d;
  const uint8_t* block;
  explicit Q8KRef(const uint8_t* b) : d(load_unaligned<float>(b)), block(b) {}
  const uint8_t* qs(int k) const { return block + offsetof(BlockQ8_K, qs) + 32 * k; }
  int32_t bsum(int j) const {
    return load_unaligned<int16_t>(block + offsetof(BlockQ8_K, bsums) + 2 * j);
  }
};

struct K4Scales {
  int32_t sc[8], m[8];
  explicit K4Scales(const uint8_t* scales) {
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      uint8_t s, mm;
      k4_scale_min(j, scales, &s, &mm);
      sc[j] = s;
      m[j] = mm;
    }
  }
};

// Q4_K and Q5_K share everything but where the 5th bit comes from, and the
// order of the sums, which is llama.cpp's on x86 for each: Q4_K (repacked
// there) with kGemmOrder as its GEMM, one exact integer sum per 64-value
// chunk for the scales and one for the mins, each added with an fma (its
// GEMV order, the same per super-block, is row_dot_x86_q4_k_256.cpp's tile
// at this level). Q5_K as ggml_vec_dot_q5_K_q8_K: 8 int32 lanes (bytes
// 4k..4k+3 of every sub-block) fma'd into 8 f32 lanes, the mins' exact sum
// fma'd into a scalar added at the end.
template <bool kFive, int R, int T, bool kGemmOrder = false>
void k45_tile(const RowDotParams& p, const uint8_t* const* w, const uint8_t* const* a,
              float (&out)[R][T], const Ahead& ah) {
  static_assert(!(kFive && kGemmOrder), "llama.cpp repacks Q4_K only");
  static_assert(kFive || kGemmOrder, "Q4_K's GEMV order: q4_k_gemv256_rows");
  float gemm_acc[R][T] = {}, gemm_min[R][T] = {};
  constexpr size_t kBlock = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kFive ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  __m256 acc[R][T];
  float mins[R][T] = {};
  #pragma GCC unroll 8
  for (auto& row : acc)
    #pragma GCC unroll 8
    for (auto& v : row) v = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t nb = p.cols / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* wb = w[i] + woff;
      ah.step(w[i], woff, kBlock);
      const K4Scales ks(wb + 4);
      const float d = half(wb), dmin = half(wb + 2);
      __m256i q[8];
      #pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = load256(wb + kQs + 32 * c);
        q[2 * c] = _mm256_and_si256(raw, low4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      }
      if constexpr (kFive) {
        const __m256i hb = load256(wb + offsetof(BlockQ5_K, qh));
        const __m256i one = _mm256_set1_epi8(1);
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          // bit j of every qh byte is the 5th bit of sub-block j
          const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hb, j), one);
          q[j] = _mm256_or_si256(q[j], _mm256_slli_epi16(bit, 4));
        }
      }
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const Q8KRef x(a[t] + aoff);
        if constexpr (kGemmOrder) {
          #pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            const __m256i s0 = dot_u8s8(q[2 * c], load256(x.qs(2 * c)));
            const __m256i s1 = dot_u8s8(q[2 * c + 1], load256(x.qs(2 * c + 1)));
            const int32_t isum = hsum256i(_mm256_add_epi32(_mm256_mullo_epi32(s0, _mm256_set1_epi32(ks.sc[2 * c])),
                                                           _mm256_mullo_epi32(s1, _mm256_set1_epi32(ks.sc[2 * c + 1]))));
            const int32_t imin = ks.m[2 * c] * (x.bsum(4 * c) + x.bsum(4 * c + 1)) +
                                 ks.m[2 * c + 1] * (x.bsum(4 * c + 2) + x.bsum(4 * c + 3));
            gemm_acc[i][t] = std::fma(float(isum), d * x.d, gemm_acc[i][t]);
            gemm_min[i][t] = std::fma(float(imin), dmin * x.d, gemm_min[i][t]);
          }
          continue;
        }
        __m256i isum = _mm256_setzero_si256();
        int32_t msum = 0;
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          const __m256i s = dot_u8s8(q[j], load256(x.qs(j)));
          isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, _mm256_set1_epi32(ks.sc[j])));
          msum += ks.m[j] * (x.bsum(2 * j) + x.bsum(2 * j + 1));
        }
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][t]);
        mins[i][t] = std::fma(-(dmin * x.d), float(msum), mins[i][t]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      out[i][t] = kFive ? hsum256(acc[i][t]) + mins[i][t] : gemm_acc[i][t] - gemm_min[i][t];
}

#if defined(__AVX512F__)
// The 512-bit Q4_K tile (Q5_K's is row_dot_x86_k_quant_512.cpp's, since
// stop 56). One 64-byte load of qs holds the low nibbles
// of sub-blocks (0, 2) and the high ones of (1, 3) (then 4..7 likewise), so
// the activations are gathered per token once into the same pairs, X[k],
// shared by the R rows. Per register: vpmaddubsw (u4 x s8 pairs, exact in
// int16) then vpdpwssd (or vpmaddwd + add) with the sub-block scales as
// int16, into one int32 sum per super-block; the mins go through the pair
// sums of Q8_K's bsums with vpmaddwd.
alignas(64) constexpr int16_t kK4ScaleIndex[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};
constexpr int kK4Pair[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

inline __m512i pair256(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

// Exact sums of four 512-bit int32 registers, one per lane.
inline __m128i hsum4x512(const __m512i (&v)[4]) {
  __m256i h[4];
  #pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) h[k] = _mm256_add_epi32(_mm512_castsi512_si256(v[k]), _mm512_extracti64x4_epi64(v[k], 1));
  const __m256i q = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}
inline __m128i hsum4x128(const __m128i (&v)[4]) {
  return _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
}

// The R*T dots of a Q4_K tile in llama.cpp's GEMV order, four dots to the
// lanes of a 128-bit register: dot k's super-block gives 16 int32 lanes of
// scaled dots and 4 of scaled mins; once four dots have theirs (or the last
// one has), each is reduced to one exact integer and added with one fma per
// lane, as the GEMV adds each super-block. Lane k % 4 of group k / 4 is dot k.
template <int R, int T>
struct Q4KGemvSums {
  static constexpr int kDots = R * T, kGroups = (kDots + 3) / 4;
  __m128 acc[kGroups], min[kGroups];
  __m512i pend[4];
  __m128i pend_min[4];
  float dd[4], dm[4];
  Q4KGemvSums() {
    #pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) acc[g] = min[g] = _mm_setzero_ps();
  }
  void add(int k, __m512i isum, __m128i imin, float d, float dmin) {
    const int slot = k & 3;
    pend[slot] = isum;
    pend_min[slot] = imin;
    dd[slot] = d;
    dm[slot] = dmin;
    if (slot == 3 || k == kDots - 1) {
      #pragma GCC unroll 4
      for (int s = slot + 1; s < 4; ++s) {
        pend[s] = _mm512_setzero_si512();
        pend_min[s] = _mm_setzero_si128();
        dd[s] = dm[s] = 0.0f;
      }
      const int g = k >> 2;
      acc[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4x512(pend)), _mm_setr_ps(dd[0], dd[1], dd[2], dd[3]), acc[g]);
      min[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4x128(pend_min)), _mm_setr_ps(dm[0], dm[1], dm[2], dm[3]), min[g]);
    }
  }
  void result(float (&out)[R][T]) const {
    alignas(16) float r[kGroups * 4];
    #pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) _mm_store_ps(r + 4 * g, _mm_sub_ps(acc[g], min[g]));
    #pragma GCC unroll 8
    for (int k = 0; k < kDots; ++k) out[k / T][k % T] = r[k];
  }
};

template <int R, int T, bool kGemmOrder = false>
void k4_tile512(const RowDotParams& p, const uint8_t* const* w, const uint8_t* const* a,
                float (&out)[R][T], const Ahead& ah) {
  static_assert(T <= 4, "a token per lane of the GEMM-order sums");
  // kGemmOrder: each row's running sums, one token per lane.
  __m128 gemm_acc[R], gemm_min[R];
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i) gemm_acc[i] = gemm_min[i] = _mm_setzero_ps();
  constexpr size_t kBlock = sizeof(BlockQ4_K);
  constexpr size_t kQs = offsetof(BlockQ4_K, qs);
  Q4KGemvSums<R, T> gemv;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const int64_t nb = p.cols / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    __m512i X[T][4];
    __m128i pairs[T];
    float dx[T];
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = a[t] + aoff;
      const uint8_t* qs = xb + offsetof(BlockQ8_K, qs);
      #pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) X[t][k] = pair256(qs + 32 * kK4Pair[k][0], qs + 32 * kK4Pair[k][1]);
      const __m256i bs = load256(xb + offsetof(BlockQ8_K, bsums));
      pairs[t] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      dx[t] = load_unaligned<float>(xb);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* wb = w[i] + woff;
      ah.step(w[i], woff, kBlock);
      const float d = half(wb), dmin = half(wb + 2);
      const __m128i packed = k4_unpack_vec(wb + 4);
      const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(packed));
      const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(packed, packed));
      __m512i S[4], Q[4];
      #pragma GCC unroll 8
      for (int k = 0; k < 4; ++k)
        S[k] = _mm512_permutexvar_epi16(_mm512_load_si512(kK4ScaleIndex[k]), sc16);
      const __m512i raw0 = _mm512_loadu_si512(wb + kQs), raw1 = _mm512_loadu_si512(wb + kQs + 64);
      Q[0] = _mm512_and_si512(raw0, low4);
      Q[1] = _mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4);
      Q[2] = _mm512_and_si512(raw1, low4);
      Q[3] = _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4);
      __m128 chunk_sums[4] = {}, chunk_mins[4] = {};  // kGemmOrder: per token
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        if constexpr (kGemmOrder) {
          // Register k holds sub-blocks kK4Pair[k]: chunk 0 (sub-blocks 0, 1)
          // is the low halves of k = 0, 1, chunk 1 their high halves, chunks
          // 2 and 3 likewise from k = 2, 3. Four exact chunk sums, then the
          // GEMM's scalar fma chains.
          __m512i ch[2];
          #pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m512i p0 = _mm512_maddubs_epi16(Q[2 * h], X[t][2 * h]);
            const __m512i p1 = _mm512_maddubs_epi16(Q[2 * h + 1], X[t][2 * h + 1]);
#if defined(__AVX512VNNI__)
            ch[h] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), p0, S[2 * h]), p1, S[2 * h + 1]);
#else
            ch[h] = _mm512_add_epi32(_mm512_madd_epi16(p0, S[2 * h]), _mm512_madd_epi16(p1, S[2 * h + 1]));
#endif
          }
          const __m256i h0 = _mm256_hadd_epi32(_mm512_castsi512_si256(ch[0]), _mm512_extracti64x4_epi64(ch[0], 1));
          const __m256i h1 = _mm256_hadd_epi32(_mm512_castsi512_si256(ch[1]), _mm512_extracti64x4_epi64(ch[1], 1));
          const __m256i hh = _mm256_hadd_epi32(h0, h1);
          const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(hh), _mm256_extracti128_si256(hh, 1));
          chunk_sums[t] = _mm_cvtepi32_ps(isum);
          chunk_mins[t] = _mm_cvtepi32_ps(_mm_madd_epi16(mins, pairs[t]));
          continue;
        }
        // two chains of two, so the dots' latency does not serialise a row
        __m512i isum0 = _mm512_setzero_si512(), isum1 = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int k = 0; k < 4; k += 2) {
          const __m512i p0 = _mm512_maddubs_epi16(Q[k], X[t][k]);
          const __m512i p1 = _mm512_maddubs_epi16(Q[k + 1], X[t][k + 1]);
#if defined(__AVX512VNNI__)
          isum0 = _mm512_dpwssd_epi32(isum0, p0, S[k]);
          isum1 = _mm512_dpwssd_epi32(isum1, p1, S[k + 1]);
#else
          isum0 = _mm512_add_epi32(isum0, _mm512_madd_epi16(p0, S[k]));
          isum1 = _mm512_add_epi32(isum1, _mm512_madd_epi16(p1, S[k + 1]));
#endif
        }
        gemv.add(i * T + t, _mm512_add_epi32(isum0, isum1), _mm_madd_epi16(mins, pairs[t]), d * dx[t],
                 dmin * dx[t]);
      }
      if constexpr (kGemmOrder) {
        // Tokens to lanes (chunk c of every token), then one fma per chunk
        // in order: lane by lane, the GEMM's scalar chain.
        _MM_TRANSPOSE4_PS(chunk_sums[0], chunk_sums[1], chunk_sums[2], chunk_sums[3]);
        _MM_TRANSPOSE4_PS(chunk_mins[0], chunk_mins[1], chunk_mins[2], chunk_mins[3]);
        alignas(16) float dd[4] = {}, dm[4] = {};
        #pragma GCC unroll 4
        for (int t = 0; t < T; ++t) dd[t] = d * dx[t], dm[t] = dmin * dx[t];
        const __m128 ddv = _mm_load_ps(dd), dmv = _mm_load_ps(dm);
        #pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          gemm_acc[i] = _mm_fmadd_ps(chunk_sums[c], ddv, gemm_acc[i]);
          gemm_min[i] = _mm_fmadd_ps(chunk_mins[c], dmv, gemm_min[i]);
        }
      }
    }
  }
  if constexpr (kGemmOrder) {
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      alignas(16) float r[4];
      _mm_store_ps(r, _mm_sub_ps(gemm_acc[i], gemm_min[i]));
      #pragma GCC unroll 4
      for (int t = 0; t < T; ++t) out[i][t] = r[t];
    }
  } else {
    gemv.result(out);
  }
}

template <int R, int T>
struct Q4KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    k4_tile512<R, T>(p, w, a, out, ah);
  }
};
#endif
template <int R, int T>
struct Q4KGemmOrderTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
#if defined(__AVX512F__)
    k4_tile512<R, T, true>(p, w, a, out, ah);
#else
    k45_tile<false, R, T, true>(p, w, a, out, ah);
#endif
  }
};
void q8_0_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kQ8_0X16)
    q8_0_x16_rows(p);
  else if (p.layout == WeightLayout::kQ8_0X4)
    q8_0_x4_rows(p);
  else
    drive<Q8_0Tile>(p);
}
void q4_k_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kQ4KX4)
    q4_k_x4_rows(p);
  else if (p.gemm_order)
    drive<Q4KGemmOrderTile>(p);
#if defined(__AVX512F__)
  else
    drive<Q4KTile>(p);
#else
  else
    q4_k_gemv256_rows(p);
#endif
}
// Below AVX-512 (the avx512 levels take q5_k_512_rows).
template <int R, int T>
struct Q5KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    k45_tile<true, R, T>(p, w, a, out, ah);
  }
};

// Q6_K below AVX-512: value = d * sc[j] * (q - 32), q = 4 low bits from ql and 2 high bits
// from qh; the 32 values of one register span two 16-value sub-blocks.
// ggml_vec_dot_q6_K_q8_K's order: 8 int32 lanes (bytes 4k..4k+3 of every 32
// values, the -32 included) fma'd into 8 f32 lanes per super-block.
template <int R, int T>
struct Q6KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
    const int64_t nb = p.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t woff = size_t(b) * sizeof(BlockQ6_K), aoff = size_t(b) * sizeof(BlockQ8_K);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const uint8_t* wb = w[i] + woff;
        ah.step(w[i], woff, sizeof(BlockQ6_K));
        const auto* sc = reinterpret_cast<const int8_t*>(wb + offsetof(BlockQ6_K, scales));
        const float d = half(wb + offsetof(BlockQ6_K, d));
        __m256i q[8];  // q[k] holds values 32k .. 32k+31
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = wb + 64 * h;
          const __m256i qh = load256(wb + offsetof(BlockQ6_K, qh) + 32 * h);
          const __m256i l0 = load256(ql), l1 = load256(ql + 32);
          auto hi = [&](int shift) {
            return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), two), 4);
          };
          q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4), hi(0));
          q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), hi(2));
          q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), hi(4));
          q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), hi(6));
        }
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const Q8KRef x(a[t] + aoff);
          __m256i isum = _mm256_setzero_si256();
          #pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            // the -32 in every lane, as ggml's lanes carry it
            const __m256i xv = load256(x.qs(k));
            const __m256i s = _mm256_sub_epi32(dot_u8s8(q[k], xv), dot_u8s8(m32, xv));
            // lanes 0-3: sub-block 2k, lanes 4-7: sub-block 2k+1
            const __m256i scv = _mm256_setr_m128i(_mm_set1_epi32(sc[2 * k]), _mm_set1_epi32(sc[2 * k + 1]));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, scv));
          }
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][t]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = hsum256(acc[i][j]);
  }
};

}  // namespace

// Q5_K and Q6_K rows: the x4 layouts' tiles, else this level's rowmajor ones.
#if defined(__AVX512BW__)
constexpr RowDotFn kQ5KRowMajor = q5_k_512_rows, kQ6KRowMajor = q6_k_512_rows;
#else
constexpr RowDotFn kQ5KRowMajor = drive<Q5KTile>, kQ6KRowMajor = drive<Q6KTile>;
#endif
void q5_k_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kQ5KX4)
    q5_k_x4_rows(p);
  else
    kQ5KRowMajor(p);
}
void q6_k_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kQ6KX4)
    q6_k_x4_rows(p);
  else
    kQ6KRowMajor(p);
}

RowDotFn find_quant(DType wtype) {
  switch (wtype) {
    case DType::kQ8_0: return q8_0_rows;
    case DType::kQ4_K: return q4_k_rows;
    case DType::kQ5_K: return q5_k_rows;
    case DType::kQ6_K: return q6_k_rows;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
