// BF16 weights stored as bf16_x16 (weight_layout.h): one 64-byte load holds
// one column pair of 16 rows, so vdpbf16ps against a broadcast activation
// pair adds 16 rows' products at once and no dot needs a horizontal sum.
//
// One token (decode) keeps ggml_vec_dot_bf16's order, the rowmajor kernel's
// bit for bit: there, lane k of a row's first accumulator adds pair k of
// every 64 values and lane k of the second pair 16 + k; here those are lane r
// of 32 accumulator vectors, one per pair position, and _mm512_reduce_add_ps's
// tree becomes vertical adds of those vectors. A group at a time, its
// bytes in order (decode_group).
//
// Several tokens (prefill) take an outer product: 48 rows (three groups) by up
// to 9 tokens in 27 accumulators, three weight loads and 9 broadcasts per 27
// vdpbf16ps, over the rows' whole width (the rowmajor tiles need a weight and
// an activation load per 2 instructions and a reduction per dot: one thread
// with hot weights, 180-265 GFLOP/s against 330-360 here with two groups, of a
// peak of about 450). Three groups rather than two: 3-4% more with hot weights,
// and 6-8% (8 tokens) to 12-16% (16 tokens) more weight bytes per second from
// DRAM, compared in one process (two threads, alternating). The first token
// group prefetches one line per group per pair position rather than bursts per
// block or step. Tokens that take several passes go in steps of 1024 columns
// (256 until stop 23: with 8 tokens then 1.26x from DRAM and 1.3x hot); one
// pass, one step (since stop 41, outer_rows). Up to 9 tokens rather than 8 (31
// of the 32 registers): 9 tokens in one pass instead of 8 + 1, 1.3x with hot
// weights (DeepSeek-V3 at 256 tokens routes 9 to an eighth of its experts). 10
// to 14 tokens take two groups in one pass (wide_rows); 15 or more, passes of 9
// and the rest. Passes of 1 to 4 tokens split each sum over 2 or 4 chains (too
// few independent sums otherwise hide vdpbf16ps's latency): with hot weights
// 1.24x at 3 tokens, and 1.13x at 10 and 11 when those took passes of 9 + 1 and
// 9 + 2 (before stop 41); the layer at 256 tokens 1.02x at both expert shapes.
// Each lane sums its row's pairs in order (or in 2 or 4 interleaved chains),
// tested against the reference within bounds.
#include <algorithm>
#include <utility>

