#include "kernels/cpu/fp8_marks.h"

#include <algorithm>
#include <cstring>

namespace tandem::kernels {

void fp8_mark_blocks(const uint8_t* w, size_t w_row_stride, int64_t rows, int64_t cols, uint8_t* marks) {
  const size_t row_bytes = fp8_marks_row_bytes(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + size_t(r) * w_row_stride;
    uint8_t* out = marks + size_t(r) * row_bytes;
    std::memset(out, 0, row_bytes);
    for (int64_t c0 = 0, b = 0; c0 < cols; c0 += kFp8MarkBlock, ++b) {
      const int64_t n = std::min(kFp8MarkBlock, cols - c0);
      // an or over the block, without an early exit, so it vectorises
      uint8_t any = 0;
      for (int64_t c = 0; c < n; ++c) any |= uint8_t(fp8_needs_tables(row[c0 + c]));
      out[b / 8] = uint8_t(out[b / 8] | (any << (b % 8)));
    }
  }
}

}  // namespace tandem::kernels
