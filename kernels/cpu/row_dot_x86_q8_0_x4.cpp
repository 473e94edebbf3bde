// The q8_0_x4 layout (weight_layout.h), one level: Q8_0 x Q8_0, in ggml's
// lanes and order (Q8_0X4) and in whole blocks for the amx level
// (Q8_0X4Blocks); the driver is row_dot_x86_x4.h's, shared with q4_k_x4.
#include "kernels/cpu/row_dot_x86_x4.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512F__)
namespace {

struct Q8_0X4 {
  static constexpr bool kTwoStreams = true;
  static constexpr int kPairTokens = 3;
  static constexpr int64_t kBlockElems = kQK8_0;
  static constexpr size_t ahead(int64_t n) { return n == 1 ? kOneTokenAhead : kPrefetch; }
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};
struct Q8_0X4Blocks : Q8_0X4 {
  static constexpr int kPairTokens = 2;
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                   float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah);
};

// A q8_0_x4 block is 136 bytes: three lines `ahead` bytes on cover every
// line the block can touch.
inline void prefetch_q8_0_x4_block(const uint8_t* at) {
  _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(at + 64), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(at + 128), _MM_HINT_T0);
}

// A token's Q8_0 block (the values in both 256-bit halves) and, with VNNI,
// -128 * each lane's 4 values' sum: what the weights' stored +128 adds.
inline __m512i q8_0_x4_activations(const uint8_t* block, __m512i& bias) {
  const __m512i x = _mm512_broadcast_i64x4(load256(block + 2));
  if constexpr (kVnni)
    bias = _mm512_sub_epi32(_mm512_setzero_si512(),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), x));
  else
    bias = _mm512_setzero_si512();  // unused
  return x;
}

// 8 exact int32 lanes of w * x for the two rows of w (stored + 128).
inline __m512i q8_0_x4_dot(__m512i w, __m512i x, __m512i bias) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(bias, w, x);
  } else {
    const __m512i ws = _mm512_xor_si512(w, _mm512_set1_epi8(char(0x80)));  // the signed values
    const __m512i xs = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(ws), _mm512_setzero_si512(), x);
    return dot4(_mm512_setzero_si512(), _mm512_abs_epi8(ws), xs);
  }
}

// Q8_0 (q8_0_x4): a 64-byte load holds two rows' blocks (one per 256-bit
// half), stored as w + 128, so one vpdpbusd against the activations, its
// lanes starting from -128 * the lane's activation sum, gives ggml's 8
// exact int32 lanes of w * x for two rows at once, and each half gets the
// fma of its own row's d_w * d_x: the rowmajor tile's lanes and order
// exactly. Without VNNI (vpmaddubsw would saturate on w + 128) the signed
// values come back with one xor and take |w| against x with w's sign.
template <int G, int T>
void Q8_0X4::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                  float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  constexpr size_t kAhead = ahead(T);
  const __m512i rows01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i rows23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  __m512 acc[G][2][T];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[g][0][t] = acc[g][1][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kQ8_0X4GroupBlock, aoff = size_t(b) * sizeof(BlockQ8_0);
    __m512i x[T], bias[T];
    __m128 dx[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      x[t] = q8_0_x4_activations(act[t] + aoff, bias[t]);
      dx[t] = _mm_set1_ps(half(act[t] + aoff));
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* gb = grp[g] + woff;
      if constexpr (kAhead > 0) prefetch_q8_0_x4_block(ah.at(gb + kAhead, g));
      const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb)));
      const __m512i w[2] = {_mm512_loadu_si512(gb + 8), _mm512_loadu_si512(gb + 72)};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(dw, dx[t]));
          const __m512i d = q8_0_x4_dot(w[h], x[t], bias[t]);
          acc[g][h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(h ? rows23 : rows01, sc),
                                         acc[g][h][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        float* out = yg[g] + size_t(t) * y_row_stride + size_t(2 * h);
        out[0] = hsum256(_mm512_castps512_ps256(acc[g][h][t]));
        out[1] = hsum256(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[g][h][t]), 1)));
      }
}

// Q8_0 (q8_0_x4) in whole blocks, for the amx level: the same vpdpbusd
// lanes as Q8_0X4, but each block's lanes are added up in integers
// (reduce8: eight such vectors to their 16 rows' block dots), and each row
// and token adds float(dot) * (d_w * d_x) with one fma, block after block:
// the floats of the amx level's tiles (row_dot_amx_q8.cpp) at any token
// count, so at that level a token's outputs do not depend on its batch
// either. Within a rounding of ggml's order (weight_layout_test); one
// token streams at 0.83x of Q8_0X4's rate with hot weights (one thread,
// 256 x 2048), the same from DRAM.

