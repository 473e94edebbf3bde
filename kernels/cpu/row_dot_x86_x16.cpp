// BF16 weights stored as bf16_x16 (weight_layout.h): one 64-byte load holds
// one column pair of 16 rows, so vdpbf16ps against a broadcast activation
// pair adds 16 rows' products at once and no dot needs a horizontal sum.
//
// One token (decode) keeps ggml_vec_dot_bf16's order, the rowmajor kernel's
// bit for bit: there, lane k of a row's first accumulator adds pair k of
// every 64 values and lane k of the second pair 16 + k; here those are lane r
// of 32 accumulator vectors, one per pair position, and _mm512_reduce_add_ps's
// tree becomes vertical adds of those vectors. A group at a time, 4096
// columns at a time, in two passes (decode_group): pair positions 0-15,
// then 16-31, so each pass's 16 sums stay in registers and the second pass
// finds its weights in L2.
//
// Several tokens (prefill) take an outer product: 48 rows (three groups) by
// up to 9 tokens in 27 accumulators, three weight loads and 9 broadcasts per
// 27 vdpbf16ps, over 1024 columns at a time (the rowmajor tiles need a
// weight and an activation load per 2 instructions and a reduction per dot:
// one thread with hot weights, 180-265 GFLOP/s against 330-360 here with two
// groups, of a peak of about 450). Three groups rather than two: 3-4% more
// with hot weights, and 6-8% (8 tokens) to 12-16% (16 tokens) more weight
// bytes per second from DRAM, compared in one process (two threads,
// alternating). The first token group prefetches one line per group per
// pair position rather than bursts per block or step, and steps are 1024
// columns rather than 256: with 8 tokens (two threads, weights from DRAM)
// 1.26x the weight bytes per second and 1.3x with them hot. Up to 9 tokens
// rather than 8 (31 of the 32 registers): 9 tokens in one pass instead of
// 8 + 1, 1.3x with hot weights (DeepSeek-V3 at 256 tokens routes 9 to an
// eighth of its experts). Passes of 1 to 4 tokens split each sum over 2 or
// 4 chains (too few independent sums otherwise hide vdpbf16ps's latency):
// with hot weights 1.13x at 10 and 11 tokens (9 + 1, 9 + 2) and 1.24x at
// 3; the layer at 256 tokens 1.02x at both expert shapes. Each lane sums
// its row's pairs in order (or in 2 or 4 interleaved chains), tested
// against the reference within bounds.
#include <algorithm>
#include <utility>

#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__)
namespace {

constexpr size_t kGroupBlock = kBf16X16GroupBlock;  // 32 columns of 16 rows
constexpr int64_t kColsPerBlock = int64_t(kGroupBlock / (2 * kX16Rows));  // 32

inline __m512bh pair_of(const uint8_t* a, int64_t k) {
  return (__m512bh)_mm512_set1_epi32(load_unaligned<int32_t>(a + 4 * k));
}
inline __m512bh weights_at(const uint8_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// _mm512_reduce_add_ps's tree over 16 vectors, lane by lane (f32_dot.h's
// reduce16): halves, quarters, then pairs.
inline __m512 reduce16_lanes(const __m512* v) {
  __m512 t8[8], t4[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) t8[i] = _mm512_add_ps(v[8 + i], v[i]);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) t4[i] = _mm512_add_ps(t8[4 + i], t8[i]);
  return _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
}

// float(double(c1) + double(c2)) per lane, as ggml adds the two reduced sums.
inline void store_vec_dot(float* y, __m512 c1, __m512 c2) {
  const __m512d lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(c1)),
                                   _mm512_cvtps_pd(_mm512_castps512_ps256(c2)));
  const __m512d hi = _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c1), 1))),
                                   _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c2), 1))));
  _mm256_storeu_ps(y, _mm512_cvtpd_ps(lo));
  _mm256_storeu_ps(y + 8, _mm512_cvtpd_ps(hi));
}

// Pair position K (0-15) of a half run's 16 activation pairs (one vector),
// broadcast from a register rather than loaded: every load takes a
// load-queue slot that the weights' DRAM stream could use.
template <int K>
inline __m512bh pair_in(__m512i xa) {
  const __m512i lane = _mm512_shuffle_i32x4(xa, xa, (K / 4) * 0x55);
  return (__m512bh)_mm512_shuffle_epi32(lane, (_MM_PERM_ENUM)((K % 4) * 0x55));
}

