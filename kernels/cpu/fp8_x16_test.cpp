// fp8_x16 (weight_layout.h): FP8 rows stored 16 at a time, each scale
// block's 2048 bytes in chunks of 4 columns. Its kernel (avx512bf16:
// row_dot_x86_fp8_x16.cpp; lower levels: the reference) agrees with the
// generic rowmajor one within FP8's bound at every level, for every byte
// (zeros, subnormals, NaN), every tile and pass, and gives a token the same
// floats in any batch and any cut of the rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
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

struct Fp8Matrix {
  int64_t rows, cols;
  std::vector<uint8_t> w, x16;
  std::vector<float> scales;
  size_t scale_stride;
};

// Random FP8 weights with zeros and subnormals in places, repacked.
Fp8Matrix make_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  Fp8Matrix m{rows, cols, std::vector<uint8_t>(size_t(rows * cols)), {}, {}, size_t(cols / 128) + 1};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& b : m.w) b = f32_to_fp8_e4m3(nd(rng) * 40.0f);
  for (int64_t r = 0; r < rows; ++r) {
    m.w[size_t(r * cols + (r * 37) % cols)] = uint8_t(r % 8);  // +0 and the subnormals
    m.w[size_t(r * cols + (r * 91 + 5) % cols)] = uint8_t(0x80 | (r % 8));  // -0 and negative ones
  }
  m.x16 = m.w;
  repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, m.x16.data(), rows, cols);
  m.scales.resize(m.scale_stride * size_t((rows + 127) / 128));
  std::uniform_real_distribution<float> ud(1e-4f, 3e-3f);
  for (auto& v : m.scales) v = ud(rng);
  return m;
}

RowDotParams x16_params(const Fp8Matrix& m, const uint8_t* a, size_t ab, int64_t tokens, int64_t r0, int64_t r1) {
  RowDotParams p = rowmajor_params(DType::kF8E4M3, m.x16.data(), size_t(m.cols), m.rows, m.cols, a, ab, tokens, r0, r1);
  p.scales = m.scales.data();
  p.scale_row_stride = m.scale_stride;
  p.layout = WeightLayout::kFp8X16;
  return p;
}

double abs_dot(const Fp8Matrix& m, const uint8_t* a, int64_t r) {
  double s = 0;
  for (int64_t c = 0; c < m.cols; ++c)
    s += std::fabs(double(fp8_e4m3_to_f32(m.w[size_t(r * m.cols + c)])) *
                   m.scales[size_t(r / 128) * m.scale_stride + size_t(c / 128)] *
                   bf16_to_f32(load_unaligned<uint16_t>(a + 2 * c)));
  return s;
}

// Each scale block's sum rounds after every pair of products (128 of
// them), and the blocks' scaled sums add one rounding each.
TEST(Fp8X16, RowDotsAgreeWithGenericAtEveryLevel) {
  std::mt19937 rng(43);
  const DType type = DType::kF8E4M3;
  double worst = 0;
  for (int64_t cols : {128, 640, 2048, 7168}) {
    for (int64_t rows : {16, 80, 176}) {
      if (cols == 7168 && rows > 80) continue;
      const Fp8Matrix m = make_matrix(rows, cols, rng);
      const double bound = double(130 + cols / 128) * 0x1p-24;
      for (int64_t tokens : cols == 7168 ? std::vector<int64_t>{1, 10} : std::vector<int64_t>{1, 2, 3, 9, 10, 19}) {
        const Activations a = random_activations(type, tokens, cols, rng);
        const std::vector<const uint8_t*> gathered = reversed_rows(a.bytes, a.ab, tokens);
        const auto abs_dot_of = [&](int64_t t, int64_t r) { return abs_dot(m, a.row(t), r); };
        // the whole matrix, and a range that skips a group at each end
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {16, rows - 16}}) {
          if (r1 <= r0) continue;
          RowDotParams pr = rowmajor_params(type, m.w.data(), size_t(cols), rows, cols, a.row(0), a.ab, tokens, r0, r1);
          pr.scales = m.scales.data();
          pr.scale_row_stride = m.scale_stride;
          std::vector<float> ref(pr.y_row_stride * size_t(tokens), -7.0f);
          pr.y = ref.data();
          generic::find(type)(pr);
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
                row_dot_for(isa, type)(p);
                ASSERT_TRUE(agrees_within(p, y, ref, gather, bound, abs_dot_of, worst));
              }
            }
          }
        }
      }
    }
  }
  std::printf("  fp8_x16: worst |x16 - generic| / sum|w*x| = %.2e\n", worst);
}

