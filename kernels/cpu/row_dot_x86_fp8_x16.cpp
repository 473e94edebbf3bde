// FP8 E4M3 weights stored as fp8_x16 (weight_layout.h) at the avx512bf16
// level: the byte tables widen one 64-byte chunk into two vectors of 16
// rows' column pairs (fp8_tables.h's Fp8Widener, exact for every byte:
// zeros, subnormals and NaN too), and vdpbf16ps against a broadcast
// activation pair adds 16 rows' products at once: an outer product, so a
// prefill widens each chunk once for all the tokens in registers and
// loads a 4-byte broadcast per token and pair, where the rowmajor loop
// (row_dot_x86_fp8_loop.cpp) loads 8 activation vectors per 16 vdpbf16ps
// and is bound by those loads (docs/cpu-kernels.md, stop 48).
//
// Every (row, token) sums the same way in any tile, batch or call: per scale
// block, one f32 lane adds the chunks' pairs (4j, 4j + 1) then (4j + 2,
// 4j + 3) for j = 0..31 in order; the block's sum times its scale is the
// output for block 0 and fused into it (one fma) for the next ones. So a
// token gets the same floats alone or with others, tested against the
// reference within FP8's bound.
#include <algorithm>

#include "kernels/cpu/fp8_tables.h"
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
namespace {

constexpr size_t kBlock = kFp8X16GroupBlock;  // 16 rows x 128 columns
constexpr int kChunks = int(kBlock / 64);     // 32 per block
// How far ahead each group's stream asks for its lines (prefetcht0, a line
// per chunk): tiles of several tokens as bf16_x16's first token group; one
// or two tokens (four streams) nearer. Stop 57, the layer alternated by
// repetition in one process, 2048 against 3072 bytes for one or two tokens:
// one thread (`taskset -c 0`, batch 1, four runs) DeepSeek-V3 3.9-5.3% and
// Qwen3-30B-A3B 3.8-8.3% faster (1536: within 1%; 2560: 3.4-4.7%; 4096 and
// 6144: 3-10% slower), at batch 2 4.2% and 6.8%. The tiles of three or more
// tokens keep 3072: at 2048 they ran 256 tokens 6-7% slower.
constexpr size_t kAhead = 3072;
constexpr size_t kFewTokensAhead = 2048;

inline __m512bh pair_at(const uint8_t* a, int64_t k) {
  return (__m512bh)_mm512_set1_epi32(load_unaligned<int32_t>(a + 4 * k));
}

// G groups (group_bytes apart, starting at w; outputs y_group floats apart)
// by NT tokens over blocks [b0, b1): y[t] = (b == 0) or += (later blocks)
// the blocks' sums times their scales (s[g][b]).
struct Tile {
  const uint8_t* w;
  size_t group_bytes, y_group;
  const float* const* s;  // per group: its scale row
  size_t ahead;           // how far ahead the streaming tile prefetches
};

template <int G, int NT, bool kPrefetch>
void x16_tile(const Tile& tl, int64_t b0, int64_t b1, const uint8_t* const* a, float* const* y) {
  const Fp8Widener wd;
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[NT][G];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[t][g] = _mm512_setzero_ps();
    const uint8_t* wb = tl.w + kBlock * size_t(b);
#pragma GCC unroll 2
    for (int j = 0; j < kChunks; ++j) {
      __m512i lo[G], hi[G];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const uint8_t* c = wb + tl.group_bytes * size_t(g) + 64 * size_t(j);
        if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(c + tl.ahead), _MM_HINT_T0);
        wd.widen(_mm512_loadu_si512(c), lo[g], hi[g]);
      }
      const int64_t k = 64 * b + 2 * j;  // the pair (4j, 4j + 1) of block b
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m512bh x0 = pair_at(a[t], k), x1 = pair_at(a[t], k + 1);
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          acc[t][g] = _mm512_dpbf16_ps(acc[t][g], (__m512bh)lo[g], x0);
          acc[t][g] = _mm512_dpbf16_ps(acc[t][g], (__m512bh)hi[g], x1);
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 sc = _mm512_set1_ps(tl.s[g][b]);
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        float* yo = y[t] + tl.y_group * size_t(g);
        const __m512 v = b == 0 ? _mm512_mul_ps(acc[t][g], sc) : _mm512_fmadd_ps(acc[t][g], sc, _mm512_loadu_ps(yo));
        _mm512_storeu_ps(yo, v);
      }
    }
  }
}

