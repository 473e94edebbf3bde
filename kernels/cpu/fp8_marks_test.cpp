#include "kernels/cpu/fp8_marks.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tandem::kernels {
namespace {

TEST(Fp8Marks, NeedsTablesExactlyForZerosSubnormalsAndNaN) {
  int n = 0;
  for (int q = 0; q < 256; ++q) {
    const int e = (q >> 3) & 15, m = q & 7;
    const bool expect = e == 0 || (e == 15 && m == 7);
    EXPECT_EQ(fp8_needs_tables(uint8_t(q)), expect) << "byte " << q;
    n += expect;
  }
  EXPECT_EQ(n, 18);
}

// Each (row, block) marked exactly where one of its bytes needs the tables,
// with rows apart (a stride past the row), a partial last block, and blocks
// past the eighth (a second byte of marks per row).
TEST(Fp8Marks, MarksTheBlocksThatHoldSuchAByte) {
  std::mt19937 rng(7);
  for (int64_t cols : {1, 127, 128, 200, 1024, 1100, 2048}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const int64_t rows = 5, blocks = (cols + 127) / 128;
    const size_t stride = size_t(cols) + 9, mrow = fp8_marks_row_bytes(cols);
    ASSERT_EQ(mrow, size_t((blocks + 7) / 8));
    std::vector<uint8_t> w(stride * rows);
    std::uniform_int_distribution<int> clean(0x08, 0x7E);  // normal magnitudes
    for (auto& b : w) b = uint8_t(clean(rng) | (rng() & 0x80));
    std::vector<std::vector<bool>> expect(rows, std::vector<bool>(size_t(blocks), false));
    const uint8_t special[] = {0x00, 0x80, 0x03, 0x87, 0x7F, 0xFF};
    for (int k = 0; k < 9; ++k) {
      const int64_t r = int64_t(rng() % rows), c = int64_t(rng() % uint64_t(cols));
      w[size_t(r) * stride + size_t(c)] = special[k % 6];
      expect[size_t(r)][size_t(c / 128)] = true;
    }
    for (int64_t r = 0; r < rows; ++r) w[size_t(r) * stride + size_t(cols)] = 0;  // junk past the row
    std::vector<uint8_t> marks(mrow * rows, 0xEE);
    fp8_mark_blocks(w.data(), stride, rows, cols, marks.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < 8 * int64_t(mrow); ++b) {
        const bool got = (marks[size_t(r) * mrow + size_t(b / 8)] >> (b % 8)) & 1;
        EXPECT_EQ(got, b < blocks && expect[size_t(r)][size_t(b)]) << "row " << r << " block " << b;
      }
  }
}

}  // namespace
}  // namespace tandem::kernels
