// The avx2 level's GEMM for FP8 calls of many tokens (row_dot_x86_panel.cpp)
// against the generic level on ragged shapes (rows that leave a panel
// part-filled, columns that end mid-vector, mid-block and mid-chunk, token
// counts for every tile shape and more than one chunk of 64), each token's
// floats the same in any call that takes it, the special bytes, and the
// calls it leaves to the tiles.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"

namespace tandem::kernels::avx2 {
bool try_panel(const RowDotParams& p);
}

namespace tandem::kernels {
namespace {

struct Case {
  DType type = DType::kF32;
  int64_t rows = 0, cols = 0, tokens = 0;
  size_t w_stride = 0, a_stride = 0, scale_stride = 0;
  std::vector<uint8_t> w, a;
  std::vector<float> scales, w_deq, a_deq;
};

// Random weights (with junk between rows) and activations; `large` puts one
// activation of 2^16 into token 0 (FP8 then leaves its activations unscaled).
Case make_case(DType t, int64_t rows, int64_t cols, int64_t tokens, std::mt19937& rng, float large = 0) {
  Case c;
  c.type = t;
  c.rows = rows;
  c.cols = cols;
  c.tokens = tokens;
  c.w_stride = size_t(*bytes_for(t, uint64_t(cols))) + 5;
  c.a_stride = row_dot_activation_bytes(t, cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  c.w.assign(c.w_stride * size_t(rows), 0x5A);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng) * (t == DType::kF8E4M3 ? 60.0f : 0.05f);
    if (t == DType::kF8E4M3 && cols > 3) row[1] = 0.004f, row[2] = -0.0011f;  // subnormals
    quantize_generic(t, row.data(), c.w.data() + size_t(r) * c.w_stride, size_t(cols));
  }
  if (t == DType::kF8E4M3) {
    c.scale_stride = size_t((cols + 127) / 128) + 2;
    c.scales.resize(c.scale_stride * size_t((rows + 127) / 128));
    std::uniform_real_distribution<float> sd(1e-4f, 3e-3f);
    for (auto& s : c.scales) s = sd(rng);
  }
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (auto& v : x) v = nd(rng);
  if (large != 0) x[size_t(cols / 2)] = large;
  c.a.assign(c.a_stride * size_t(tokens), 0);
  convert_row_dot_activations(t, x.data(), size_t(cols), tokens, cols, c.a.data(), c.a_stride);
  return c;
}

// Dequantised weights (FP8: times their scales) and activations, for sum|w*x|.
void dequantise(Case& c) {
  c.w_deq.resize(size_t(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    dequantize_generic(c.type, c.w.data() + size_t(r) * c.w_stride, c.w_deq.data() + r * c.cols, size_t(c.cols));
    if (c.type == DType::kF8E4M3)
      for (int64_t k = 0; k < c.cols; ++k)
        c.w_deq[size_t(r * c.cols + k)] *= c.scales[size_t(r / 128) * c.scale_stride + size_t(k / 128)];
  }
  c.a_deq.resize(size_t(c.tokens * c.cols));
  for (int64_t t = 0; t < c.tokens; ++t)
    dequantize_generic(row_dot_activation_type(c.type), c.a.data() + size_t(t) * c.a_stride,
                       c.a_deq.data() + t * c.cols, size_t(c.cols));
}

// Rows [r0, r1) of c against its first `tokens` tokens, into y (one spare row a token).
RowDotParams params(const Case& c, std::vector<float>& y, int64_t r0, int64_t r1, int64_t tokens) {
  RowDotParams p = testing::rowmajor_params(c.type, c.w.data(), c.w_stride, c.rows, c.cols, c.a.data(), c.a_stride,
                                            tokens, r0, r1);
  p.scales = c.scales.empty() ? nullptr : c.scales.data();
  p.scale_row_stride = c.scale_stride;
  y.assign(p.y_row_stride * size_t(tokens), -7.0f);
  p.y = y.data();
  return p;
}

bool have_avx2() { return supports(detect_cpu_features(), CpuIsa::kAvx2); }

// Each dot sums 128 columns in one f32 lane, then its blocks (and chunks)
// one after another; the generic level sums in its own order.
double bound(int64_t cols) { return double(130 + cols / 128 * 2) * 0x1p-24; }

// y from the panel against the generic level's: rows outside [r0, r1)
// untouched, NaN where `nan_row` (or the reference) says, the rest within
// bound() of sum|w*x|.
void expect_agrees(const Case& c, const RowDotParams& p, const std::vector<float>& y, const std::vector<float>& ref,
                   int64_t nan_row = -1) {
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int64_t r = 0; r < int64_t(p.y_row_stride); ++r) {
      const size_t i = size_t(t) * p.y_row_stride + size_t(r);
      if (r < p.row_begin || r >= p.row_end) {
        ASSERT_EQ(y[i], -7.0f) << "wrote row " << r << " token " << t;
        continue;
      }
      if (r == nan_row || std::isnan(ref[i])) {
        ASSERT_TRUE(std::isnan(y[i]) && std::isnan(ref[i])) << "row " << r << " token " << t << ": " << y[i];
        continue;
      }
      double s = 0;
      for (int64_t k = 0; k < c.cols; ++k)
        s += std::fabs(double(c.w_deq[size_t(r * c.cols + k)]) * c.a_deq[size_t(t * c.cols + k)]);
      ASSERT_LE(std::fabs(double(y[i]) - ref[i]), bound(c.cols) * s + 1e-30)
          << "row " << r << " token " << t << ": " << y[i] << " vs " << ref[i];
    }
}

TEST(Panel, AgreesWithGeneric) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu has no avx2";
  std::mt19937 rng(4242);
  for (int64_t cols : {5, 200, 1100})
    for (int64_t rows : {1, 13, 40})
      for (int64_t tokens : {15, 16, 19, 27, 33, 45, 70}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + ", " + std::to_string(tokens) + " tokens");
        Case c = make_case(DType::kF8E4M3, rows, cols, tokens, rng);
        dequantise(c);
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {rows / 3, rows - rows / 4}}) {
          std::vector<float> y, ref;
          const RowDotParams p = params(c, y, r0, r1, tokens), pr = params(c, ref, r0, r1, tokens);
          row_dot_check(p);
          ASSERT_TRUE(avx2::try_panel(p));
          generic::find(DType::kF8E4M3)(pr);
          expect_agrees(c, p, y, ref);
        }
      }
}

