// BF16 weights stored as bf16_x16 (weight_layout.h): one 64-byte load holds
// one column pair of 16 rows, so vdpbf16ps against a broadcast activation
// pair adds 16 rows' products at once and no dot needs a horizontal sum.
//
// One token (decode) keeps ggml_vec_dot_bf16's order, the rowmajor kernel's
// bit for bit: there, lane k of a row's first accumulator adds pair k of
// every 64 values and lane k of the second pair 16 + k; here those are lane r
// of 32 accumulator vectors, one per pair position, and _mm512_reduce_add_ps's
// tree becomes vertical adds of those vectors.
//
// Several tokens (prefill) take an outer product: 48 rows (three groups) by
// up to 8 tokens in 24 accumulators, three weight loads and 8 broadcasts per
// 24 vdpbf16ps, over 256 columns at a time so the weights stay in L1 while
// every token group passes (the rowmajor tiles need a weight and an
// activation load per 2 instructions and a reduction per dot: one thread
// with hot weights, 180-265 GFLOP/s against 330-360 here with two groups, of
// a peak of about 450). Three groups rather than two: 3-4% more with hot
// weights, and 6-8% (8 tokens) to 12-16% (16 tokens) more weight bytes per
// second from DRAM, compared in one process (two threads, alternating). Each
// lane sums its row's pairs in order, tested against the reference within
// bounds.
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

// One token, G groups at once (starting at rows row0[g]): each run of 64
// columns is two group blocks, 32 pair positions, one accumulator each.
template <int G>
void decode_groups(const RowDotParams& p, const int64_t (&row0)[G], const uint8_t* a) {
  const uint8_t* w[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) w[g] = p.w + size_t(row0[g]) * p.w_row_stride;
  __m512 acc[G][32];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 32
    for (int k = 0; k < 32; ++k) acc[g][k] = _mm512_setzero_ps();
  const int64_t runs = p.cols / 64;
  for (int64_t run = 0; run < runs; ++run) {
    const size_t at = 2 * kGroupBlock * size_t(run);
#pragma GCC unroll 32
    for (int k = 0; k < 32; ++k) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) _mm_prefetch(reinterpret_cast<const char*>(w[g] + at + kPrefetch + 64 * size_t(k)), _MM_HINT_T0);
      const __m512bh x = pair_of(a, 32 * run + k);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[g][k] = _mm512_dpbf16_ps(acc[g][k], weights_at(w[g] + at + 64 * size_t(k)), x);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) store_vec_dot(p.y + row0[g], reduce16_lanes(acc[g]), reduce16_lanes(acc[g] + 16));
}

// One token over the range: two far-apart streams (the first and second
// half of the groups), then a group left over.
void decode_rows(const RowDotParams& p) {
  const uint8_t* a = activation_row(p, 0);
  const int64_t groups = (p.row_end - p.row_begin) / kX16Rows, q = groups / 2;
  for (int64_t j = 0; j < q; ++j) {
    const int64_t row0[2] = {p.row_begin + j * kX16Rows, p.row_begin + (q + j) * kX16Rows};
    decode_groups<2>(p, row0, a);
  }
  if (groups % 2) {
    const int64_t row0[1] = {p.row_begin + (groups - 1) * kX16Rows};
    decode_groups<1>(p, row0, a);
  }
}

// ---- several tokens ------------------------------------------------------------
constexpr int64_t kBlocksPerStep = 8;  // 256 columns: G * 8 KiB of weights in L1
constexpr int kMaxTokens = 8;

// A step's lines of the next step's weights to prefetch into L2 (one share
// per token group, spread over its blocks): with several token groups the
// in-row prefetch runs only in the first, and it is too close in time for a
// compute-dense tile, so the next step must be on its way before it starts.
struct NextStep {
  const uint8_t* at[kX16TileGroups] = {};  // per group; null: none
  size_t line0 = 0, line1 = 0;                // this call's share of each, in 64-byte lines
};

