// Pieces of the FP8 loops of the avx512bf16 level (row_dot_x86_fp8_loop.cpp;
// until stop 49 shared with fp8_s16's one-token kernel). Internal to that
// source, as row_dot_x86_tile.h.
#pragma once

#include "kernels/cpu/fp8_tables.h"
#include "kernels/cpu/row_dot_x86_tile.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__) && defined(__GFNI__)
namespace {
// One scale block of one row through the tables (exact for every byte),
// against activations already in the tables' order: the one-token loop's
// way out for the blocks its bit maps cannot take. Kept out of line, so the
// loop keeps its registers. Not fp8_span<1, 1>, whose lanes are the same: it
// permutes the activations again per 64 columns (measured through it, the
// loop ran 3-20% slower with hot weights whose subnormals send some blocks here).
[[gnu::noinline, gnu::cold]] __m512 fp8_block_by_tables(const uint8_t* w, const uint8_t* xp) {
  const Fp8Widener fp8;
  __m512 acc = _mm512_setzero_ps();
  for (int c = 0; c < int(kFp8ScaleBlock); c += 64) {
    __m512i wa, wb;
    fp8.widen(_mm512_loadu_si512(w + c), wa, wb);
    acc = _mm512_dpbf16_ps(acc, (__m512bh)wa, (__m512bh)_mm512_load_si512(xp + 2 * c));
    acc = _mm512_dpbf16_ps(acc, (__m512bh)wb, (__m512bh)_mm512_load_si512(xp + 2 * c + 64));
  }
  return acc;
}

// A row's block end for T tokens: the block's sums times its scale into
// the running sums (2^8 times the value, as the bit maps give them), or,
// where the block holds a byte the maps cannot take (`tables`), its sums
// again through the tables at w (its 128 bytes) and the tokens'
// activations from column c0.
template <int T>
[[gnu::always_inline]] inline void fp8_block_end(bool tables, const __m512 (&blk)[T], const uint8_t* w,
                                                 const uint8_t* const* xp, int64_t c0, float scale, __m512 (&sum)[T]) {
  for (int t = 0; t < T; ++t) {
    if (__builtin_expect(tables, 0))
      sum[t] = _mm512_fmadd_ps(fp8_block_by_tables(w, xp[t] + 2 * c0), _mm512_set1_ps(scale * 0x1p8f),
                               sum[t]);
    else
      sum[t] = _mm512_fmadd_ps(blk[t], _mm512_set1_ps(scale), sum[t]);
  }
}

}  // namespace
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
