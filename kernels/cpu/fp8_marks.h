// Marks of FP8 E4M3 weights for the bit-map loop (row_dot_x86_fp8_loop.cpp):
// per row, one bit per 128-column scale block, set where the block holds a
// byte that the kernel's GF(2) bit maps cannot widen (+-0, the 14
// subnormals and the NaNs: fp8_tables.h). Without them the kernel searches
// every 64 weight bytes for those bytes (two of its eight vector
// instructions per load); with them it reads one bit per block. They are
// made once where the weights are prepared, as the x4 and x16 layouts are
// repacked (the arena builder does for a Hugging Face FP8 model's routed
// experts, and the benchmark for its own).
//
// Row r's bits are at marks + r * fp8_marks_row_bytes(cols): block b's bit
// is bit b % 8 of byte b / 8. A mark set on a clean block costs time, never
// floats; a clean mark on a block with such a byte gives wrong sums, so
// marks belong to the exact bytes they were made from.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

inline constexpr int64_t kFp8MarkBlock = 128;  // columns per mark: a scale block

inline size_t fp8_marks_row_bytes(int64_t cols) {
  return size_t((cols + 8 * kFp8MarkBlock - 1) / (8 * kFp8MarkBlock));
}

// Whether block `block` of the row whose marks start at row_marks is marked.
inline bool fp8_block_marked(const uint8_t* row_marks, int64_t block) {
  return ((row_marks[block / 8] >> (block % 8)) & 1) != 0;
}

// The bytes the bit maps cannot widen: magnitude 0..7 (zero, subnormals) or 0x7F (NaN).
inline constexpr bool fp8_needs_tables(uint8_t q) {
  const uint8_t m = q & 0x7F;
  return m < 8 || m == 0x7F;
}

// Writes rows * fp8_marks_row_bytes(cols) bytes of marks for a rows x cols
// matrix (w_row_stride bytes between rows); a partial last block is marked
// from the columns it has.
void fp8_mark_blocks(const uint8_t* w, size_t w_row_stride, int64_t rows, int64_t cols, uint8_t* marks);

}  // namespace tandem::kernels