#include "kernels/cpu/row_dot_x86_tile.h"
#include "kernels/cpu/row_dot_x86_x16.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__)
namespace {

constexpr size_t kGroupBlock = kBf16X16GroupBlock;  // 32 columns of 16 rows
constexpr int64_t kColsPerBlock = int64_t(kGroupBlock / (2 * kX16Rows));  // 32

using x16::pair_of;
using x16::reduce16_lanes;
using x16::store_vec_dot;
using x16::TileAhead;
using x16::TileGroups;

inline __m512bh weights_at(const uint8_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// One run of 64 columns of a group (2 KiB, 32 pair positions of 16 rows)
// into the 32 sums, each pair broadcast from the activations in memory.
template <int... K>
inline void decode_run(const uint8_t* w, const uint8_t* a, __m512 (&s)[32], std::integer_sequence<int, K...>) {
  ((s[K] = _mm512_dpbf16_ps(s[K], weights_at(w + 64 * K), pair_of(a, K))), ...);
}

// One token, one group (16 rows from row0): run after run, all 32 pair
// positions, so the group's bytes are read in order. The 32 sums and a
// weight need 33 registers; the compiler keeps three sums on the stack (a
// load and a store each per 2 KiB, in L1). Until stop 42, two passes per
// 4096 columns kept 16 sums each in registers, pair positions 0-15 (the
// even KiB of each run, from DRAM) then 16-31 (the odd ones, which the
// first pass's hardware prefetches had brought into L2); that read pattern
// alone, without arithmetic, gets 0.78-0.86 of a plain read (one thread, a
// Zen 5 EPYC). Alternated by repetition in one process (tandem-bench-moe,
// batch 1, two threads): reads above 70 GB/s DeepSeek-V3 0.912 -> 0.962 of
// the read, Qwen3-30B-A3B 0.861 -> 0.965; below 55 0.940 -> 0.993 and 0.908
// -> 0.966; one thread 0.909 -> 0.952 and 0.874 -> 0.927. A prefetcht0 1 or
// 3 KiB ahead on top lost 9% (docs/cpu-kernels.md, stop 42). Each sum still
// adds its runs in order: ggml's floats.
void decode_group(const RowDotParams& p, int64_t row0, const uint8_t* a) {
  const uint8_t* w = p.w + size_t(row0) * p.w_row_stride;
  __m512 s[32];
#pragma GCC unroll 32
  for (int k = 0; k < 32; ++k) s[k] = _mm512_setzero_ps();
  const int64_t runs = p.cols / 64;
  for (int64_t run = 0; run < runs; ++run)
    decode_run(w + size_t(run) * 2 * kGroupBlock, a + 128 * size_t(run), s, std::make_integer_sequence<int, 32>{});
  store_vec_dot(p.y + row0, reduce16_lanes(s), reduce16_lanes(s + 16));
}

// One token over the range, a group at a time: one sequential stream.
void decode_rows(const RowDotParams& p) {
  const uint8_t* a = activation_row(p, 0);
  for (int64_t r = p.row_begin; r < p.row_end; r += kX16Rows) decode_group(p, r, a);
}

// ---- several tokens ------------------------------------------------------------
constexpr int64_t kBlocksPerStep = 32;  // 1024 columns per step
constexpr int kMaxTokens = 9;

// What a token group's loop prefetches (outer_tile). The first token group
// reads the weights from DRAM and asks for each group's line kStreamAhead
// bytes on with prefetcht0, so the requests go out ahead of the arithmetic.
// The second token group (experts with more than kMaxTokens tokens) finds
// the step's weights in L2 and asks for the next step's lines (its whole
// 32 KiB a group, prefetcht2), so DRAM keeps streaming while it computes and
// the next step's first group starts warm; before stop 39 DRAM idled through
// it (DeepSeek-V3 at 256 tokens 0.68-0.69 -> 0.70-0.73 of the read,
// Qwen3-30B-A3B 0.43-0.46 -> 0.49-0.53). Later groups ask for nothing.
//
// The first group's kind of prefetch moved with the machines: into L1 2 KiB
// ahead until stop 33 (slower than none on a Zen 4 EPYC), prefetcht2 8 KiB
// ahead until stop 39 and 4 KiB until stop 41, and prefetcht0 3 KiB ahead
// since. On a Zen 5 EPYC with the hint a compile-time choice (a branch per line
// before) and the activations read in place (below), one thread over a 1 GiB
// matrix (tasks of 288 rows, 8 tokens, weight bytes per second over a plain
// read's): prefetcht2 4 KiB 0.81, 2 KiB 0.85, 3 KiB 0.87; prefetcht0 2 KiB
// 0.87, 3 KiB 0.91, 6 KiB 0.83; none 0.69-0.72 (9 tokens: prefetcht2 4 KiB
// 0.84, 3 KiB 0.89; prefetcht0 2 KiB 0.87, 3 KiB 0.93). The layer at 256
// tokens, two threads, alternated by repetition at reads above 70 GB/s:
// DeepSeek-V3 0.748-0.763 (stop 40's kernel) -> 0.810-0.824 with prefetcht0 3
// KiB, 0.791-0.821 at 2.5 KiB, 0.792 at 4 KiB, 0.806 with prefetcht1 3 KiB;
// Qwen3-30B-A3B 0.491-0.511 -> 0.536-0.552; at 32 tokens 0.807 -> 0.891.
constexpr size_t kStreamAhead = 3072;
// A step's bytes per group: where the next step starts.
constexpr size_t kStepBytes = size_t(kBlocksPerStep) * kGroupBlock;

// G groups by NT tokens over blocks [b0, b1): y[t] += (or = when first) the
// partial dots, prefetching as A says. Not kept: the second group's
// prefetches split between the first and second groups (Qwen3 +3%,
// DeepSeek-V3 -4%); groups of balanced sizes (10 tokens as 5 + 5, not
// 9 + 1: 2-4% less from DRAM, though 1.1x from L3).
template <int G, int NT, TileAhead A>
void outer_tile(const TileGroups& tg, int64_t b0, int64_t b1, const uint8_t* const* a, float* const* y, bool first) {
  // Chains per accumulator: a few tokens give too few independent sums to
  // hide vdpbf16ps's latency (3 groups x 1 token: 3 chains), so pair
  // positions k alternate between C partial sums, added at the end.
  constexpr int C = NT == 1 ? 4 : NT <= 4 ? 2 : 1;
  __m512 acc[C][NT][G];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) {
      acc[0][t][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y[t] + tg.y_group * g);
#pragma GCC unroll 4
      for (int c = 1; c < C; ++c) acc[c][t][g] = _mm512_setzero_ps();
    }
  // The broadcasts read each token's pairs where they are: a token pointer
  // a register, one index for all. Copying the step's pairs side by side
  // first (until stop 41, so one base register served every broadcast)
  // cost 4-5% from DRAM (one thread, 8 tokens: 0.78 -> 0.81-0.82 of a plain
  // read without the copy; with the tokens' pairs in L1 instead of L2, no
  // better).
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
        if constexpr (A == TileAhead::kStream)
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g)
            _mm_prefetch(reinterpret_cast<const char*>(wb + tg.group_bytes * size_t(g) + kStreamAhead + 64 * size_t(k)),
                         _MM_HINT_T0);
        if constexpr (A == TileAhead::kNextStep)
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g)
            _mm_prefetch(reinterpret_cast<const char*>(wb + tg.group_bytes * size_t(g) + kStepBytes + 64 * size_t(k)),
                         _MM_HINT_T2);
