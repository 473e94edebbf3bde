// Q8_0 weights stored as q8_0_x16 (weight_layout.h) at the avx512bf16 level
// (VNNI): a 64-byte chunk holds 4 values of 16 rows (each stored + 128), so
// one vpdpbusd against a token's 4 broadcast values adds 16 rows' exact
// partial sums at once: an outer product, so a prefill loads each chunk
// once for all the tokens in registers, and each block ends in one fma per
// 16 rows and token, where q8_0_x4's tiles convert and scale 8 lanes per 2
// rows and token per block.
//
// Each (row, token) block sum is exact: the lane starts at -128 * the
// token's block sum (what the stored + 128 adds) and adds the 8 chunks'
// products. Then y = fma(float(sum), d_w * d_x, y) per block in order, from
// y = 0, in any tile, batch or call, so
// a token gets the same floats alone or with others. Tested against the
// reference within Q8_0's bound.
#include <algorithm>

#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512VNNI__)
namespace {

constexpr size_t kBlock = kQ8_0X16GroupBlock;  // 16 rows x 32 values
constexpr size_t kQs = 32;                     // the values after the 16 scales
constexpr size_t kXBlock = sizeof(BlockQ8_0);
// How far ahead each group's stream asks for its lines (prefetcht0), as fp8_x16's.
constexpr size_t kAhead = 3072;

// A token's block as the kernel takes it: d_x, and -128 * the sum of its
// values (the lanes' start).
struct TokenBlock {
  float d;
  int32_t bias;
};

// Token blocks a call prepares at once (on the stack, 64 KiB).
constexpr int64_t kTokenBlocks = 8192;

inline TokenBlock token_block(const uint8_t* x) {
  const __m256i v = _mm256_xor_si256(load256(x + 2), _mm256_set1_epi8(char(0x80)));  // x + 128, unsigned
  // four 64-bit sums of 8 bytes each (their high halves zero)
  const int32_t sum = hsum256i(_mm256_sad_epu8(v, _mm256_setzero_si256())) - 128 * kQK8_0;
  return {half(x), -128 * sum};
}

// G groups (group_bytes apart, starting at w; outputs y_group floats apart)
// by NT tokens (tb[t]: their blocks from block 0, a[t]: their activation
// rows) over blocks [b0, b1).
struct Tile {
  const uint8_t* w;
  size_t group_bytes, y_group;
};

template <int G, int NT, bool kPrefetch>
void x16_tile(const Tile& tl, int64_t b0, int64_t b1, const TokenBlock* const* tb, const uint8_t* const* a,
              float* const* y) {
  __m512 out[NT][G];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) out[t][g] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(y[t] + tl.y_group * g);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* wb = tl.w + kBlock * size_t(b);
    __m512i acc[NT][G];
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m512i bias = _mm512_set1_epi32(tb[t][b].bias);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[t][g] = bias;
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m512i wq[G];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const uint8_t* c = wb + tl.group_bytes * size_t(g) + kQs + 64 * size_t(j);
        if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(c + kAhead), _MM_HINT_T0);
        wq[g] = _mm512_loadu_si512(c);
      }
#pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m512i x = _mm512_set1_epi32(load_unaligned<int32_t>(a[t] + kXBlock * size_t(b) + 2 + 4 * size_t(j)));
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], wq[g], x);
      }
    }
    __m512 dw[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* d = wb + tl.group_bytes * size_t(g);
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(d + kAhead), _MM_HINT_T0);
      dw[g] = _mm512_cvtph_ps(load256(d));
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const __m512 dx = _mm512_set1_ps(tb[t][b].d);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        out[t][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][g]), _mm512_mul_ps(dw[g], dx), out[t][g]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(y[t] + tl.y_group * g, out[t][g]);
}

// A call's tokens t0.. with their blocks prepared (tb: n x nb).
struct Tokens {
  const TokenBlock* tb;
  int64_t t0, nb;
};