// FP8 from 8 tokens where its activations do not fit the widening buffer
// (65536 floats), at the level's entry point too.
TEST(Panel, TakesFp8FromEightTokensOfLongRows) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu has no avx2";
  std::mt19937 rng(4343);
  for (int64_t tokens : {8, 9, 12}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    Case c = make_case(DType::kF8E4M3, 30, 8448, tokens, rng);
    dequantise(c);
    std::vector<float> y, ref;
    const RowDotParams p = params(c, y, 2, 29, tokens), pr = params(c, ref, 2, 29, tokens);
    row_dot_for(CpuIsa::kAvx2, DType::kF8E4M3)(p);
    generic::find(DType::kF8E4M3)(pr);
    expect_agrees(c, p, y, ref);
    std::vector<float> y2;
    ASSERT_TRUE(avx2::try_panel(params(c, y2, 2, 29, tokens)));
    ASSERT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)));
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A token's dot is the same float in every call that takes it: 70 tokens
// (chunks of 64 and 6: tiles of 3, 3 and 2 token vectors, and of 1),
// gathered 45 in another order (3 and 3) and 24 (3), each over other rows,
// and 24 of which one holds an activation of 2^16 (the activations then
// unscaled, the weights scaled instead).
TEST(Panel, SumsEachTokenOneWay) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu has no avx2";
  std::mt19937 rng(4444);
  const Case c = make_case(DType::kF8E4M3, 29, 700, 70, rng);
  std::vector<float> all;
  ASSERT_TRUE(avx2::try_panel(params(c, all, 0, 29, 70)));
  for (auto [n, r0, r1] : {std::tuple<int64_t, int64_t, int64_t>{45, 5, 29}, {24, 1, 14}}) {
    std::vector<const uint8_t*> rows;
    auto source = [](int64_t k) { return (69 - 2 * k + 140) % 70; };  // every other token from the last
    for (int64_t k = 0; k < n; ++k) rows.push_back(c.a.data() + size_t(source(k)) * c.a_stride);
    std::vector<float> y;
    RowDotParams p = params(c, y, r0, r1, n);
    p.a_rows = rows.data();
    ASSERT_TRUE(avx2::try_panel(p));
    for (int64_t k = 0; k < n; ++k)
      for (int64_t r = r0; r < r1; ++r) {
        const float got = y[size_t(k) * p.y_row_stride + size_t(r)];
        const float want = all[size_t(source(k)) * p.y_row_stride + size_t(r)];
        ASSERT_TRUE(same_bits(got, want)) << n << " tokens, token " << k << " row " << r << ": " << got << " vs "
                                          << want;
      }
  }
  // Token 0's row with one activation of 2^16 (bf16 0x4780), then tokens 1..23.
  std::vector<uint8_t> large(c.a.begin(), c.a.begin() + std::ptrdiff_t(c.a_stride));
  large[2 * 350] = 0x80, large[2 * 350 + 1] = 0x47;
  std::vector<const uint8_t*> rows = {large.data()};
  for (int64_t k = 1; k < 24; ++k) rows.push_back(c.a.data() + size_t(k) * c.a_stride);
  std::vector<float> y;
  RowDotParams p = params(c, y, 0, 29, 24);
  p.a_rows = rows.data();
  ASSERT_TRUE(avx2::try_panel(p));
  for (int64_t k = 1; k < 24; ++k)
    for (int64_t r = 0; r < 29; ++r) {
      const size_t i = size_t(k) * p.y_row_stride + size_t(r);
      ASSERT_TRUE(same_bits(y[i], all[i])) << "unscaled, token " << k << " row " << r << ": " << y[i] << " vs "
                                           << all[i];
    }
}