// Half H of one run of 64 columns: its group block (16 pair positions of
// 16 rows, 1 KiB) into the 16 sums of pair positions 16H..16H+15.
template <int H, int... K>
inline void decode_half_run(const uint8_t* w, const uint8_t* x, __m512 (&s)[16], std::integer_sequence<int, K...>) {
  const __m512i xa = _mm512_loadu_si512(x + 64 * H);
  ((s[K] = _mm512_dpbf16_ps(s[K], weights_at(w + 64 * K), pair_in<K>(xa))), ...);
}

// Half H of runs [run0, run1) of the group at w, its sums kept in registers.
template <int H>
void decode_half(const uint8_t* w, const uint8_t* a, int64_t run0, int64_t run1, __m512* sums) {
  __m512 s[16];
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) s[k] = sums[k];
  for (int64_t run = run0; run < run1; ++run)
    decode_half_run<H>(w + size_t(run) * 2 * kGroupBlock + size_t(H) * kGroupBlock, a + 128 * size_t(run), s,
                       std::make_integer_sequence<int, 16>{});
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) sums[k] = s[k];
}

// Runs per chunk of a group: 4096 columns, 128 KiB of weights, which the
// second half's pass finds in L2 on any AVX-512 machine.
constexpr int64_t kDecodeChunkRuns = 64;

// One token, one group (16 rows from row0), chunk by chunk: pair positions
// 0-15 over the chunk's runs (its even group blocks, read from DRAM), then
// 16-31 (the odd ones, which the first pass's hardware prefetches brought
// into L2). Each pass's 16 sums stay in registers; each sum still adds its
// runs in order, so the floats are ggml's. Before, three groups from the
// range's thirds went side by side through every pair position, their 96
// sums in memory (a load and a store per vdpbf16ps): on an AMD EPYC that
// reads 84 GB/s with two threads when its neighbours are quiet, that layer
// (tandem-bench-moe, DeepSeek-V3, batch 1) reached 0.54-0.68 of the read,
// and one thread over a 132 MB matrix 23-27 GB/s where a read gives 40-44.
// Alternated by repetition in one process: this 0.955 of the read against
// 0.851 (two threads, both expert shapes, reads below 55 GB/s) and 0.876
// against 0.673 (reads above 70); software prefetches added nothing
// (docs/cpu-kernels.md, stop 38).
void decode_group(const RowDotParams& p, int64_t row0, const uint8_t* a) {
  const uint8_t* w = p.w + size_t(row0) * p.w_row_stride;
  __m512 acc[32];
#pragma GCC unroll 32
  for (int k = 0; k < 32; ++k) acc[k] = _mm512_setzero_ps();
  const int64_t runs = p.cols / 64;
  for (int64_t r0 = 0; r0 < runs; r0 += kDecodeChunkRuns) {
    const int64_t r1 = std::min(runs, r0 + kDecodeChunkRuns);
    decode_half<0>(w, a, r0, r1, acc);
    decode_half<1>(w, a, r0, r1, acc + 16);
  }
  store_vec_dot(p.y + row0, reduce16_lanes(acc), reduce16_lanes(acc + 16));
}

// One token over the range, a group at a time: one sequential stream.
void decode_rows(const RowDotParams& p) {
  const uint8_t* a = activation_row(p, 0);
  for (int64_t r = p.row_begin; r < p.row_end; r += kX16Rows) decode_group(p, r, a);
}

// ---- several tokens ------------------------------------------------------------
constexpr int64_t kBlocksPerStep = 32;  // 1024 columns per step
constexpr int kMaxTokens = 9;

// A tile's G groups start at w, group_bytes apart in the weights and
// y_group floats apart in the outputs (far-apart groups: see prefill_rows).
struct TileGroups {
  const uint8_t* w;
  size_t group_bytes, y_group;
};