// G groups (the first at row r0, the others gstep groups apart) by NT
// tokens from t (of the prepared ones), blocks [b0, b1).
template <int G, int NT>
void x16_tokens(const RowDotParams& p, const Tokens& tk, int64_t r0, int64_t gstep, int64_t t, int64_t b0,
                int64_t b1) {
  const uint8_t* a[NT];
  const TokenBlock* tb[NT];
  float* y[NT];
#pragma GCC unroll 16
  for (int i = 0; i < NT; ++i) {
    a[i] = activation_row(p, tk.t0 + t + i);
    tb[i] = tk.tb + size_t(t + i) * size_t(tk.nb);
    y[i] = p.y + size_t(tk.t0 + t + i) * p.y_row_stride + size_t(r0);
  }
  const Tile tl{p.w + size_t(r0) * p.w_row_stride, kX16Rows * p.w_row_stride * size_t(gstep),
                size_t(kX16Rows * gstep)};
  if (t == 0 && asks_for_stream(p, kX16HardwareStreamTokens))  // the first pass streams the weights in
    x16_tile<G, NT, true>(tl, b0, b1, tb, a, y);
  else
    x16_tile<G, NT, false>(tl, b0, b1, tb, a, y);
}

// Tokens per pass: two groups by up to 6 (12 integer sums, 12 outputs and
// the chunk's two vectors fill the registers).
constexpr int kPassTokens = 6;
constexpr int64_t kStepBlocks = 32;  // 1024 values a step when tokens take several passes

template <int G>
void x16_groups(const RowDotParams& p, const Tokens& tk, int64_t n, int64_t r0, int64_t gstep) {
  const int64_t step = n <= kPassTokens ? tk.nb : kStepBlocks;
  for (int64_t b0 = 0; b0 < tk.nb; b0 += step) {
    const int64_t b1 = std::min(tk.nb, b0 + step);
    for (int64_t t = 0; t < n; t += kPassTokens)
      with_tokens<kPassTokens>(std::min<int64_t>(kPassTokens, n - t),
                               [&]<int NT>() { x16_tokens<G, NT>(p, tk, r0, gstep, t, b0, b1); });
  }
}

// The range's groups for n prepared tokens in tiles of two from the halves
// (two far-apart streams, each stream's prefetches running on into the
// next tile's group), the odd one last. One or two tokens from the
// quarters (four groups a tile, as fp8_x16's) read no faster: batch 1 of
// the layer 84-107% of the read against 87-120% (three alternated rounds).
void x16_rows(const RowDotParams& p, const Tokens& tk, int64_t n) {
  const int64_t groups = (p.row_end - p.row_begin) / kX16Rows, h = groups / 2;
  for (int64_t j = 0; j < h; ++j) x16_groups<2>(p, tk, n, p.row_begin + j * kX16Rows, h);
  if (groups % 2) x16_groups<1>(p, tk, n, p.row_begin + 2 * h * kX16Rows, 1);
}

}  // namespace

void q8_0_x16_rows(const RowDotParams& p) {
  const int64_t nb = p.cols / kQK8_0;
  // Rows of more than kTokenBlocks blocks (262144 values; no model's experts
  // have them) go to the reference, which allocates.
  if (nb > kTokenBlocks) return generic::find(DType::kQ8_0)(p);
  const int64_t chunk = kTokenBlocks / nb;
  TokenBlock tb[kTokenBlocks];
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, p.n_tokens - t0);
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* x = activation_row(p, t0 + t);
      for (int64_t b = 0; b < nb; ++b) tb[t * nb + b] = token_block(x + kXBlock * size_t(b));
    }
    x16_rows(p, Tokens{tb, t0, nb}, n);
  }
}

#else
// No VNNI at this level: the reference takes the layout.
void q8_0_x16_rows(const RowDotParams& p) { generic::find(DType::kQ8_0)(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
