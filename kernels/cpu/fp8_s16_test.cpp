// fp8_s16 (weight_layout.h): FP8 rows stored 16 at a time, 1024 columns a
// slice, each 64 bytes paired for the shift widening. Row dots over it equal
// the rowmajor ones bit for bit at every level, the pairing matches the
// widening's column orders, and the kernels read nothing before a matrix.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/fp8_tables.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels {
namespace {

using testing::random_x;
using testing::reversed_rows;
using testing::rowmajor_params;

// fp8_s16 gives the rowmajor floats bit for bit at every level: the sliced
// loop (one or two tokens, marked) and, from three tokens, the rowmajor
// loop reading each row's blocks from its group's slices (marked) sum each
// row's blocks in the rowmajor loop's order from the paired bytes, and the
// other calls run the rowmajor kernels on each group put back in rows.
// Zeros and subnormals in blocks of the later slices send those blocks
// through the tables; 144 and 160 rows cross a scale row.
TEST(WeightLayout, Fp8S16RowDotsEqualRowmajorAtEveryLevel) {
  std::mt19937 rng(41);
  const DType type = DType::kF8E4M3;
  for (int64_t cols : {1024, 3072, 7168}) {
    for (int64_t rows : {16, 64, 80, 144, 160}) {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<uint8_t> w(size_t(rows * cols));
      for (auto& b : w) {
        b = f32_to_fp8_e4m3(nd(rng));
        if ((b & 0x7F) < 8) b |= 8;  // no zeros or subnormals but where put below
      }
      for (int64_t r = 0; r < rows; r += 3) w[size_t(r * cols + (cols - 1 - (r * 131) % cols))] = uint8_t(r % 8);
      std::vector<uint8_t> marks(size_t(rows) * fp8_marks_row_bytes(cols));
      fp8_mark_blocks(w.data(), size_t(cols), rows, cols, marks.data());
      std::vector<uint8_t> s16 = w;
      repack_rows(WeightLayout::kFp8S16, type, s16.data(), rows, cols);
      const int64_t blocks = cols / 128;
      std::vector<float> scales(size_t((rows + 127) / 128 * blocks));
      std::uniform_real_distribution<float> ud(0.001f, 0.1f);
      for (auto& v : scales) v = ud(rng);
      const size_t ab = row_dot_activation_bytes(type, cols);
      // 19 tokens at 7168 columns: two chunks of the loop's permuted activations
      const std::vector<int64_t> token_list = cols == 7168 && rows == 80 ? std::vector<int64_t>{1, 2, 3, 5, 19}
                                                                         : std::vector<int64_t>{1, 2, 3, 5};
      for (int64_t tokens : token_list) {
        const std::vector<float> x = random_x(tokens * cols, rng);
        std::vector<uint8_t> a(ab * size_t(tokens));
        convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.data(), ab);
        const std::vector<const uint8_t*> gathered = reversed_rows(a, ab, tokens);
        const int64_t r0 = rows > 16 ? 16 : 0, r1 = rows > 64 ? rows - 16 : rows;
        for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
          if (!supports(detect_cpu_features(), isa)) continue;
          for (bool marked : {true, false})
            for (bool gather : {false, true}) {
              SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + ", " +
                           std::to_string(tokens) + " tokens" + (marked ? ", marked" : "") +
                           (gather ? ", gathered" : ""));
              RowDotParams p =
                  rowmajor_params(type, w.data(), size_t(cols), rows, cols, a.data(), ab, tokens, r0, r1);
              p.scales = scales.data();
              p.scale_row_stride = size_t(blocks);
              p.fp8_marks = marked ? marks.data() : nullptr;
              p.a_rows = gather ? gathered.data() : nullptr;
              std::vector<float> ref(p.y_row_stride * size_t(tokens), -7.0f), y(ref.size(), -7.0f);
              p.y = ref.data();
              row_dot_check(p);
              row_dot_for(isa, type)(p);
              RowDotParams q = p;
              q.w = s16.data();
              q.layout = WeightLayout::kFp8S16;
              q.y = y.data();
              row_dot_check(q);
              row_dot_for(isa, type)(q);
              for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << "output " << i;
            }
        }
      }
    }
  }
}

