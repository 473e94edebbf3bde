// The x4 layouts (weight_layout.h), one level: Q4_K in q4_k_x4 x permuted
// Q8_K, and Q8_0 in q8_0_x4 x Q8_0.
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
// level has no kernel for this layout and takes the generic one.
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512F__)
namespace {

inline __m512i in_lanes(__m128i v) { return _mm512_broadcast_i32x4(v); }
inline __m512i broadcast16(const uint8_t* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

#if defined(__AVX512VNNI__)
// The high nibbles stay in place (x16): vpdpbusd sums in int32, and the
// factor is shifted out once per super-block.
constexpr bool kHighTimes16 = true;
constexpr bool kVnni = true;
inline __m512i dot4(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
constexpr bool kHighTimes16 = false;  // vpmaddubsw would saturate
constexpr bool kVnni = false;
inline __m512i dot4(__m512i acc, __m512i u, __m512i s) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
#endif

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

// The two layouts' kernels: tile<G, T> takes G groups (4 rows each, group g
// starting at row row0[g]) x T tokens. For one or two tokens, x4_rows sets
// two groups side by side, from the two halves of the row range (far-apart
// streams). On a Zen 4 EPYC four streams (the quarters) had kept DRAM busier
// than two (Q8_0, DeepSeek-V3 batch 1: 81-88% of the read against 77-84%);
// on a Zen 5 EPYC, where one core's misses in flight bound a quiet read, the
// halves won, alternated by repetition in one process (stop 40): one thread,
// Q4_K 0.845-0.851 -> 0.917-0.919 of the read (DeepSeek-V3) and 0.841-0.847
// -> 0.881 (Qwen3-30B-A3B), Q8_0 0.869 -> 0.905 and 0.883 -> 0.918; two
// threads at reads above 70 GB/s Q4_K 0.880 -> 0.938 and 0.833 -> 0.865,
// Q8_0 0.906 -> 0.939 and 0.892 -> 0.911; below 55 within -3% to +5%.
// A synthetic one-thread read with four vdpbf16ps per line did the same
// there: 41-42 GB/s from two streams, 40 from four, 34 from eight.
// One token asks for each group's lines 4 KiB ahead with prefetcht0. On a Zen
// 4 EPYC L1 prefetches (1 and 2 KiB ahead) had held the layer to 29-48 GB/s
// where without them it reached 42-58 (reads of 55-61; docs/cpu-kernels.md),
// and stop 40 found 0.5-2 KiB no better than none on a Zen 5 EPYC; there,
// further ahead wins (stop 41). One thread over a 1 GiB matrix, of a plain
// read (Q4_K 2048 and 7168 columns, Q8_0 7168): none 0.90, 0.89, 0.92; 3 KiB
// 0.93, 0.94, 0.93; 4 KiB 0.93, 0.94, 0.95; 6 KiB 0.90, 0.92, 0.90; 8 KiB
// 0.88. The layer at batch 1, alternated by repetition in one process, two
// threads at reads above 70 GB/s, none -> 4 KiB: DeepSeek-V3 Q4_K 0.877 ->
// 0.913 and 0.918 -> 0.917, Q8_0 0.897 -> 0.927 and 0.920 -> 0.940;
// Qwen3-30B-A3B Q4_K 0.823 -> 0.852 and 0.834 -> 0.878, Q8_0 0.885 -> 0.893
// and 0.888 -> 0.915 (one thread: 0.887 -> 0.924, 0.895 -> 0.948, 0.865 ->
// 0.872, 0.910 -> 0.914).
constexpr size_t kOneTokenAhead = 4096;

// Where a group's prefetches go: `ahead` bytes on in its stream and, past
// the stream's end, on into the caller's next rows for that stream
// (RowDotParams::then_rows: the up projection after the gate one), so the
// next call does not start cold. One thread over 1 GiB in 768-row calls
// (Q4_K, 2048 columns) taken in a scattered order, of a plain read: 0.890
// and 0.895 -> 0.906 and 0.913 (in order, where the prefetches run on into
// the next call's rows anyway: 0.914 -> 0.917). The layer at batch 1
// (Qwen3-30B-A3B, two threads, alternated by repetition, reads 30-60 GB/s):
// the tasks' span 2.1 us (Q4_K) and 6.6 us (Q8_0) shorter.
template <int G>
struct StreamsAhead {
  uintptr_t end[G];  // the stream's end; UINTPTR_MAX: no next rows
  uintptr_t jump[G];  // next rows - end (mod 2^64)
  static StreamsAhead none() {
    StreamsAhead a;
    for (int g = 0; g < G; ++g) a.end[g] = UINTPTR_MAX, a.jump[g] = 0;
    return a;
  }
  const uint8_t* at(const uint8_t* p, int g) const {
    const uintptr_t a = uintptr_t(p);
    return reinterpret_cast<const uint8_t*>(a >= end[g] ? a + jump[g] : a);
  }
};

struct Q4KX4 {
  static constexpr int64_t kBlockElems = kQK_K;
  // Prefetch distance for passes of n tokens (one token: kOneTokenAhead).
  // Two and eight tokens lose 6-11% at 1 KiB and keep 2.
  static constexpr size_t ahead(int64_t n) { return n == 1 ? kOneTokenAhead : kPrefetch; }
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                   size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah);
};
struct Q8_0X4 {
  static constexpr int64_t kBlockElems = kQK8_0;
  static constexpr size_t ahead(int64_t n) { return n == 1 ? kOneTokenAhead : kPrefetch; }
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                   size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah);
};
struct Q8_0X4Blocks : Q8_0X4 {
  template <int G, int T>
  static void tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                   size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah);
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

template <int G, int T>
void Q4KX4::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                 size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah) {
  constexpr int kS = G * T <= 2 ? 2 : 1;  // chains per sum: enough in flight
  constexpr size_t kAhead = ahead(T);
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
    const size_t woff = size_t(b) * kQ4KX4GroupBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    // One line per group here (the scales' line), then one per 64 weight
    // bytes in the loop below: requests at the pace of the arithmetic rather
    // than a burst of nine per block.
    const uint8_t* pf[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      pf[g] = ah.at(grp[g] + woff + kAhead, g);
      if constexpr (kAhead > 0) _mm_prefetch(reinterpret_cast<const char*>(pf[g]), _MM_HINT_T0);
    }
    __m512i D[G][T][2][kS];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
        for (int i = 0; i < kS; ++i) D[g][t][0][i] = D[g][t][1][i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      __m512i x0[T], x1[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const uint8_t* q = act[t] + aoff + offsetof(BlockQ8_K, qs) + 32 * s;
        x0[t] = broadcast16(q);
        x1[t] = broadcast16(q + 16);
      }
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512i w = _mm512_loadu_si512(grp[g] + woff + 64 + 64 * s);
        if constexpr (kAhead > 0)
          _mm_prefetch(reinterpret_cast<const char*>(pf[g] + 64 + 64 * s), _MM_HINT_T0);
        const __m512i lo = _mm512_and_si512(w, low4);
        const __m512i hi = kHighTimes16 ? _mm512_and_si512(w, high4) : _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          D[g][t][0][s % kS] = dot4(D[g][t][0][s % kS], lo, x0[t]);
          D[g][t][1][s % kS] = dot4(D[g][t][1][s % kS], hi, x1[t]);
        }
      }
    }
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
        if constexpr (kHighTimes16) d1 = _mm512_srai_epi32(d1, 4);
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
        float* yt = y + size_t(t) * y_row_stride;
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          yt[row0[g] + r] = out[4 * r];
          yt[row0[g + 1] + r] = out[4 * r + 2];
        }
      }
  } else {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        // rows 0..3: sum - min, from lanes (0, 1), (2, 3), (4, 5), (6, 7)
        const __m128 lo = _mm256_castps256_ps128(acc[g][t]), hi = _mm256_extractf128_ps(acc[g][t], 1);
        _mm_storeu_ps(y + size_t(t) * y_row_stride + size_t(row0[g]),
                      _mm_sub_ps(_mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))));
      }
  }
}

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
void Q8_0X4::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                  size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah) {
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
        float* out = y + size_t(t) * y_row_stride + size_t(row0[g] + 2 * h);
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
void Q8_0X4Blocks::tile(const uint8_t* const (&grp)[G], const uint8_t* const (&act)[T], int64_t nb, float* y,
                        size_t y_row_stride, const int64_t (&row0)[G], const StreamsAhead<G>& ah) {
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
        y[size_t(L::token(s, l)) * y_row_stride + size_t(row0[L::group(s, l)] + L::row(s, l))] = out[l];
  }
}