#pragma GCC unroll 16
        for (int t = 0; t < NT; ++t) {
          const __m512bh x = pair_of(a[t], 16 * b + k);
#pragma GCC unroll 3
          for (int g = 0; g < G; ++g) acc[c][t][g] = _mm512_dpbf16_ps(acc[c][t][g], wv[g], x);
        }
      }
    }
  }
#pragma GCC unroll 16
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

// One step: G groups (the first at row r0, the others gstep groups apart),
// blocks [b0, b1).
struct Step {
  int64_t r0, b0, b1, gstep;
};

template <int G, int NT>
void outer_tokens(const RowDotParams& p, const Step& st, int64_t t0) {
  const uint8_t* a[NT];
  float* y[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    a[t] = activation_row(p, t0 + t);
    y[t] = p.y + size_t(t0 + t) * p.y_row_stride + size_t(st.r0);
  }
  const TileGroups tg{p.w + size_t(st.r0) * p.w_row_stride, kX16Rows * p.w_row_stride * size_t(st.gstep),
                      size_t(kX16Rows * st.gstep)};
  const bool first = st.b0 == 0;
  if (t0 == 0)
    outer_tile<G, NT, TileAhead::kStream>(tg, st.b0, st.b1, a, y, first);
  else if (t0 == kMaxTokens)
    outer_tile<G, NT, TileAhead::kNextStep>(tg, st.b0, st.b1, a, y, first);
  else
    outer_tile<G, NT, TileAhead::kNone>(tg, st.b0, st.b1, a, y, first);
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

// One pass (up to kMaxTokens tokens) takes the rows' whole width as one
// step; several passes take steps of kBlocksPerStep, so the later passes
// find the step's weights in L2. Steps of 1024 columns in one pass too
// (until stop 41) cost 5-6% from DRAM, one thread over a 1 GiB matrix of
// 7168 columns: of a plain read 0.87 -> 0.91 (6 tokens), 0.90 -> 0.95 (8),
// 0.90 -> 0.96 (9); the layer at 256 tokens, two threads alternated by
// repetition at reads above 70 GB/s, DeepSeek-V3 0.796 -> 0.830.
template <int G>
void outer_rows(const RowDotParams& p, int64_t r0, int64_t gstep) {
  const int64_t nb = p.cols / kColsPerBlock, step = p.n_tokens <= kMaxTokens ? nb : kBlocksPerStep;
  for (int64_t b = 0; b < nb; b += step) outer_step<G>(p, Step{r0, b, std::min(nb, b + step), gstep});
}

// 10 to 14 tokens: two groups (halves of the range, as the thirds below) by all
// the tokens in one pass (28 accumulators at 14) over the rows' whole width,
// where 9 + 1 to 9 + 5 took a second pass over each step from L2 with a few
// tokens. One thread over a 1 GiB matrix, of a plain read: 10 tokens 0.80 ->
// 0.82, 11 0.71 -> 0.80, 12 0.75 -> 0.78, 13 0.71 -> 0.75, 14 0.62 -> 0.73; the
// layer at 256 tokens, one thread, alternated by repetition: DeepSeek-V3 0.823
// -> 0.835, Qwen3-30B-A3B 0.544 -> 0.559. With 15 or more, 9 + the rest stays:
// three groups share each broadcast three ways.
constexpr int64_t kWideMaxTokens = 14;

template <int G>
void wide_rows(const RowDotParams& p, int64_t r0, int64_t gstep) {
  const Step st{r0, 0, p.cols / kColsPerBlock, gstep};  // one pass, one step (outer_rows)
  switch (p.n_tokens) {
    case 10: outer_tokens<G, 10>(p, st, 0); break;
    case 11: outer_tokens<G, 11>(p, st, 0); break;
    case 12: outer_tokens<G, 12>(p, st, 0); break;
    case 13: outer_tokens<G, 13>(p, st, 0); break;
    case 14: outer_tokens<G, 14>(p, st, 0); break;
    default: break;
  }
}

// Tiles of three groups taken from the three thirds of the range (group j
// with j + q and j + 2q), then the one or two groups left over. Streams far
// apart read faster than neighbours (a 2048-column down projection's groups
// are 64 KiB apart), and each group's prefetches run past its end into the
// next tile's group, so no tile starts cold.
void prefill_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kX16Rows, q = groups / kX16TileGroups;
  if (p.n_tokens > kMaxTokens && p.n_tokens <= kWideMaxTokens) {
    const int64_t h = groups / 2;
    for (int64_t j = 0; j < h; ++j) wide_rows<2>(p, p.row_begin + j * kX16Rows, h);
    if (groups % 2) wide_rows<1>(p, p.row_begin + 2 * h * kX16Rows, 1);
    return;
  }
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