// How far ahead the first token group's prefetches ask, and where to: 4 KiB
// ahead, with prefetcht2 (outer levels, not L1). The DRAM stream then runs
// ahead of the arithmetic instead of in step with it; prefetches into L1
// (2 KiB ahead, until stop 33) made the layer slower than none at all. At
// 256 tokens, one process, variants alternating by repetition (an AMD EPYC,
// 2 threads), medians of the layer's GFLOP/s over 8-12 repetitions each:
// DeepSeek-V3 204-232 into L1, 224-258 without, 235-286 with prefetcht1
// (4 to 32 KiB ahead alike), 267-268 with prefetcht2; Qwen3-30B-A3B 240-280,
// 275-292, 302-319 and 303-314 (docs/cpu-kernels.md). 8 KiB until stop 39,
// when on a Zen 5 EPYC (reads of 78-85 GB/s) 4 KiB gave more (with the
// second pass's prefetches below, DeepSeek-V3 0.733 of the read against
// 0.701; 2 KiB and 16 KiB less).
constexpr size_t kPrefillAhead = 4096;
// A step's bytes per group: where the next step starts.
constexpr size_t kStepBytes = size_t(kBlocksPerStep) * kGroupBlock;

// G groups by NT tokens over blocks [b0, b1): y[t] += (or = when first) the
// partial dots, each group's line `ahead` bytes on prefetched per pair
// position (0: none). The first token group reads the weights from DRAM and
// prefetches kPrefillAhead ahead, so the requests go out ahead of the
// arithmetic; later token groups find the step's weights in L1 or L2. The
// second token group prefetches kStepBytes ahead: the next step's lines
// (its whole 32 KiB a group), so DRAM keeps streaming while that group
// computes from cache and the next step's first group starts warm
// (prefill_ahead). Before (stop 39), DRAM
// idled through every later token group: at 256 tokens, on a Zen 5 EPYC,
// alternating by repetition in one process, the layer's weight bytes per
// second over the read's went 0.43-0.46 -> 0.49-0.53 (Qwen3-30B-A3B, 16
// tokens an expert, reads above 70 GB/s), 0.65 -> 0.69-0.71 (reads below
// 55) and 0.68-0.69 -> 0.70-0.73 (DeepSeek-V3, 8 an expert, whose experts
// with more than 9 tokens take a second group). Not kept: the same
// prefetches split between the first and second groups (Qwen3 +3%,
// DeepSeek-V3 -4%); groups of balanced sizes (10 tokens as 5 + 5, not
// 9 + 1: 2-4% less from DRAM, though 1.1x from L3).
template <int G, int NT>
void outer_tile(const TileGroups& tg, int64_t b0, int64_t b1, const uint8_t* const* a, float* const* y, bool first,
                size_t ahead) {
  // Chains per accumulator: a few tokens give too few independent sums to
  // hide vdpbf16ps's latency (3 groups x 1 token: 3 chains), so pair
  // positions k alternate between C partial sums, added at the end.
  constexpr int C = NT == 1 ? 4 : NT <= 4 ? 2 : 1;
  __m512 acc[C][NT][G];
#pragma GCC unroll 9
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      acc[0][t][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y[t] + tg.y_group * g);
#pragma GCC unroll 4
      for (int c = 1; c < C; ++c) acc[c][t][g] = _mm512_setzero_ps();
    }
  // The tokens' pairs of these blocks, side by side: one base register
  // serves every broadcast (9 token pointers would spill). Unrolled, so it
  // is not made a call to memcpy.
  alignas(64) uint8_t xb[NT][kBlocksPerStep * 64];
  const int64_t n = b1 - b0;
#pragma GCC unroll 9
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
    for (int64_t i = 0; i < kBlocksPerStep; ++i)
      if (i < n) _mm512_store_si512(xb[t] + 64 * i, _mm512_loadu_si512(a[t] + 64 * size_t(b0 + i)));
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* wb = tg.w + kGroupBlock * size_t(b);
#pragma GCC unroll 2
    for (int k0 = 0; k0 < 16; k0 += C) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const int k = k0 + c;
        __m512bh wv[G];
#pragma GCC unroll 3
        for (int g = 0; g < G; ++g) wv[g] = weights_at(wb + tg.group_bytes * size_t(g) + 64 * size_t(k));
        if (ahead)
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g)
            _mm_prefetch(reinterpret_cast<const char*>(wb + tg.group_bytes * size_t(g) + ahead + 64 * size_t(k)),
                         _MM_HINT_T2);