template <class K, int G, int T>
void x4_tokens(const RowDotParams& p, const int64_t (&row0)[G], int64_t t, const StreamsAhead<G>& ah) {
  const uint8_t* grp[G];
  const uint8_t* act[T];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) grp[g] = p.w + size_t(row0[g]) * p.w_row_stride;
#pragma GCC unroll 4
  for (int j = 0; j < T; ++j) act[j] = activation_row(p, t + j);
  K::template tile<G, T>(grp, act, p.cols / K::kBlockElems, p.y + size_t(t) * p.y_row_stride, p.y_row_stride,
                         row0, ah);
}

// Groups side by side against all tokens: two for one or two tokens
// (far-apart streams, and enough sums in flight), else one group and up to
// four tokens at a time.
template <class K, int G>
void x4_groups(const RowDotParams& p, const int64_t (&row0)[G], const StreamsAhead<G>& ah) {
  int64_t t = 0;
  if constexpr (G == 2) {
    for (; t + 2 <= p.n_tokens; t += 2) x4_tokens<K, 2, 2>(p, row0, t, ah);
    if (t < p.n_tokens) x4_tokens<K, 2, 1>(p, row0, t, ah);
  } else {
    for (; t + 4 <= p.n_tokens; t += 4) x4_tokens<K, 1, 4>(p, row0, t, ah);
    switch (p.n_tokens - t) {
      case 3: x4_tokens<K, 1, 3>(p, row0, t, ah); break;
      case 2: x4_tokens<K, 1, 2>(p, row0, t, ah); break;
      case 1: x4_tokens<K, 1, 1>(p, row0, t, ah); break;
      default: break;
    }
  }
}

