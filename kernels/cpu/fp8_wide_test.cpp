// FP8 rowmajor rows below avx512bf16 (row_dot_x86_fp8_wide.cpp): calls
// whose activations fit the widening buffer give Fp8Tile's floats bit for
// bit, which the larger calls still take when they ask for gemm_order. Zeros, subnormals and NaN bytes,
// marked and unmarked, ragged columns and rows, and activations of 2^16
// and more (no 2^112 on the activations) included, gathered tokens and a row
// range too.
#include <gtest/gtest.h>

#include <algorithm>
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

// The levels' widening path itself (row_dot_x86_fp8_wide.cpp): false where
// a call does not fit its buffer.
namespace tandem::kernels::avx2 {
bool try_fp8_wide(const RowDotParams& p);
}
namespace tandem::kernels::avx512 {
bool try_fp8_wide(const RowDotParams& p);
}

namespace tandem::kernels {
namespace {

using testing::reversed_rows;
using testing::rowmajor_params;

// The widening buffer's floats (row_dot_x86_fp8_widen.h's kWideFloats).
constexpr int64_t kWideBuffer = 65536;

bool same_float(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; }

TEST(RowDot, Fp8WideCallsGiveTheTilesFloats) {
  std::mt19937 rng(97);
  const DType type = DType::kF8E4M3;
  int checked_levels = 0;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!supports(detect_cpu_features(), isa)) continue;
    ++checked_levels;
    bool (*const wide)(const RowDotParams&) = isa == CpuIsa::kAvx2 ? avx2::try_fp8_wide : avx512::try_fp8_wide;
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
      const size_t ab = row_dot_activation_bytes(type, cols);
      // |x| just under 2^16 (scaled by 2^112) and at 2^16 (not: it would overflow)
      for (float large : {0.0f, 65280.0f, 65536.0f}) {
        const int64_t most = 8;
        std::vector<float> x = testing::random_x(most * cols, rng);
        if (large != 0.0f) x[size_t(cols / 2)] = large;  // token 0
        std::vector<uint8_t> a(ab * size_t(most));
        convert_row_dot_activations(type, x.data(), size_t(cols), most, cols, a.data(), ab, isa);
        auto params = [&](int64_t tokens, std::vector<float>& y) {
          RowDotParams p = rowmajor_params(type, w.data(), size_t(cols), rows, cols, a.data(), ab, tokens, 0, rows);
          p.scales = scales.data();
          p.scale_row_stride = size_t(blocks);
          y.assign(p.y_row_stride * size_t(tokens), -7.0f);
          p.y = y.data();
          return p;
        };
        // Fp8Tile's floats: token by token through a call too large for the buffer
        // (the rows repeated, the token's row gathered each time)
        std::vector<float> tiles(size_t(rows + 1) * most);
        for (int64_t t = 0; t < most; ++t) {
          const int64_t big = kWideBuffer / cols + 1;
          std::vector<const uint8_t*> same(size_t(big), a.data() + size_t(t) * ab);
          std::vector<float> y;
          RowDotParams p = params(big, y);
          p.a_rows = same.data();
          p.gemm_order = true;  // FP8's tiles: the avx2 level takes larger calls as a GEMM otherwise
          ASSERT_FALSE(wide(p)) << "a call of " << big << " tokens took the widening buffer";
          row_dot_for(isa, type)(p);
          std::copy(y.begin(), y.begin() + (rows + 1), tiles.begin() + t * (rows + 1));
        }
        for (bool with_marks : {false, true})
          for (bool gather : {false, true})
            for (int64_t tokens : {1, 2, 3, 4, 5, 8}) {
              if (tokens * cols > kWideBuffer) continue;
              SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(cols) + " columns, " +
                           std::to_string(tokens) + " tokens" + (with_marks ? ", marked" : "") +
                           (gather ? ", gathered, rows 1.." + std::to_string(rows - 1) : "") +
                           ", |x| " + std::to_string(large));
              std::vector<float> y;
              RowDotParams p = params(tokens, y);
              p.fp8_marks = with_marks ? marks.data() : nullptr;
              const std::vector<const uint8_t*> reversed = reversed_rows(a, ab, tokens);
              if (gather) {
                p.a_rows = reversed.data();
                p.row_begin = 1;
                p.row_end = rows - 1;
              }
              row_dot_check(p);
              ASSERT_TRUE(wide(p));
              for (int64_t t = 0; t < tokens; ++t)
                for (int64_t r = 0; r < rows + 1; ++r) {
                  const int64_t src = gather ? tokens - 1 - t : t;
                  const float got = y[size_t(t * (rows + 1) + r)];
                  if (r < p.row_begin || r >= p.row_end) {
                    ASSERT_EQ(got, -7.0f) << "wrote row " << r;
                    continue;
                  }
                  const float want = tiles[size_t(src * (rows + 1) + r)];
                  ASSERT_TRUE(same_float(got, want)) << "token " << t << " row " << r << ": " << got << " vs " << want;
                  ASSERT_EQ(std::isnan(want), r % 11 == 0) << "token " << t << " row " << r;
                }
            }
      }
    }
  }
  if (checked_levels == 0) GTEST_SKIP() << "this cpu has neither avx2 nor avx512";
}

}  // namespace
}  // namespace tandem::kernels