// The 16 row sums of 8 vectors of 2 rows x 8 int32 lanes: lane 4B + k of the
// result is row B % 2 of v[4 * (B / 2) + k], summed over its 8 lanes.
inline __m512i reduce8(const __m512i (&v)[8]) {
  __m512i s1[4], s2[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: a0+a2, b0+b2, a1+a3, b1+b3
    s1[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // per 128-bit lane: the sums of 4 vectors' lanes
    s2[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(s1[2 * i], s1[2 * i + 1]),
                             _mm512_unpackhi_epi64(s1[2 * i], s1[2 * i + 1]));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Which row and token each lane of tile<G, T>'s sums holds. Vector f of a
// block is token f / (2G), group f / 2 % G, rows 2(f % 2) and 2(f % 2) + 1;
// eight make a set (reduce8), the last padded with zeros.
template <int G, int T>
struct Q8_0X4Lanes {
  static constexpr int kVecs = 2 * G * T, kSets = (kVecs + 7) / 8;
  static constexpr int vec(int s, int lane) { return 8 * s + 4 * (lane / 8) + lane % 4; }
  static constexpr bool used(int s, int lane) { return vec(s, lane) < kVecs; }
  static constexpr int token(int s, int lane) { return used(s, lane) ? vec(s, lane) / (2 * G) : 0; }
  static constexpr int group(int s, int lane) { return used(s, lane) ? vec(s, lane) / 2 % G : 0; }
  static constexpr int row(int s, int lane) { return used(s, lane) ? 2 * (vec(s, lane) % 2) + lane / 4 % 2 : 0; }
  struct Index {
    alignas(64) int32_t dw[kSets][16];  // into the groups' scales, 4 per group
    alignas(64) int32_t dx[kSets][16];  // into the tokens' scales
  };
  static constexpr Index index() {
    Index x{};
    for (int s = 0; s < kSets; ++s)
      for (int l = 0; l < 16; ++l) {
        x.dw[s][l] = 4 * group(s, l) + row(s, l);
        x.dx[s][l] = token(s, l);
      }
    return x;
  }
};
template <int G, int T>
inline constexpr typename Q8_0X4Lanes<G, T>::Index kQ8_0X4Index = Q8_0X4Lanes<G, T>::index();

template <int G, int T>
void Q8_0X4Blocks::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb,
                        float* const (&yg)[G], size_t y_row_stride, const StreamsAhead<G>& ah) {
  using L = Q8_0X4Lanes<G, T>;
  constexpr int S = L::kSets;
  constexpr size_t kAhead = ahead(T);
  __m512i idx_dw[S], idx_dx[S];
  __m512 acc[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    idx_dw[s] = _mm512_load_si512(kQ8_0X4Index<G, T>.dw[s]);
    idx_dx[s] = _mm512_load_si512(kQ8_0X4Index<G, T>.dx[s]);
    acc[s] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kQ8_0X4GroupBlock, aoff = size_t(b) * sizeof(BlockQ8_0);
    __m512i x[T], bias[T];
    alignas(16) float dxs[4] = {};
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      x[t] = q8_0_x4_activations(act[t] + aoff, bias[t]);
      dxs[t] = half(act[t] + aoff);
    }
    __m512i v[8 * S];
    __m128i dh[4];  // the groups' 4 fp16 scales each
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* gb = grp[g] + woff;
      if constexpr (kAhead > 0) prefetch_q8_0_x4_block(ah.at(gb + kAhead, g));
      dh[g] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb));
      const __m512i w[2] = {_mm512_loadu_si512(gb + 8), _mm512_loadu_si512(gb + 72)};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) v[(t * G + g) * 2 + h] = q8_0_x4_dot(w[h], x[t], bias[t]);
    }
#pragma GCC unroll 8
    for (int f = L::kVecs; f < 8 * S; ++f) v[f] = _mm512_setzero_si512();
    // the groups' scales in order (4g + row), as floats
    __m256i d8 = _mm256_castsi128_si256(G > 1 ? _mm_unpacklo_epi64(dh[0], dh[1 % G]) : dh[0]);
    if constexpr (G > 2) d8 = _mm256_inserti128_si256(d8, _mm_unpacklo_epi64(dh[2 % G], dh[3 % G]), 1);
    const __m512 dw = _mm512_cvtph_ps(d8);
    const __m512 dx = _mm512_castps128_ps512(_mm_load_ps(dxs));
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const __m512i sums = reduce8(reinterpret_cast<const __m512i(&)[8]>(v[8 * s]));
      const __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(idx_dw[s], dw), _mm512_permutexvar_ps(idx_dx[s], dx));
      acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), sc, acc[s]);
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    alignas(64) float out[16];
    _mm512_store_ps(out, acc[s]);
    for (int l = 0; l < 16; ++l)
      if (L::used(s, l))
        yg[L::group(s, l)][size_t(L::token(s, l)) * y_row_stride + size_t(L::row(s, l))] = out[l];
  }
}}  // namespace

void q8_0_x4_rows(const RowDotParams& p) { x4_rows<Q8_0X4>(p); }
void q8_0_x4_block_rows(const RowDotParams& p) { x4_rows<Q8_0X4Blocks>(p); }

#else
// No 512-bit kernels at this level: the reference takes the layout.
void q8_0_x4_rows(const RowDotParams& p) { generic::find(DType::kQ8_0)(p); }
void q8_0_x4_block_rows(const RowDotParams& p) { generic::find(DType::kQ8_0)(p); }  // unused below avx512
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
