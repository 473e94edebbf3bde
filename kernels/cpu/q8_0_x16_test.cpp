// q8_0_x16 (weight_layout.h): Q8_0 rows stored 16 at a time, each block's
// values in chunks of 4 columns of the 16 rows. Its kernel (avx512bf16:
// row_dot_x86_q8_0_x16.cpp; lower levels: the reference) agrees with the
// generic rowmajor one within Q8_0's bound at every level, for every tile
// and pass, and gives a token the same floats in any batch and any cut of
// the rows (the engine relies on that: docs/process-graph.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels {
namespace {

using testing::Activations;
using testing::agrees_within;
using testing::random_activations;
using testing::reversed_rows;
using testing::rowmajor_params;
using testing::same_floats_in_any_batch_and_cut;

constexpr DType kType = DType::kQ8_0;

struct Q8Matrix {
  int64_t rows, cols;
  size_t row_bytes;
  std::vector<uint8_t> w, x16;
  std::vector<float> deq;
};

// Random Q8_0 rows (a few with extreme values: -128 and 127 bytes), repacked.
Q8Matrix make_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  Q8Matrix m{rows, cols, *bytes_for(kType, uint64_t(cols)), {}, {}, {}};
  m.w.resize(m.row_bytes * size_t(rows));
  m.deq.resize(size_t(rows * cols));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng) * float(1 + r % 5);
    row[size_t(r % cols)] *= 8;
    uint8_t* dst = m.w.data() + size_t(r) * m.row_bytes;
    quantize_generic(kType, row.data(), dst, row.size());
    if (r % 7 == 3) dst[2 + r % 32] = 0x80;  // -128, which the stored + 128 makes 0
    dequantize_generic(kType, dst, m.deq.data() + r * cols, size_t(cols));
  }
  m.x16 = m.w;
  repack_rows(WeightLayout::kQ8_0X16, kType, m.x16.data(), rows, cols);
  return m;
}

RowDotParams x16_params(const Q8Matrix& m, const uint8_t* a, size_t ab, int64_t tokens, int64_t r0, int64_t r1) {
  RowDotParams p = rowmajor_params(kType, m.x16.data(), m.row_bytes, m.rows, m.cols, a, ab, tokens, r0, r1);
  p.layout = WeightLayout::kQ8_0X16;
  return p;
}

// Each block's exact sum is scaled (two roundings) and added (one) in both
// the reference and the kernel.
TEST(Q8_0X16, RowDotsAgreeWithGenericAtEveryLevel) {
  std::mt19937 rng(53);
  double worst = 0;
  for (int64_t cols : {32, 224, 2048, 7168}) {
    for (int64_t rows : {16, 80, 176}) {
      if (cols == 7168 && rows > 80) continue;
      const Q8Matrix m = make_matrix(rows, cols, rng);
      const double bound = double(2 * (3 + cols / 32)) * 0x1p-24;
      for (int64_t tokens : cols == 7168 ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 2, 3, 6, 7, 13}) {
        const Activations a = random_activations(kType, tokens, cols, rng);
        std::vector<float> xd(size_t(tokens * cols));
        for (int64_t t = 0; t < tokens; ++t) dequantize_generic(kType, a.row(t), xd.data() + t * cols, size_t(cols));
        const auto abs_dot = [&](int64_t t, int64_t r) {
          double s = 0;
          for (int64_t c = 0; c < cols; ++c)
            s += std::fabs(double(m.deq[size_t(r * cols + c)]) * xd[size_t(t * cols + c)]);
          return s;
        };
        const std::vector<const uint8_t*> gathered = reversed_rows(a.bytes, a.ab, tokens);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {16, rows - 16}}) {
          if (r1 <= r0) continue;
          RowDotParams pr = rowmajor_params(kType, m.w.data(), m.row_bytes, rows, cols, a.row(0), a.ab, tokens, r0, r1);
          std::vector<float> ref(pr.y_row_stride * size_t(tokens), -7.0f);
          pr.y = ref.data();
          generic::find(kType)(pr);
          for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
            if (!supports(detect_cpu_features(), isa)) continue;
            for (bool gather : {false, true}) {
              SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols) + ", " +
                           std::to_string(tokens) + " tokens, rows [" + std::to_string(r0) + ", " +
                           std::to_string(r1) + ")" + (gather ? ", gathered" : ""));
              RowDotParams p = x16_params(m, a.row(0), a.ab, tokens, r0, r1);
              p.a_rows = gather ? gathered.data() : nullptr;
              std::vector<float> y(ref.size(), -7.0f);
              p.y = y.data();
              row_dot_check(p);
              for (CpuPrefetch pf : {CpuPrefetch::kSoftware, CpuPrefetch::kHardware}) {  // the same floats
                SCOPED_TRACE(std::string(prefetch_name(pf)) + " prefetch");
                std::fill(y.begin(), y.end(), -7.0f);
                p.prefetch = pf;
                row_dot_for(isa, kType)(p);
                ASSERT_TRUE(agrees_within(p, y, ref, gather, bound, abs_dot, worst));
              }
            }
          }
        }
      }
    }
  }
  std::printf("  q8_0_x16: worst |x16 - generic| / sum|w*x| = %.2e\n", worst);
}