#pragma GCC unroll 9
        for (int t = 0; t < NT; ++t) {
          const __m512bh x = pair_of(xb[t], 16 * (b - b0) + k);
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g) acc[c][t][g] = _mm512_dpbf16_ps(acc[c][t][g], wv[g], x);
        }
      }
    }
  }
#pragma GCC unroll 9
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      __m512 v = acc[0][t][g];
      if constexpr (C == 2) v = _mm512_add_ps(v, acc[1][t][g]);
      if constexpr (C == 4)
        v = _mm512_add_ps(_mm512_add_ps(v, acc[1][t][g]), _mm512_add_ps(acc[2][t][g], acc[3][t][g]));
      _mm512_storeu_ps(y[t] + tg.y_group * g, v);
    }
}

// How far ahead the token group from token t0 prefetches (outer_tile).
constexpr size_t prefill_ahead(int64_t t0) {
  return t0 == 0 ? kPrefillAhead : t0 == kMaxTokens ? kStepBytes : 0;
}

// One step: G groups (the first at row r0, the others gstep groups apart),
// blocks [b0, b1).
struct Step {
  int64_t r0, b0, b1, gstep;
};

template <int G, int NT>
void outer_tokens(const RowDotParams& p, const Step& st, int64_t t0) {
  const uint8_t* a[NT];
  float* y[NT];
#pragma GCC unroll 9
  for (int t = 0; t < NT; ++t) {
    a[t] = activation_row(p, t0 + t);
    y[t] = p.y + size_t(t0 + t) * p.y_row_stride + size_t(st.r0);
  }
  const TileGroups tg{p.w + size_t(st.r0) * p.w_row_stride, kX16Rows * p.w_row_stride * size_t(st.gstep),
                      size_t(kX16Rows * st.gstep)};
  outer_tile<G, NT>(tg, st.b0, st.b1, a, y, st.b0 == 0, prefill_ahead(t0));
}

// All tokens over one step, 9 at a time.
template <int G>
void outer_step(const RowDotParams& p, const Step& st) {
  int64_t t = 0;
  for (; t + kMaxTokens <= p.n_tokens; t += kMaxTokens) outer_tokens<G, kMaxTokens>(p, st, t);
  switch (p.n_tokens - t) {
    case 8: outer_tokens<G, 8>(p, st, t); break;
    case 7: outer_tokens<G, 7>(p, st, t); break;
    case 6: outer_tokens<G, 6>(p, st, t); break;
    case 5: outer_tokens<G, 5>(p, st, t); break;
    case 4: outer_tokens<G, 4>(p, st, t); break;
    case 3: outer_tokens<G, 3>(p, st, t); break;
    case 2: outer_tokens<G, 2>(p, st, t); break;
    case 1: outer_tokens<G, 1>(p, st, t); break;
    default: break;
  }
}

template <int G>
void outer_rows(const RowDotParams& p, int64_t r0, int64_t gstep) {
  const int64_t nb = p.cols / kColsPerBlock;
  for (int64_t b = 0; b < nb; b += kBlocksPerStep)
    outer_step<G>(p, Step{r0, b, std::min(nb, b + kBlocksPerStep), gstep});
}

// Tiles of three groups taken from the three thirds of the range (group j
// with j + q and j + 2q), then the one or two groups left over. Streams far
// apart read faster than neighbours (a 2048-column down projection's groups
// are 64 KiB apart), and each group's prefetches run past its end into the
// next tile's group, so no tile starts cold.
void prefill_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kX16Rows, q = groups / kX16TileGroups;
  for (int64_t j = 0; j < q; ++j) outer_rows<kX16TileGroups>(p, p.row_begin + j * kX16Rows, q);
  const int64_t r0 = p.row_begin + kX16TileGroups * q * kX16Rows;
  if (groups % kX16TileGroups == 2)
    outer_rows<2>(p, r0, 1);
  else if (groups % kX16TileGroups == 1)
    outer_rows<1>(p, r0, 1);
}

}  // namespace

void bf16_x16_rows(const RowDotParams& p) {
  if (p.n_tokens == 1)
    decode_rows(p);
  else
    prefill_rows(p);
}

#else
// No vdpbf16ps at this level: the reference takes the layout.
void bf16_x16_rows(const RowDotParams& p) { generic::find(DType::kBF16)(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