// Rows of G adjacent groups (w: the first group's start) by NT tokens over
// blocks [b0, b1): y[t] += (or = when first) the partial dots.
template <int G, int NT>
void outer_tile(const uint8_t* w, size_t group_bytes, int64_t b0, int64_t b1, const uint8_t* const* a,
                float* const* y, bool first, bool stream, const NextStep& next) {
  __m512 acc[NT][G];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) acc[t][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y[t] + 16 * g);
  // The tokens' pairs of these blocks, side by side: one base register
  // serves every broadcast (8 token pointers would spill). Unrolled, so it
  // is not made a call to memcpy.
  alignas(64) uint8_t xb[NT][kBlocksPerStep * 64];
  const int64_t n = b1 - b0;
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 8
    for (int64_t i = 0; i < kBlocksPerStep; ++i)
      if (i < n) _mm512_store_si512(xb[t] + 64 * i, _mm512_loadu_si512(a[t] + 64 * size_t(b0 + i)));
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* wb = w + kGroupBlock * size_t(b);
    if (stream)  // the first token group reads from DRAM: ahead within the rows
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g)
        for (size_t o = 0; o < kGroupBlock; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(wb + group_bytes * size_t(g) + kPrefetch + o), _MM_HINT_T0);
    {
      const size_t i = size_t(b - b0), span = next.line1 - next.line0;
      const size_t l0 = next.line0 + span * i / size_t(n), l1 = next.line0 + span * (i + 1) / size_t(n);
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g)
        if (next.at[g])
          for (size_t l = l0; l < l1; ++l) _mm_prefetch(reinterpret_cast<const char*>(next.at[g] + 64 * l), _MM_HINT_T1);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 16; ++k) {
      __m512bh wv[G];
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g) wv[g] = weights_at(wb + group_bytes * size_t(g) + 64 * size_t(k));
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512bh x = pair_of(xb[t], 16 * (b - b0) + k);
#pragma GCC unroll 3
        for (int g = 0; g < G; ++g) acc[t][g] = _mm512_dpbf16_ps(acc[t][g], wv[g], x);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 3
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(y[t] + 16 * g, acc[t][g]);
}

// One step: G groups from row r0, blocks [b0, b1), the next step's weights
// at next[g] (next_lines lines each).
struct Step {
  int64_t r0, b0, b1;
  const uint8_t* next[kX16TileGroups];
  size_t next_lines;
};

template <int G, int NT>
void outer_tokens(const RowDotParams& p, const Step& st, int64_t t0, int64_t token_groups) {
  const uint8_t* a[NT];
  float* y[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = activation_row(p, t0 + t);
    y[t] = p.y + size_t(t0 + t) * p.y_row_stride + size_t(st.r0);
  }
  const size_t j = size_t(t0 / kMaxTokens), ng = size_t(token_groups);
  const NextStep next{{st.next[0], st.next[1], st.next[2]}, st.next_lines * j / ng, st.next_lines * (j + 1) / ng};
  outer_tile<G, NT>(p.w + size_t(st.r0) * p.w_row_stride, kX16Rows * p.w_row_stride, st.b0, st.b1, a, y,
                    st.b0 == 0, t0 == 0, next);
}

// All tokens over one step, 8 at a time.
template <int G>
void outer_step(const RowDotParams& p, const Step& st) {
  const int64_t groups = (p.n_tokens + kMaxTokens - 1) / kMaxTokens;
  int64_t t = 0;
  for (; t + kMaxTokens <= p.n_tokens; t += kMaxTokens) outer_tokens<G, kMaxTokens>(p, st, t, groups);
  switch (p.n_tokens - t) {
    case 7: outer_tokens<G, 7>(p, st, t, groups); break;
    case 6: outer_tokens<G, 6>(p, st, t, groups); break;
    case 5: outer_tokens<G, 5>(p, st, t, groups); break;
    case 4: outer_tokens<G, 4>(p, st, t, groups); break;
    case 3: outer_tokens<G, 3>(p, st, t, groups); break;
    case 2: outer_tokens<G, 2>(p, st, t, groups); break;
    case 1: outer_tokens<G, 1>(p, st, t, groups); break;
    default: break;
  }
}

// Three groups at a time (three streams), then the two or one left over;
// each step names the next one's weights for its prefetches.
void prefill_rows(const RowDotParams& p) {
  const int64_t nb = p.cols / kColsPerBlock;
  const size_t group_bytes = kX16Rows * p.w_row_stride;
  auto width = [&](int64_t r0) { return std::min<int64_t>(kX16TileGroups, (p.row_end - r0) / kX16Rows); };
  for (int64_t r0 = p.row_begin; r0 < p.row_end; r0 += width(r0) * kX16Rows) {
    const int64_t gs = width(r0);
    for (int64_t b = 0; b < nb; b += kBlocksPerStep) {
      Step st{r0, b, std::min(nb, b + kBlocksPerStep), {}, 0};
      // the next step: this row's next blocks, or the next groups' first
      const int64_t nr = st.b1 < nb ? r0 : r0 + gs * kX16Rows, nb0 = st.b1 < nb ? st.b1 : 0;
      if (nr < p.row_end) {
        const uint8_t* w0 = p.w + size_t(nr) * p.w_row_stride + kGroupBlock * size_t(nb0);
        for (int64_t g = 0; g < width(nr); ++g) st.next[g] = w0 + group_bytes * size_t(g);
        st.next_lines = size_t(std::min(nb, nb0 + kBlocksPerStep) - nb0) * kGroupBlock / 64;
      }
      if (gs == 3)
        outer_step<3>(p, st);
      else if (gs == 2)
        outer_step<2>(p, st);
      else
        outer_step<1>(p, st);
    }
  }
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