// Tokens per pass of a tile of G groups: one or two groups take up to 9
// (18 sums, two widened chunks and the byte tables fill the registers);
// four groups (decode: four chains hide vdpbf16ps's latency, each chunk's
// two products depending on each other) take one or two, as the two or
// three groups left over after them.
template <int G>
constexpr int kPassTokens = G <= 2 ? 9 : 2;

// G groups (the first at row r0, the others gstep groups apart) by NT
// tokens from t0, blocks [b0, b1).
template <int G, int NT>
void x16_tokens(const RowDotParams& p, int64_t r0, int64_t gstep, int64_t t0, int64_t b0, int64_t b1) {
  const uint8_t* a[NT];
  float* y[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    a[t] = activation_row(p, t0 + t);
    y[t] = p.y + size_t(t0 + t) * p.y_row_stride + size_t(r0);
  }
  const float* s[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
    s[g] = p.scales + size_t((r0 + kFp8X16Rows * gstep * g) / kFp8ScaleBlock) * p.scale_row_stride;
  const Tile tl{p.w + size_t(r0) * p.w_row_stride, kFp8X16Rows * p.w_row_stride * size_t(gstep),
                size_t(kFp8X16Rows * gstep), s,
                p.n_tokens <= kPassTokens<kFp8X16TileGroups> ? kFewTokensAhead : kAhead};
  if (t0 == 0 && asks_for_stream(p, kX16HardwareStreamTokens))  // the first pass streams the weights in
    x16_tile<G, NT, true>(tl, b0, b1, a, y);
  else
    x16_tile<G, NT, false>(tl, b0, b1, a, y);
}

constexpr int64_t kStepBlocks = 8;  // 1024 columns a step when tokens take several passes

// G groups from r0, all the tokens: one pass over the whole width, or
// passes over steps of kStepBlocks (the later passes find the step in L2).
template <int G>
void x16_groups(const RowDotParams& p, int64_t r0, int64_t gstep) {
  constexpr int kMax = kPassTokens<G>;
  const int64_t nb = p.cols / kFp8X16Cols, step = p.n_tokens <= kMax ? nb : kStepBlocks;
  for (int64_t b0 = 0; b0 < nb; b0 += step) {
    const int64_t b1 = std::min(nb, b0 + step);
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kMax)
      with_tokens<kMax>(std::min<int64_t>(kMax, p.n_tokens - t0),
                        [&]<int NT>() { x16_tokens<G, NT>(p, r0, gstep, t0, b0, b1); });
  }
}

}  // namespace

void fp8_x16_rows(const RowDotParams& p) {
  const int64_t groups = (p.row_end - p.row_begin) / kFp8X16Rows;
  // Three tokens or more: tiles of two groups from the range's halves, each
  // broadcast pair serving both. One group a tile ran 256 tokens at 0.67x
  // (tandem-bench-moe, both expert shapes: 388 and 431 GFLOP/s against 577
  // and 623), 32 tokens at 0.80x-0.98x.
  if (p.n_tokens > kPassTokens<kFp8X16TileGroups>) {
    const int64_t h = groups / 2;
    for (int64_t j = 0; j < h; ++j) x16_groups<2>(p, p.row_begin + j * kFp8X16Rows, h);
    if (groups % 2) x16_groups<1>(p, p.row_begin + 2 * h * kFp8X16Rows, 1);
    return;
  }
  // A token or two: tiles of four groups from the range's quarters (group j
  // with j + q, j + 2q and j + 3q), so each stream's prefetches run on into
  // the next tile's group, then the groups left over in one tile.
  static_assert(kFp8X16TileGroups == 4);
  const int64_t q = groups / 4, r0 = p.row_begin + 4 * q * kFp8X16Rows;
  for (int64_t j = 0; j < q; ++j) x16_groups<4>(p, p.row_begin + j * kFp8X16Rows, q);
  switch (groups % 4) {
    case 3: x16_groups<3>(p, r0, 1); break;
    case 2: x16_groups<2>(p, r0, 1); break;
    case 1: x16_groups<1>(p, r0, 1); break;
    default: break;
  }
}

#else
// No vdpbf16ps or vpermi2b at this level: the reference takes the layout.
void fp8_x16_rows(const RowDotParams& p) { generic::find(DType::kF8E4M3)(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