// fp8_s16's bytes pair the columns of the FP8 widening's orders (word j:
// order A's column low, order B's high; fp8_tables.h), and pack and unpack
// are inverse.
TEST(WeightLayout, Fp8S16PairsTheWideningsColumns) {
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(fp8_s16_column(2 * j), kFp8OrderA[j]) << j;
    EXPECT_EQ(fp8_s16_column(2 * j + 1), kFp8OrderB[j]) << j;
    EXPECT_EQ(fp8_s16_column(64 + 2 * j), 64 + kFp8OrderA[j]) << j;
  }
  std::mt19937 rng(3);
  const int64_t rows = 32, cols = 2048;
  std::vector<uint8_t> w(size_t(rows * cols));
  for (auto& b : w) b = uint8_t(rng());
  std::vector<uint8_t> s16 = w;
  repack_rows(WeightLayout::kFp8S16, DType::kF8E4M3, s16.data(), rows, cols);
  // row 17's column 1024 + 8 (order B's word 0 of the group's second slice)
  EXPECT_EQ(s16[size_t(16 * cols + 1024 * 16 + 1 * 1024 + 1)], w[size_t(17 * cols + 1024 + 8)]);
  std::vector<uint8_t> back(w.size());
  const uint8_t* g = s16.data();
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t s = 0; s < cols / 1024; ++s) {
      uint8_t* dst[kMaxGroupRows];
      for (int r = 0; r < 16; ++r) dst[r] = back.data() + size_t((r0 + r) * cols + s * 1024);
      unpack_group_block(WeightLayout::kFp8S16, g + size_t(r0 * cols + s * 16 * 1024), dst);
    }
  EXPECT_EQ(back, w);
}

// The fp8_s16 loop loads each 64 bytes' weights from one byte before them
// too; at a matrix's first bytes it must not read that byte, which may lie
// in an unmapped page (here a PROT_NONE one); one or two tokens (the sliced
// pass) and more (the rows from the groups' slices).
TEST(WeightLayout, Fp8S16ReadsNothingBeforeTheMatrix) {
  if (!supports(detect_cpu_features(), CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no avx512bf16 level on this CPU";
  const DType type = DType::kF8E4M3;
  const int64_t rows = 64, cols = 1024;
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), bytes = size_t(rows * cols);
  void* m = mmap(nullptr, page + bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(mprotect(m, page, PROT_NONE), 0);
  uint8_t* w = static_cast<uint8_t*>(m) + page;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> rm(bytes);
  for (auto& b : rm) {
    b = f32_to_fp8_e4m3(nd(rng));
    if ((b & 0x7F) < 8) b |= 8;
  }
  std::vector<uint8_t> marks(size_t(rows) * fp8_marks_row_bytes(cols));
  fp8_mark_blocks(rm.data(), size_t(cols), rows, cols, marks.data());
  std::memcpy(w, rm.data(), bytes);
  repack_rows(WeightLayout::kFp8S16, type, w, rows, cols);
  std::vector<float> scales(size_t(cols / 128), 0.01f);
  const size_t ab = row_dot_activation_bytes(type, cols);
  for (int64_t tokens : {1, 2, 3, 5}) {
    const std::vector<float> x = random_x(tokens * cols, rng);
    std::vector<uint8_t> a(ab * size_t(tokens));
    convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.data(), ab);
    RowDotParams p = rowmajor_params(type, rm.data(), size_t(cols), rows, cols, a.data(), ab, tokens, 0, rows);
    p.scales = scales.data();
    p.scale_row_stride = size_t(cols / 128);
    p.fp8_marks = marks.data();
    std::vector<float> ref(p.y_row_stride * size_t(tokens)), y(ref.size());
    p.y = ref.data();
    row_dot_for(CpuIsa::kAvx512Bf16, type)(p);  // the same floats from rowmajor rows
    p.w = w;
    p.layout = WeightLayout::kFp8S16;
    p.y = y.data();
    row_dot_check(p);
    row_dot_for(CpuIsa::kAvx512Bf16, type)(p);
    EXPECT_EQ(y, ref) << tokens << " tokens";
  }
  munmap(m, page + bytes);
}

}  // namespace
}  // namespace tandem::kernels
