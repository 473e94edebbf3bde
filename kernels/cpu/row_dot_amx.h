// Internal to the amx level's sources (row_dot_amx.cpp, row_dot_amx_fp8.cpp,
// row_dot_amx_q8.cpp):
// tile configuration and the tile loads. Include nowhere else.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/row_dot.h"

namespace tandem::kernels::amx {

// BF16 (bf16_x16): fewer tokens take the avx512bf16 kernels. Both stream the weights there,
// and the tiles read them a little slower (BF16: one process, two threads,
// weights from DRAM, variants alternating, DeepSeek-V3's 2048 x 7168
// gathered and 7168 x 2048: 0.89-0.97x at 2 tokens, 0.93-0.96x at 4,
// 0.99-1.03x at 5, 1.29-1.43x at 6, 1.5-1.7x at 8).
inline constexpr int64_t kMinTokens = 6;
inline constexpr int kMaxM = 16;  // rows of a tile: tokens (BF16) or weight rows (FP8, Q8_0)

// Palette 1: rows and bytes per row of each of the 8 tile registers.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  void set(int t, int n_rows, int bytes) {
    rows[t] = uint8_t(n_rows);
    colsb[t] = uint16_t(bytes);
  }
};

// GCC 12's intrinsics tell the compiler that ldtilecfg reads 8 bytes of the
// config and that tileloadd reads no memory at all, so a config built just
// before, or activations staged just before, could be left unwritten or be
// overwritten early: the config goes in whole here, and tile loads clobber
// memory (the compiler keeps stores on their side of them).
inline void load_config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }

}  // namespace tandem::kernels::amx

// Tile register t <- rows at base, stride bytes apart. A macro: the register
// number is part of the instruction.
#define TANDEM_TILE_LOAD(t, base, stride)                                                                \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t : : "r"(static_cast<const void*>(base)), "r"(long(stride)) \
                   : "memory")

namespace tandem::kernels::amx {
// FP8 E4M3 rows with 128 x 128 block scales, 3 or more tokens, through
// tiles; the rest through avx512bf16's kernel (row_dot_amx_fp8.cpp).
void fp8_rows(const RowDotParams& p);
// Q8_0 stored as q8_0_x4 against kMinTokensQ8 or more tokens, through tiles;
// the rest through avx512bf16's q8_0_x4_block_rows, which sums as the tiles
// do (row_dot_amx_q8.cpp); rowmajor Q8_0 through avx512bf16's kernel.
inline constexpr int64_t kMinTokensQ8 = 4;
void q8_0_rows(const RowDotParams& p);
}  // namespace tandem::kernels::amx
namespace tandem::kernels::avx512bf16 {
void q8_0_x4_block_rows(const RowDotParams& p);  // row_dot_x86_q8_0_x4.cpp
}  // namespace tandem::kernels::avx512bf16
