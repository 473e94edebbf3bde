// FP8 rowmajor rows below avx512bf16 (row_dot_x86_fp8_wide.cpp): calls
// whose activations fit the widening buffer give Fp8Tile's floats bit for
// bit, which the larger calls still take. Zeros, subnormals and NaN bytes,
// marked and unmarked, ragged columns and rows, and activations of 2^16
// and more (no 2^112 on the activations) included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"

namespace tandem::kernels {
namespace {

using testing::rowmajor_params;

constexpr int64_t kWideFloats = 32768;  // row_dot_x86_fp8_wide.cpp's buffer

bool same_float(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; }

TEST(RowDot, Fp8WideCallsGiveTheTilesFloats) {
  std::mt19937 rng(97);
  const DType type = DType::kF8E4M3;
  int checked_levels = 0;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    ++checked_levels;
    for (int64_t cols : {96, 300, 2048, 7168}) {
      const int64_t rows = 133;
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<uint8_t> w(size_t(rows * cols));
      for (auto& b : w) b = f32_to_fp8_e4m3(nd(rng) * 100.0f);
      // zeros and subnormals in every 7th row, a NaN byte (either sign) in every 11th
      for (int64_t r = 0; r < rows; r += 7) w[size_t(r * cols + (r * 37) % cols)] = uint8_t(0x80 | (r % 8));
      for (int64_t r = 0; r < rows; r += 11) w[size_t(r * cols + (r * 53) % cols)] = r % 22 ? 0x7F : 0xFF;
      std::vector<uint8_t> marks(size_t(rows) * fp8_marks_row_bytes(cols));
      fp8_mark_blocks(w.data(), size_t(cols), rows, cols, marks.data());
      const int64_t blocks = (cols + 127) / 128;
      std::vector<float> scales(size_t((rows + 127) / 128 * blocks));
      std::uniform_real_distribution<float> ud(0.001f, 0.1f);
      for (auto& v : scales) v = ud(rng);
      // enough tokens that the call does not fit the buffer: Fp8Tile's floats
      const int64_t many = kWideFloats / cols + 1;
      const size_t ab = row_dot_activation_bytes(type, cols);
      for (bool large_x : {false, true}) {
        std::vector<float> x = testing::random_x(many * cols, rng);
        if (large_x) x[size_t(cols / 2)] = 70000.0f;  // token 0
        std::vector<uint8_t> a(ab * size_t(many));
        convert_row_dot_activations(type, x.data(), size_t(cols), many, cols, a.data(), ab, isa);
        auto run = [&](int64_t tokens, bool with_marks) {
          RowDotParams p = rowmajor_params(type, w.data(), size_t(cols), rows, cols, a.data(), ab, tokens, 0, rows);
          p.scales = scales.data();
          p.scale_row_stride = size_t(blocks);
          p.fp8_marks = with_marks ? marks.data() : nullptr;
          std::vector<float> y(p.y_row_stride * size_t(tokens), -7.0f);
          p.y = y.data();
          row_dot_check(p);
          row_dot_for(isa, type)(p);
          return y;
        };
        const std::vector<float> tiles = run(many, false);
        const size_t stride = size_t(rows + 1);
        for (bool with_marks : {false, true}) {
          for (int64_t tokens : {1, 2, 3, 5}) {
            if (tokens * cols > kWideFloats) continue;
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(cols) + " columns, " +
                         std::to_string(tokens) + " tokens" + (with_marks ? ", marked" : "") +
                         (large_x ? ", |x| >= 2^16" : ""));
            const std::vector<float> y = run(tokens, with_marks);
            for (int64_t t = 0; t < tokens; ++t)
              for (int64_t r = 0; r < rows; ++r) {
                const float got = y[size_t(t) * stride + size_t(r)], want = tiles[size_t(t) * stride + size_t(r)];
                ASSERT_TRUE(same_float(got, want)) << "token " << t << " row " << r << ": " << got << " vs " << want;
                ASSERT_EQ(std::isnan(want), r % 11 == 0) << "token " << t << " row " << r;
              }
          }
        }
      }
    }
  }
  if (checked_levels == 0) GTEST_SKIP() << "this cpu has neither avx2 nor avx512";
}

}  // namespace
}  // namespace tandem::kernels