// FP8 zeros, subnormals and NaN bytes (either sign), marked and not, with
// activations scaled by 2^112 and (one of 2^16) not, and a row of
// subnormals only: NaN rows stay NaN, the rest agree with the generic level,
// and the marks do not change a float.
TEST(Panel, KeepsFp8SpecialBytes) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu has no avx2";
  std::mt19937 rng(4545);
  const uint8_t special[] = {0x00, 0x80, 0x01, 0x87, 0x7F, 0xFF};
  for (float large : {0.0f, 65536.0f}) {
    for (size_t k = 0; k < sizeof special; ++k) {
      SCOPED_TRACE("byte " + std::to_string(special[k]) + ", |x| " + std::to_string(large));
      Case c = make_case(DType::kF8E4M3, 26, 384, 20, rng, large);
      const int64_t row = int64_t(3 + 4 * k), col = 128 + int64_t(k * 37 % 256);
      c.w[size_t(row) * c.w_stride + size_t(col)] = special[k];
      // and a row of subnormals only (+-1..7 * 2^-9), which a widening that
      // flushed them would give as zero
      for (int64_t j = 0; j < c.cols; ++j) c.w[size_t(j)] = uint8_t((j % 2 ? 0x80 : 0) | (1 + j % 7));
      dequantise(c);
      std::vector<uint8_t> marks(fp8_marks_row_bytes(c.cols) * size_t(c.rows));
      fp8_mark_blocks(c.w.data(), c.w_stride, c.rows, c.cols, marks.data());
      std::vector<float> ref, unmarked, marked;
      generic::find(DType::kF8E4M3)(params(c, ref, 0, 26, 20));
      const RowDotParams pu = params(c, unmarked, 0, 26, 20);
      ASSERT_TRUE(avx2::try_panel(pu));
      RowDotParams pm = params(c, marked, 0, 26, 20);
      pm.fp8_marks = marks.data();
      ASSERT_TRUE(avx2::try_panel(pm));
      const bool nan = (special[k] & 0x7F) == 0x7F;
      expect_agrees(c, pu, unmarked, ref, nan ? row : -1);
      for (size_t i = 0; i < marked.size(); ++i)
        ASSERT_TRUE(same_bits(marked[i], unmarked[i]) || (std::isnan(marked[i]) && std::isnan(unmarked[i]))) << i;
    }
  }
}

// Calls the panel leaves to the tiles: other types, fewer than 15 tokens (8
// where the activations do not fit the widening buffer), other layouts,
// gemm_order (the tiles' order) and DAZ (subnormal weights would read as
// zero).
TEST(Panel, LeavesCallsToTheTiles) {
  if (!have_avx2()) GTEST_SKIP() << "this cpu has no avx2";
  std::mt19937 rng(4646);
  std::vector<float> y;
  for (DType other : {DType::kF32, DType::kBF16}) {
    const Case b = make_case(other, 32, 256, 64, rng);
    EXPECT_FALSE(avx2::try_panel(params(b, y, 0, 32, 64))) << name(other);
  }
  const Case f = make_case(DType::kF8E4M3, 16, 7168, 16, rng);
  EXPECT_TRUE(avx2::try_panel(params(f, y, 0, 16, 10)));   // 10 x 7168 do not fit the buffer
  EXPECT_FALSE(avx2::try_panel(params(f, y, 0, 16, 9)));   // 9 x 7168 fit it
  const Case h = make_case(DType::kF8E4M3, 16, 10240, 8, rng);
  EXPECT_TRUE(avx2::try_panel(params(h, y, 0, 16, 8)));
  EXPECT_FALSE(avx2::try_panel(params(h, y, 0, 16, 7)));  // 7 x 10240 do not fit the buffer either
  const Case g = make_case(DType::kF8E4M3, 16, 1024, 16, rng);
  EXPECT_FALSE(avx2::try_panel(params(g, y, 0, 16, 14)));  // 14 x 1024 fit the buffer
  EXPECT_TRUE(avx2::try_panel(params(g, y, 0, 16, 15)));
  RowDotParams x16 = params(g, y, 0, 16, 16);
  x16.layout = WeightLayout::kFp8X16;
  EXPECT_FALSE(avx2::try_panel(x16));
  RowDotParams ordered = params(g, y, 0, 16, 16);
  ordered.gemm_order = true;
  EXPECT_FALSE(avx2::try_panel(ordered));
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x40);  // DAZ
  const bool under_daz = avx2::try_panel(params(g, y, 0, 16, 16));
  _mm_setcsr(csr);
  EXPECT_FALSE(under_daz);
}

}  // namespace
}  // namespace tandem::kernels