// G groups at a time, one from each of G equal parts of the range (far-apart
// streams, as the rowmajor tiles read four quarters), each part's start
// prefetched first; the groups left over go one at a time.
template <class K, int G>
void x4_streams(const RowDotParams& p, int64_t groups) {
  const int64_t q = groups / G;
  for (int k = 0; k < G && q > 0; ++k)
    for (size_t o = 0; o < K::ahead(p.n_tokens); o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p.w + size_t(p.row_begin + k * q * kX4Rows) * p.w_row_stride + o),
                   _MM_HINT_T0);
  // Each part's prefetches run on into the same part of the caller's next
  // rows, when the parts are the whole range.
  StreamsAhead<G> ah = StreamsAhead<G>::none();
  if (p.then_rows && G * q == groups)
    for (int k = 0; k < G; ++k) {
      const size_t at = size_t(k * q * kX4Rows) * p.w_row_stride, len = size_t(q * kX4Rows) * p.w_row_stride;
      ah.end[k] = uintptr_t(p.w + size_t(p.row_begin) * p.w_row_stride + at + len);
      ah.jump[k] = uintptr_t(p.then_rows + at) - ah.end[k];
    }
  for (int64_t j = 0; j < q; ++j) {
    int64_t row0[G];
#pragma GCC unroll 4
    for (int k = 0; k < G; ++k) row0[k] = p.row_begin + (k * q + j) * kX4Rows;
    x4_groups<K, G>(p, row0, ah);
  }
  for (int64_t j = G * q; j < groups; ++j) {
    const int64_t row0[1] = {p.row_begin + j * kX4Rows};
    x4_groups<K, 1>(p, row0, StreamsAhead<1>::none());
  }
}

// Two streams for one or two tokens, one for more.
template <class K>
void x4_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kX4Rows;
  if (p.n_tokens <= 2)
    x4_streams<K, 2>(p, groups);
  else
    x4_streams<K, 1>(p, groups);
}

}  // namespace

void q4_k_x4_rows(const RowDotParams& p) { x4_rows<Q4KX4>(p); }
void q8_0_x4_rows(const RowDotParams& p) { x4_rows<Q8_0X4>(p); }
void q8_0_x4_block_rows(const RowDotParams& p) { x4_rows<Q8_0X4Blocks>(p); }

#else
// No 512-bit kernels at this level: the reference takes the layouts.
void q4_k_x4_rows(const RowDotParams& p) { generic::find(DType::kQ4_K)(p); }
void q8_0_x4_rows(const RowDotParams& p) { generic::find(DType::kQ8_0)(p); }
void q8_0_x4_block_rows(const RowDotParams& p) { generic::find(DType::kQ8_0)(p); }  // unused below avx512
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
