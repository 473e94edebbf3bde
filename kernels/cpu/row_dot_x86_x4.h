// The x4 layouts' (weight_layout.h) shared pieces, internal to
// row_dot_x86_x4.cpp (Q4_K and Q5_K in q4_k_x4 and q5_k_x4),
// row_dot_x86_q6_k_x4.cpp (Q6_K in q6_k_x4), row_dot_x86_q4_k_x4_256.cpp and
// row_dot_x86_q6_k_x4_256.cpp (the same at avx2) and row_dot_x86_q8_0_x4.cpp
// (Q8_0 in q8_0_x4), as
// row_dot_x86_tile.h: the VNNI dot (AVX-512), the prefetch distance and
// the driver that walks a call's rows as far-apart streams of groups
// through a kernel's tile<G, T>.
#pragma once

#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
namespace {

#if defined(__AVX512F__)

// Four u8 x s8 products summed into each int32 lane: vpdpbusd, or without
// VNNI vpmaddubsw + vpmaddwd.
#if defined(__AVX512VNNI__)
constexpr bool kVnni = true;
inline __m512i dot4(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }
#else
constexpr bool kVnni = false;
inline __m512i dot4(__m512i acc, __m512i u, __m512i s) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
#endif

inline __m512i broadcast16(const uint8_t* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Steps kFrom..kTo-1 of the k-quant x4 tiles (q4_k_x4, q5_k_x4, q6_k_x4:
// weight_layout.h) against the Q8_K blocks at aoff of T tokens' permuted
// activations: each token's 32 bytes of a step broadcast to every 128-bit
// lane, each group's step decoded by decode(g, s, lo, hi) (the low and high
// nibbles' values as unsigned bytes, one 128-bit lane per row) and dotted
// into D[g][t][0] and [1], step s into chain s % kS; D starts at zero.
template <int kFrom, int kTo, int G, int T, int kS, class Decode>
__attribute__((always_inline)) inline void k_quant_x4_steps(const uint8_t* const (&act)[T], size_t aoff,
                                                             __m512i (&D)[G][T][2][kS], Decode&& decode) {
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 2
      for (int i = 0; i < kS; ++i) D[g][t][0][i] = D[g][t][1][i] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = kFrom; s < kTo; ++s) {
    __m512i x0[T], x1[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const uint8_t* q = act[t] + aoff + offsetof(BlockQ8_K, qs) + 32 * s;
      x0[t] = broadcast16(q);
      x1[t] = broadcast16(q + 16);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512i lo, hi;
      decode(g, s, lo, hi);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        D[g][t][0][s % kS] = dot4(D[g][t][0][s % kS], lo, x0[t]);
        D[g][t][1][s % kS] = dot4(D[g][t][1][s % kS], hi, x1[t]);
      }
    }
  }
}
#else
// One 128-bit row of activations in both lanes (the avx2 x4 tiles).
inline __m256i broadcast16(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The bits of each byte of v from `bit` on moved to bit 4, then kept by
// `keep` (q5_k_x4's fifth bits: 0x10; q6_k_x4's top two: 0x30): per word,
// a bit of a byte moved to bit 4 stays within its byte (bit: a constant
// once the steps' loop is unrolled).
inline __m256i bits_to_4(__m256i v, int bit, char keep) {
  const __m256i moved = bit < 4 ? _mm256_slli_epi16(v, 4 - bit) : _mm256_srli_epi16(v, bit - 4);
  return _mm256_and_si256(moved, _mm256_set1_epi8(keep));
}
#endif

// The two layouts' kernels: tile<G, T> takes G groups (4 rows each, group g's
// weights at grp[g], its 4 outputs of token t at yg[g] + t * y_row_stride) x
// T tokens. K::kPairTokens: the tokens a pair of
// groups takes at a time (2, or 3 where pairs of groups take every token
// count; x4_groups). For one or two tokens (and for any number where
// K::kPairTokens is 3), x4_rows sets (where K::kTwoStreams) two groups side
// by side, from the two halves of the row range (far-apart streams). On a
// Zen 4 EPYC four streams (the quarters) had kept DRAM busier than two
// (Q8_0, DeepSeek-V3 batch 1: 81-88% of the read against 77-84%);
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

// What the x4 driver asks of the k-quant x4 tiles (q4_k_x4, q5_k_x4,
// q6_k_x4): two far-apart streams for one or two tokens, 2 groups x 3
// tokens for more, super-blocks of 256 values, and the prefetch distance
// for passes of n tokens (one token: kOneTokenAhead; two and eight tokens
// lost 6-11% at 1 KiB and keep 2).
struct KQuantX4Driving {
  static constexpr bool kTwoStreams = true;
  static constexpr int kPairTokens = 3;
  static constexpr int64_t kBlockElems = kQK_K;
  static constexpr size_t ahead(int64_t n) { return n == 1 ? kOneTokenAhead : kPrefetch; }
};
// The avx2 k-quant x4 tiles take one group at a time for every token
// count: with two side by side (two streams for one or two tokens) their
// sums spill from the 16 registers. One thread on a Zen 3, Q4_K,
// alternated: 19.2-19.5 -> 21.3-22.4 GB/s from L2, 12.2-12.6 -> 13.3-15.7
// from DRAM.
struct KQuantX4Avx2Driving : KQuantX4Driving {
  static constexpr bool kTwoStreams = false;
};

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
  bool ask = true;    // the tiles' requests ahead in the stream (asks_for_stream)
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

// G groups' weights (grp) and their outputs for the call's token 0 (yrow).
template <int G>
struct X4Groups {
  const uint8_t* grp[G];
  float* yrow[G];
};

template <class K, int G, int T>
void x4_tokens(const RowDotParams& p, const X4Groups<G>& at, int64_t t, const StreamsAhead<G>& ah) {
  const uint8_t* act[T];
#pragma GCC unroll 4
  for (int j = 0; j < T; ++j) act[j] = activation_row(p, t + j);
  float* yg[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) yg[g] = at.yrow[g] + size_t(t) * p.y_row_stride;
  K::template tile<G, T>(at.grp, act, p.cols / K::kBlockElems, yg, p.y_row_stride, ah);
}

// Groups side by side against all tokens: two for one or two tokens
// (far-apart streams, and enough sums in flight), and for more where the
// kernel takes them 3 at a time (K::kPairTokens), else one group and up to
// four tokens at a time.
//
// Q8_0X4 and Q4KX4 (the avx512 levels', and the amx level's Q4_K) take 2
// groups x 3 tokens; the amx level's Q8_0X4Blocks keeps 1 x 4. Each token's
// block (q8_0_x4: its broadcast, the vpdpbusd of its -128 bias, its scale;
// q4_k_x4: its 16 broadcasts, bsums and scale) is then made once per 8
// rows, not per 4, with 12 sums in registers. The layer at 256 tokens on a
// Zen 5 EPYC (two threads, the binaries alternated), DeepSeek-V3 (8 tokens
// an expert) and Qwen3-30B-A3B (16): Q8_0 354-381 against 304-307 GFLOP/s
// and 383-404 against 338-343 (2 x 4, 16 sums, measured the same); Q4_K
// 674-705 against 511-587 and 677-820 against 516-651 (one round of five
// the other way). A token's floats are the same in any tile.
template <class K, int G>
void x4_groups(const RowDotParams& p, const X4Groups<G>& at, const StreamsAhead<G>& ah) {
  int64_t t = 0;
  if constexpr (G == 2) {
    static_assert(K::kPairTokens == 2 || K::kPairTokens == 3);
    if constexpr (K::kPairTokens == 3)
      for (; t + 3 <= p.n_tokens; t += 3) x4_tokens<K, 2, 3>(p, at, t, ah);
    for (; t + 2 <= p.n_tokens; t += 2) x4_tokens<K, 2, 2>(p, at, t, ah);
    if (t < p.n_tokens) x4_tokens<K, 2, 1>(p, at, t, ah);
  } else {
    for (; t + 4 <= p.n_tokens; t += 4) x4_tokens<K, 1, 4>(p, at, t, ah);
    switch (p.n_tokens - t) {
      case 3: x4_tokens<K, 1, 3>(p, at, t, ah); break;
      case 2: x4_tokens<K, 1, 2>(p, at, t, ah); break;
      case 1: x4_tokens<K, 1, 1>(p, at, t, ah); break;
      default: break;
    }
  }
}

// A stream's first `bytes`, asked for before its tiles start. Always
// inlined: GCC 12 may drop a call to a function whose only effect is a
// prefetch (row_dot_x86_x16z.cpp's fetch_next_spare).
[[gnu::always_inline]] inline void fetch_stream_start(const uint8_t* w, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(w + o), _MM_HINT_T0);
}

// G groups at a time, one from each of G equal parts of the range (far-apart
// streams, as the rowmajor tiles read four quarters), each part's start
// prefetched first; the groups left over go one at a time. Two neighbouring
// groups at a time instead (one stream) took 1.2-1.4x the time (Qwen3-30B-
// A3B's Q4_K downs at batches 1 and 2, stop 65).
template <class K, int G>
void x4_streams(const RowDotParams& p, int64_t groups) {
  const int64_t q = groups / G;
  for (int k = 0; k < G && q > 0; ++k)
    fetch_stream_start(p.w + size_t(p.row_begin + k * q * kX4Rows) * p.w_row_stride, K::ahead(p.n_tokens));
  // Each part's prefetches run on into the same part of the caller's next
  // rows, when the parts are the whole range.
  StreamsAhead<G> ah = StreamsAhead<G>::none();
  ah.ask = asks_for_stream(p, 1);  // the x4 tiles ask from 2 tokens (row_dot.h)
  if (p.then_rows && G * q == groups)
    for (int k = 0; k < G; ++k) {
      const size_t at = size_t(k * q * kX4Rows) * p.w_row_stride, len = size_t(q * kX4Rows) * p.w_row_stride;
      ah.end[k] = uintptr_t(p.w + size_t(p.row_begin) * p.w_row_stride + at + len);
      ah.jump[k] = uintptr_t(p.then_rows + at) - ah.end[k];
    }
  for (int64_t j = 0; j < q; ++j) {
    X4Groups<G> at;
#pragma GCC unroll 4
    for (int k = 0; k < G; ++k) {
      const int64_t r = p.row_begin + (k * q + j) * kX4Rows;
      at.grp[k] = p.w + size_t(r) * p.w_row_stride;
      at.yrow[k] = p.y + r;
    }
    x4_groups<K, G>(p, at, ah);
  }
  for (int64_t j = G * q; j < groups; ++j) {
    const int64_t r = p.row_begin + j * kX4Rows;
    const X4Groups<1> at{{p.w + size_t(r) * p.w_row_stride}, {p.y + r}};
    StreamsAhead<1> one = StreamsAhead<1>::none();
    one.ask = ah.ask;
    x4_groups<K, 1>(p, at, one);
  }
}

// A call with a pair (RowDotParams::pair_w, the MoE's up projection beside
// its gate) where the kernel takes two groups side by side: group j of both
// matrices at a time, two streams the whole range long, instead of the two
// halves of one matrix and then of the other: half as many streams, each
// twice as long, with no start between the two. Qwen3-30B-A3B's Q4_K layer
// (768 gate and up rows a task) on a Zen 4 EPYC, two threads, the two
// alternated by repetition in one process, both orders (stop 65), at reads
// of 49-61 GB/s: batch 1 0.94-0.95 of the time (88.7 -> 90.3% and 85.8 ->
// 90.3% of the read), batch 2 0.93-0.97; with Q6_K downs (Q4_K_M's layers)
// batches 1-4 0.96-0.99. Below 40 GB/s, at 32 and 256 tokens and for
// DeepSeek-V3 (4 MiB tasks of 260 rows) within the noise.
template <class K>
void x4_pair(const RowDotParams& p, int64_t groups) {
  const uint8_t* start[2] = {p.w + size_t(p.row_begin) * p.w_row_stride,
                             p.pair_w + size_t(p.row_begin) * p.w_row_stride};
  for (const uint8_t* w : start) fetch_stream_start(w, K::ahead(p.n_tokens));
  StreamsAhead<2> ah = StreamsAhead<2>::none();
  ah.ask = asks_for_stream(p, 1);
  for (int64_t j = 0; j < groups; ++j) {
    const size_t rows = size_t(j * kX4Rows), r = size_t(p.row_begin) + rows;
    const X4Groups<2> at{{start[0] + rows * p.w_row_stride, start[1] + rows * p.w_row_stride},
                         {p.y + r, p.pair_y + r}};
    x4_groups<K, 2>(p, at, ah);
  }
}

// Two streams for one or two tokens (where the kernel takes them:
// K::kTwoStreams) and for any number where it takes tokens 3 at a time
// (K::kPairTokens), else one for more. A pair goes side by side where the
// kernel takes two streams, else one matrix after the other.
template <class K>
void x4_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kX4Rows;
  if constexpr (K::kTwoStreams) {
    if (p.n_tokens <= 2 || K::kPairTokens == 3) return p.pair_w ? x4_pair<K>(p, groups) : x4_streams<K, 2>(p, groups);
  }
  if (p.pair_w) return rows_then_pair(x4_rows<K>, p);
  x4_streams<K, 1>(p, groups);
}

}  // namespace
}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
