// BF16 rowmajor rows at the avx2 level, widened a column pair at a time.
//
// A 32-bit lane of a 256-bit load holds two bf16 values, columns 2k and
// 2k + 1; shifted left by 16 it is the f32 of column 2k, masked to its high
// half the f32 of column 2k + 1. So 16 columns widen in one load and two
// single-uop instructions, for weights and activations alike, where the
// shared tiles (row_dot_x86_tile.h, Widened<LoadBf16>) spend a zero-extend
// and a shift on every 8 and hold 4 rows x 4 tokens of sums, all 16 of
// AVX2's registers, so they spill. One thread, weights in L2, 8 tokens of
// 7168 columns: 54 GFLOP/s there, 71 here, of a 95 peak.
//
// Tiles: 4 rows of one or two tokens in one pass (4 x 2 sums, 4 widened
// activation vectors, one row's pair and the mask: 15 registers); 4 rows of
// 3 or 4 tokens in two passes of 2 rows (2 x 4 sums, 4 widened weight
// vectors and the activations: 16). Each sum takes two dependent fmas a
// step, so a tile needs 8 of them for the FMAs' throughput: a pass of 2
// rows x 2 tokens would run at half speed. The first pass's prefetch runs
// on into the second pass's rows, the second's into the next tile's first
// rows.
//
// Every dot sums in one order, whatever the call's tokens and rows: lane k
// adds, for each 16 columns in order, column 2k's product then column
// 2k + 1's (one fma each, into one accumulator); the columns past the last
// 16 as zeros; the 8 lanes then as vsum. So a token gets the same floats in
// every call, one token or many, in any place of its batch.
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512F__)
namespace {

constexpr int64_t kStep = 16;  // columns a step: one 256-bit load per row

inline VF even_cols(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
inline VF odd_cols(__m256i v, __m256i high) { return _mm256_castsi256_ps(_mm256_and_si256(v, high)); }

// One step of R rows x T tokens from w[i] and a[j] (16 bf16 each). More
// rows than tokens: the activations widen first and stay, each row's pair
// in turn (4 x 2: 8 sums, 4 + 2 widened vectors and the mask); otherwise
// the rows widen first and stay (2 x 4: 8 sums, 4 + 3 and the mask). The
// same fmas into each sum in the same order either way.
template <int R, int T>
inline void pair_step(const uint8_t* const* w, const uint8_t* const* a, size_t at, __m256i high,
                      VF (&acc)[R][T]) {
  if constexpr (R > T) {
    VF xe[T], xo[T];
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) {
      const __m256i x = load256(a[j] + at);
      xe[j] = even_cols(x);
      xo[j] = odd_cols(x, high);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m256i v = load256(w[i] + at);
      const VF we = even_cols(v), wo = odd_cols(v, high);
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) acc[i][j] = vfma(we, xe[j], acc[i][j]);
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) acc[i][j] = vfma(wo, xo[j], acc[i][j]);
    }
    return;
  }
  VF we[R], wo[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m256i v = load256(w[i] + at);
    we[i] = even_cols(v);
    wo[i] = odd_cols(v, high);
  }
#pragma GCC unroll 4
  for (int j = 0; j < T; ++j) {
    const __m256i x = load256(a[j] + at);
    const VF xe = even_cols(x), xo = odd_cols(x, high);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i][j] = vfma(we[i], xe, acc[i][j]);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i][j] = vfma(wo[i], xo, acc[i][j]);
  }
}

// The R x T dots of rows w and tokens a over all cols columns into out.
template <int R, int T>
void pair_dots(int64_t cols, const uint8_t* const* w, const uint8_t* const* a, float (*out)[T],
               const Ahead& ah) {
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  VF acc[R][T];
#pragma GCC unroll 4
  for (auto& row : acc)
#pragma GCC unroll 4
    for (auto& v : row) v = vzero();
  int64_t c = 0;
  for (; c + kStep <= cols; c += kStep) {
    if ((c & 31) == 0)  // once per 64 bytes of each row
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) ah.at(w[i], size_t(2 * c));
    pair_step<R, T>(w, a, size_t(2 * c), high, acc);
  }
  if (c < cols) {  // the last columns, zero-padded (never read past a row)
    const size_t n = size_t(2 * (cols - c));
    Tail tw[R], ta[T];
    const uint8_t* tail_w[R];
    const uint8_t* tail_a[T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) tail_w[i] = tw[i].from(w[i] + 2 * c, n);
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) tail_a[j] = ta[j].from(a[j] + 2 * c, n);
    pair_step<R, T>(tail_w, tail_a, 0, high, acc);
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) out[i][j] = vsum(acc[i][j]);
}

template <int R, int T>
struct PairTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    if constexpr (R == 4 && T >= 3) {
      const TwoPassAhead pass(w, ah);
      pair_dots<2, T>(p.cols, w, a, out, pass.first);
      pair_dots<2, T>(p.cols, w + 2, a, out + 2, pass.second);
    } else {
      pair_dots<R, T>(p.cols, w, a, out, ah);
    }
  }
};

}  // namespace

void bf16_pair_rows(const RowDotParams& p) { drive<PairTile>(p); }
#endif
}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