// One token's floats do not depend on the tokens beside it (1..19 in a
// call: every tile and pass) nor on where a call's rows start (cut at 48,
// not a multiple of the 4-group tile, and 112).
TEST(Fp8X16, TokensGetTheSameFloatsInAnyBatchAndCut) {
  std::mt19937 rng(44);
  const int64_t rows = 208, cols = 2304, tokens = 19;
  const Fp8Matrix m = make_matrix(rows, cols, rng);
  const Activations a = random_activations(DType::kF8E4M3, tokens, cols, rng);
  for (CpuIsa isa : {CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    EXPECT_TRUE(same_floats_in_any_batch_and_cut(
        isa, rows, tokens, {1, 2, 3, 8, 10}, {{0, 48}, {48, 112}, {112, rows}},
        [&](int64_t t0, int64_t n, int64_t r0, int64_t r1) { return x16_params(m, a.row(t0), a.ab, n, r0, r1); }));
  }
}

// A NaN weight byte (0x7F, 0xFF) makes its row's outputs NaN and no other's.
TEST(Fp8X16, NanBytesReachOnlyTheirRows) {
  std::mt19937 rng(45);
  const DType type = DType::kF8E4M3;
  const int64_t rows = 64, cols = 256;
  Fp8Matrix m = make_matrix(rows, cols, rng);
  m.w[size_t(5 * cols + 130)] = 0x7F;
  m.w[size_t(38 * cols + 3)] = 0xFF;
  m.x16 = m.w;
  repack_rows(WeightLayout::kFp8X16, type, m.x16.data(), rows, cols);
  for (int64_t tokens : {1, 4}) {
    const Activations a = random_activations(type, tokens, cols, rng);
    for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
      if (!supports(detect_cpu_features(), isa)) continue;
      RowDotParams p = x16_params(m, a.row(0), a.ab, tokens, 0, rows);
      std::vector<float> y(p.y_row_stride * size_t(tokens));
      p.y = y.data();
      row_dot_for(isa, type)(p);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < rows; ++r)
          EXPECT_EQ(std::isnan(y[size_t(t) * p.y_row_stride + size_t(r)]), r == 5 || r == 38)
              << isa_name(isa) << " row " << r << " token " << t;
    }
  }
}

// The bytes' places: fp8_x16_offset is one-to-one over a block, pack and
// unpack are inverse, and shapes the layout cannot hold are refused.
TEST(Fp8X16, LayoutPlacesEveryByteOnce) {
  std::vector<int> seen(kFp8X16GroupBlock, 0);
  for (int r = 0; r < kFp8X16Rows; ++r)
    for (int c = 0; c < int(kFp8X16Cols); ++c) ++seen[fp8_x16_offset(r, c)];
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "byte " << i;
  EXPECT_EQ(fp8_x16_offset(5, 6), 64 + 16 + 8 + 2);  // row 4 + 1, columns 4 + 2
  std::mt19937 rng(46);
  const int64_t rows = 32, cols = 384;
  std::vector<uint8_t> w(size_t(rows * cols));
  for (auto& b : w) b = uint8_t(rng());
  std::vector<uint8_t> x16 = w;
  repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, x16.data(), rows, cols);
  // row 21, column 256 + 7: group 1, block 2
  EXPECT_EQ(x16[size_t(16 * cols) + 2 * kFp8X16GroupBlock + fp8_x16_offset(5, 7)], w[size_t(21 * cols + 263)]);
  std::vector<uint8_t> back(w.size());
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t b = 0; b < cols / 128; ++b) {
      uint8_t* dst[kMaxGroupRows];
      for (int r = 0; r < 16; ++r) dst[r] = back.data() + size_t((16 * g + r) * cols + 128 * b);
      unpack_group_block(WeightLayout::kFp8X16, x16.data() + size_t(g * 16 * cols) + size_t(b) * kFp8X16GroupBlock,
                         dst);
    }
  EXPECT_EQ(back, w);
  EXPECT_TRUE(layout_fits(WeightLayout::kFp8X16, DType::kF8E4M3, 16, 128));
  EXPECT_FALSE(layout_fits(WeightLayout::kFp8X16, DType::kF8E4M3, 24, 128));  // whole groups of 16
  EXPECT_FALSE(layout_fits(WeightLayout::kFp8X16, DType::kF8E4M3, 16, 200));  // whole scale blocks
  EXPECT_FALSE(layout_fits(WeightLayout::kFp8X16, DType::kBF16, 16, 128));
  EXPECT_THROW(repack_rows(WeightLayout::kFp8X16, DType::kF8E4M3, w.data(), 8, cols), Error);
  EXPECT_EQ(layout_from_name("fp8_x16"), WeightLayout::kFp8X16);
}

}  // namespace
}  // namespace tandem::kernels