// One token's floats do not depend on the tokens beside it (1..15 in a
// call: every tile and pass) nor on where a call's rows start.
TEST(Q8_0X16, TokensGetTheSameFloatsInAnyBatchAndCut) {
  std::mt19937 rng(54);
  const int64_t rows = 208, cols = 1312, tokens = 15;  // 41 blocks: steps of 32 and a short one
  const Q8Matrix m = make_matrix(rows, cols, rng);
  const Activations a = random_activations(kType, tokens, cols, rng);
  for (CpuIsa isa : {CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    EXPECT_TRUE(same_floats_in_any_batch_and_cut(
        isa, rows, tokens, {1, 2, 3, 6, 7}, {{0, 48}, {48, 112}, {112, rows}},
        [&](int64_t t0, int64_t n, int64_t r0, int64_t r1) { return x16_params(m, a.row(t0), a.ab, n, r0, r1); }));
  }
}

// Calls of more tokens than the kernel prepares at once (8192 token blocks:
// 36 tokens of 7168 columns) take chunks, with the same floats as the
// tokens alone and within the bound of the reference.
TEST(Q8_0X16, ManyTokensTakeChunksWithTheSameFloats) {
  std::mt19937 rng(56);
  const int64_t rows = 32, cols = 7168, tokens = 40;
  const Q8Matrix m = make_matrix(rows, cols, rng);
  const Activations a = random_activations(kType, tokens, cols, rng);
  RowDotParams pr = rowmajor_params(kType, m.w.data(), m.row_bytes, rows, cols, a.row(0), a.ab, tokens, 0, rows);
  std::vector<float> ref(pr.y_row_stride * size_t(tokens));
  pr.y = ref.data();
  generic::find(kType)(pr);
  for (CpuIsa isa : {CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    RowDotParams all = x16_params(m, a.row(0), a.ab, tokens, 0, rows);
    std::vector<float> y(all.y_row_stride * size_t(tokens));
    all.y = y.data();
    row_dot_for(isa, kType)(all);
    for (int64_t t : {0, 35, 36, 39}) {
      RowDotParams one = x16_params(m, a.row(t), a.ab, 1, 0, rows);
      std::vector<float> y1(one.y_row_stride);
      one.y = y1.data();
      row_dot_for(isa, kType)(one);
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = size_t(t) * all.y_row_stride + size_t(r);
        ASSERT_EQ(y[i], y1[size_t(r)]) << "token " << t << ", row " << r;
        ASSERT_NEAR(y[i], ref[i], 1e-4 * std::fabs(ref[i]) + 1e-3) << "token " << t << ", row " << r;
      }
    }
  }
}

// The bytes' places: q8_0_x16_offset and the scales cover a block once,
// pack and unpack are inverse, and shapes the layout cannot hold are refused.
TEST(Q8_0X16, LayoutPlacesEveryByteOnce) {
  std::vector<int> seen(kQ8_0X16GroupBlock, 0);
  for (int r = 0; r < kX16Rows; ++r) {
    ++seen[size_t(2 * r)], ++seen[size_t(2 * r + 1)];
    for (int k = 0; k < kQK8_0; ++k) ++seen[q8_0_x16_offset(r, k)];
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "byte " << i;
  std::mt19937 rng(55);
  const Q8Matrix m = make_matrix(32, 96, rng);
  // row 21's value 7 of block 2 (group 1), stored + 128
  EXPECT_EQ(m.x16[16 * m.row_bytes + 2 * kQ8_0X16GroupBlock + q8_0_x16_offset(5, 7)],
            uint8_t(m.w[21 * m.row_bytes + 2 * 34 + 2 + 7] ^ 0x80));
  std::vector<uint8_t> back(m.w.size());
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t b = 0; b < 3; ++b) {
      uint8_t* dst[kMaxGroupRows];
      for (int r = 0; r < 16; ++r) dst[r] = back.data() + size_t(16 * g + r) * m.row_bytes + size_t(b) * 34;
      unpack_group_block(WeightLayout::kQ8_0X16, m.x16.data() + size_t(g) * 16 * m.row_bytes +
                                                     size_t(b) * kQ8_0X16GroupBlock, dst);
    }
  EXPECT_EQ(back, m.w);
  EXPECT_FALSE(layout_fits(WeightLayout::kQ8_0X16, kType, 24, 96));  // whole groups of 16
  EXPECT_FALSE(layout_fits(WeightLayout::kQ8_0X16, DType::kQ4_0, 16, 96));
  std::vector<uint8_t> w = m.w;
  EXPECT_THROW(repack_rows(WeightLayout::kQ8_0X16, kType, w.data(), 8, 96), Error);
  EXPECT_EQ(layout_from_name("q8_0_x16"), WeightLayout::kQ8_0X16);
}

}  // namespace
}  // namespace tandem::kernels
