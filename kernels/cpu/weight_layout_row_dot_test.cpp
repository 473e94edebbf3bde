// The row dots over the repacked layouts (weight_layout.h): q4_k_x4,
// q5_k_x4, q6_k_x4, q8_0_x4 and bf16_x16 equal the rowmajor generic rows bit
// for bit at every level (the same exact integer sums and the same fmas;
// bf16_x16's several-token outer product and q5_k_x4's and q6_k_x4's sums
// per super-block within stated bounds, the same at every level from avx2
// up), on ragged row ranges, token counts and gathered activations, and the
// k-quant tiles at their values' limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels {
namespace {

using testing::random_rows;
using testing::random_x;
using testing::reversed_rows;
using testing::rowmajor_params;

// y against ref (outputs of `tokens` tokens, y_row_stride apart; y's token t
// is ref's tokens - 1 - t when gathered): rows outside [r0, r1) untouched,
// the others equal, or (exact false) within terms * 2^-24 * sum|w*x| for the
// dequantised weights wd (rows x cols) and activations xd; worst: the
// largest |y - ref| / sum|w*x| seen.
void expect_outputs(const std::vector<float>& y, const std::vector<float>& ref, size_t y_row_stride, int64_t rows,
                    int64_t cols, int64_t tokens, int64_t r0, int64_t r1, bool gather, bool exact, double terms,
                    const std::vector<float>& wd, const std::vector<float>& xd, double& worst) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t tr = gather ? tokens - 1 - t : t;  // y row t holds token tr
    for (int64_t r = 0; r < rows + 1; ++r) {
      const float got = y[size_t(t) * y_row_stride + size_t(r)];
      if (r < r0 || r >= r1) {
        ASSERT_EQ(got, -7.0f) << "wrote outside its rows: row " << r << " token " << t;
        continue;
      }
      const float want = ref[size_t(tr) * y_row_stride + size_t(r)];
      if (exact) {
        ASSERT_EQ(got, want) << "row " << r << " token " << t;
        continue;
      }
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += std::fabs(double(wd[size_t(r * cols + c)]) * xd[size_t(tr * cols + c)]);
      const double d = std::fabs(double(got) - want);
      ASSERT_LE(d, terms * 0x1p-24 * s) << "row " << r << " token " << t;
      if (s > 0) worst = std::max(worst, d / s);
    }
  }
}

// Every level over the x4 layouts against the generic level over rowmajor:
// bit for bit, but for Q8_0 at the amx level, whose tiles (4 or more tokens,
// rows in 16s) and x4 kernel add each block's exact integer dot with one
// fma where ggml adds 8 lanes' (row_dot_amx_q8.cpp, row_dot_x86_q8_0_x4.cpp):
// within 2 * (blocks + 2) * 2^-24 * sum|w*x|; and for q5_k_x4 and q6_k_x4
// from avx2 up, which add each super-block's (q6_k_x4: half super-block's)
// exact sums with one fma where ggml adds 8 lanes': within 8 * (super-blocks
// + 2) * 2^-24 * sum|w*x| (q5_k_x4's sums and mins may each be several
// times the dot they differ by), and the same floats at every one of those
// levels (the avx2 tiles make the 512-bit tiles' integer sums and fmas). Q8_0 also takes 292 rows (a
// chunk of 16 tiles, one more tile and rows left over), 96 and 2336 columns
// (3 and 73 blocks: one step and a half pair, two steps) and 16, 17 and 20
// tokens (passes of 16 and 1 or 4).
TEST(WeightLayout, X4RowDotsEqualRowmajorAtEveryLevel) {
  std::mt19937 rng(17);
  double worst = 0;
  double worst5 = 0;
  double worst6 = 0;
  for (DType type : {DType::kQ4_K, DType::kQ8_0, DType::kQ5_K, DType::kQ6_K}) {
  const bool q8 = type == DType::kQ8_0, q6 = type == DType::kQ6_K, q5 = type == DType::kQ5_K || q6;
  const WeightLayout layout = repacked_layout(type);
  std::vector<int64_t> col_list = {256, 768, 2048}, row_list = {4, 8, 12, 36},
                       token_list = {1, 2, 3, 4, 5, 7, 9};
  if (q8) {
    col_list.insert(col_list.end(), {96, 2336});
    row_list.push_back(292);
    token_list.insert(token_list.end(), {16, 17, 20});
  }
  for (int64_t cols : col_list) {
    for (int64_t rows : row_list) {
      const std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
      std::vector<uint8_t> x4 = w;
      repack_rows(layout, type, x4.data(), rows, cols);
      std::vector<float> wd(size_t(rows * cols));
      dequantize_generic(type, w.data(), wd.data(), wd.size());
      const size_t row_bytes = w.size() / size_t(rows), ab = row_dot_activation_bytes(type, cols);
      for (int64_t tokens : token_list) {
        const std::vector<float> x = random_x(tokens * cols, rng);
        std::vector<uint8_t> a(ab * size_t(tokens)), ap(a.size());
        convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.data(), ab);
        convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, ap.data(), ab,
                                    best_isa(detect_cpu_features()), layout);
        std::vector<float> xd(size_t(tokens * cols));
        const DType act = row_dot_activation_type(type);
        for (int64_t t = 0; t < tokens; ++t)
          dequantize_generic(act, a.data() + size_t(t) * ab, xd.data() + t * cols, size_t(cols));
        const std::vector<const uint8_t*> gathered = reversed_rows(ap, ab, tokens);
        const int64_t r0 = rows > 8 ? 4 : 0, r1 = rows > 8 ? rows - 4 : rows;
        RowDotParams p = rowmajor_params(type, w.data(), row_bytes, rows, cols, a.data(), ab, tokens, r0, r1);
        std::vector<float> ref(p.y_row_stride * size_t(tokens), -7.0f);
        p.y = ref.data();
        row_dot_check(p);
        generic::find(type)(p);
        std::vector<float> x4_floats[2];  // q5_k_x4 and q6_k_x4's from avx2 up, by gather
        for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
          if (!supports(detect_cpu_features(), isa)) continue;
          const bool exact = !(q8 && isa == CpuIsa::kAmx) && !(q5 && isa >= CpuIsa::kAvx2);
          for (bool gather : {false, true}) {
            SCOPED_TRACE(std::string(name(type)) + " " + std::string(isa_name(isa)) + " " + std::to_string(rows) +
                         "x" + std::to_string(cols) +
                         ", " + std::to_string(tokens) + " tokens" + (gather ? ", gathered" : ""));
            RowDotParams q = p;
            q.w = x4.data();
            q.layout = layout;
            q.a = ap.data();
            q.a_rows = gather ? gathered.data() : nullptr;
            std::vector<float> y(ref.size(), -7.0f);
            q.y = y.data();
            row_dot_check(q);
            for (CpuPrefetch pf : {CpuPrefetch::kSoftware, CpuPrefetch::kHardware}) {  // the same floats
              SCOPED_TRACE(std::string(prefetch_name(pf)) + " prefetch");
              std::fill(y.begin(), y.end(), -7.0f);
              q.prefetch = pf;
              row_dot_for(isa, type)(q);
              const double terms = q5 ? 8.0 * double(cols / kQK_K + 2) : 2.0 * double(cols / kQK8_0 + 2);
              ASSERT_NO_FATAL_FAILURE(expect_outputs(y, ref, p.y_row_stride, rows, cols, tokens, r0, r1, gather,
                                                     exact, terms, wd, xd, q6 ? worst6 : q5 ? worst5 : worst));
              if (q5 && isa >= CpuIsa::kAvx2) {  // one set of floats from avx2 up
                if (x4_floats[gather].empty())
                  x4_floats[gather] = y;
                else
                  ASSERT_EQ(y, x4_floats[gather]);
              }
            }
          }
        }
      }
    }
  }
  }
  std::printf("  q8_0_x4 at amx: worst |amx - generic| / sum|w*x| = %.2e\n", worst);
  std::printf("  q5_k_x4 from avx2: worst |x4 - generic| / sum|w*x| = %.2e\n", worst5);
  std::printf("  q6_k_x4 from avx2: worst |x4 - generic| / sum|w*x| = %.2e\n", worst6);
}

// The k-quant x4 tiles' int16 sums at their limits: every weight at its
// largest value (Q4_K 15, Q5_K 31, Q6_K 63), the largest scales, and every
// activation at -127 (Q8_K of a constant row). The avx2 tiles add 8 (Q4_K),
// 4 (Q5_K) and 2 (Q6_K) steps' vpmaddubsw pairs in int16 before widening:
// 30720, 31744 and 32256 of 32767; one step more would saturate. Every level
// agrees with the exact dot within X4RowDots's bound, at 1 to 5 tokens
// (pairs and single tokens).
TEST(WeightLayout, KQuantX4TilesTakeTheLargestValues) {
  constexpr int64_t rows = 8, cols = 512;
  for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const size_t row_bytes = *bytes_for(type, uint64_t(cols));
    std::vector<uint8_t> w(row_bytes * rows, 0xFF);  // every value and (Q4_K, Q5_K) scale and min at its top
    const size_t block = *bytes_for(type, uint64_t(kQK_K));
    for (size_t b = 0; b < w.size() / block; ++b) {
      uint8_t* blk = w.data() + b * block;
      const uint16_t d = f32_to_fp16(b % 2 ? 0.5f : 1.0f);
      if (type == DType::kQ6_K) {
        std::memset(blk + offsetof(BlockQ6_K, scales), b % 3 ? 127 : 0x80, 16);  // +127 or -128
        std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
      } else {
        std::memcpy(blk, &d, 2);  // d; dmin stays 0xFFFF (NaN) unless set
        const uint16_t dmin = f32_to_fp16(0.25f);
        std::memcpy(blk + 2, &dmin, 2);
      }
    }
    const WeightLayout layout = repacked_layout(type);
    std::vector<uint8_t> x4 = w;
    repack_rows(layout, type, x4.data(), rows, cols);
    std::vector<float> wd(size_t(rows * cols));
    dequantize_generic(type, w.data(), wd.data(), wd.size());
    for (int64_t tokens = 1; tokens <= 5; ++tokens) {
      const std::vector<float> x(size_t(tokens * cols), 1.0f);
      const size_t ab = row_dot_activation_bytes(type, cols);
      std::vector<uint8_t> ap(ab * size_t(tokens));
      convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, ap.data(), ab,
                                  best_isa(detect_cpu_features()), layout);
      std::vector<float> xd(static_cast<size_t>(cols));
      q4_k_x4_unpermute_activations(ap.data(), cols);
      dequantize_generic(row_dot_activation_type(type), ap.data(), xd.data(), size_t(cols));
      q4_k_x4_permute_activations(ap.data(), cols);
      ASSERT_EQ(xd[0], xd[size_t(cols) - 1]);
      ASSERT_EQ(reinterpret_cast<const BlockQ8_K*>(ap.data())->qs[0], -127);
      for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
        if (!supports(detect_cpu_features(), isa)) continue;
        SCOPED_TRACE(std::string(name(type)) + " " + std::string(isa_name(isa)) + ", " + std::to_string(tokens) +
                     " tokens");
        RowDotParams q = rowmajor_params(type, x4.data(), row_bytes, rows, cols, ap.data(), ab, tokens, 0, rows);
        q.layout = layout;
        std::vector<float> y(q.y_row_stride * size_t(tokens), -7.0f);
        q.y = y.data();
        row_dot_check(q);
        row_dot_for(isa, type)(q);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            double dot = 0, abs_dot = 0;
            for (int64_t c = 0; c < cols; ++c) {
              dot += double(wd[size_t(r * cols + c)]) * xd[size_t(c)];
              abs_dot += std::fabs(double(wd[size_t(r * cols + c)]) * xd[size_t(c)]);
            }
            ASSERT_GT(abs_dot, 0.0);
            ASSERT_LE(std::fabs(y[size_t(t) * q.y_row_stride + size_t(r)] - dot),
                      8.0 * double(cols / kQK_K + 2) * 0x1p-24 * abs_dot)
                << "row " << r << " token " << t;
          }
      }
    }
  }
}

// A token's Q8_0 outputs (q8_0_x4) are the same floats alone and in any
// batch, at every level: one token's loop, the tiles of 2 to 4 tokens, and
// at the amx level its tiles of 4 to 8 (two blocks a product) and 9 to 16
// tokens, and the rows and tokens they leave to the x4 kernel. The engine relies on it: a
// sequence replayed after a worker's loss, or run beside others, must get
// the tokens it got alone (docs/process-graph.md).
TEST(WeightLayout, Q8_0X4TokensGetTheSameFloatsInAnyBatch) {
  std::mt19937 rng(31);
  const DType type = DType::kQ8_0;
  for (int64_t cols : {96, 800, 2336}) {
    const int64_t rows = 292;
    std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
    repack_rows(WeightLayout::kQ8_0X4, type, w.data(), rows, cols);
    const size_t row_bytes = w.size() / size_t(rows), ab = row_dot_activation_bytes(type, cols);
    const int64_t most = 20;
    const std::vector<float> x = random_x(most * cols, rng);
    std::vector<uint8_t> a(ab * size_t(most));
    convert_row_dot_activations(type, x.data(), size_t(cols), most, cols, a.data(), ab,
                                best_isa(detect_cpu_features()), WeightLayout::kQ8_0X4);
    for (int level = 0; level < kCpuIsaCount; ++level) {
      const CpuIsa isa = CpuIsa(level);
      if (!supports(detect_cpu_features(), isa)) continue;
      auto run = [&](int64_t t0, int64_t tokens, bool gather) {
        RowDotParams p = rowmajor_params(type, w.data(), row_bytes, rows, cols, a.data() + size_t(t0) * ab, ab,
                                         tokens, 4, rows - 8);
        p.layout = WeightLayout::kQ8_0X4;
        std::vector<const uint8_t*> ptrs;
        for (int64_t t = 0; t < tokens; ++t) ptrs.push_back(a.data() + size_t(t0 + t) * ab);
        if (gather) p.a_rows = ptrs.data();
        std::vector<float> y(p.y_row_stride * size_t(tokens), -7.0f);
        p.y = y.data();
        row_dot_check(p);
        row_dot_for(isa, type)(p);
        return y;
      };
      std::vector<std::vector<float>> alone;
      for (int64_t t = 0; t < most; ++t) alone.push_back(run(t, 1, false));
      for (int64_t tokens : {2, 3, 4, 5, 8, 9, 16, 17, 20}) {
        for (bool gather : {false, true}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(cols) + " columns, " +
                       std::to_string(tokens) + " tokens" + (gather ? ", gathered" : ""));
          const std::vector<float> y = run(0, tokens, gather);
          const size_t stride = y.size() / size_t(tokens);
          for (int64_t t = 0; t < tokens; ++t)
            ASSERT_TRUE(std::equal(alone[size_t(t)].begin(), alone[size_t(t)].end(), y.begin() + t * stride))
                << "token " << t;
        }
      }
    }
  }
}

// A pair (RowDotParams::pair_w: the MoE's gate and up in one call) gives
// each matrix the floats a call of its own gives, at every level and both
// prefetch profiles, over the x4 layouts: one and two tokens (the avx512
// levels' two streams side by side), three to seven (2 x 3 tiles, and the
// amx level's q8_0_x4 tiles from 4), gathered or not, on ragged row ranges
// of 8 and 9 groups (a single call's halves then leave one group to a tile
// of one), and writes neither output outside its rows. Other layouts take
// no pair.
TEST(WeightLayout, X4PairsGiveEachMatrixTheFloatsOfItsOwnCall) {
  std::mt19937 rng(41);
  for (DType type : {DType::kQ4_K, DType::kQ8_0, DType::kQ5_K, DType::kQ6_K}) {
    const WeightLayout layout = repacked_layout(type);
    ASSERT_TRUE(layout_takes_pairs(layout));
    for (int64_t cols : {256, 2048}) {
      const int64_t rows = 44;
      std::vector<uint8_t> m[2];
      for (auto& w : m) {
        w = random_rows(type, rows, cols, rng);
        repack_rows(layout, type, w.data(), rows, cols);
      }
      const size_t row_bytes = m[0].size() / size_t(rows), ab = row_dot_activation_bytes(type, cols);
      for (int64_t tokens : {1, 2, 3, 4, 5, 7})
      for (int64_t r1 : {36, 40}) {
        const std::vector<float> x = random_x(tokens * cols, rng);
        std::vector<uint8_t> a(ab * size_t(tokens));
        convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.data(), ab,
                                    best_isa(detect_cpu_features()), layout);
        const std::vector<const uint8_t*> gathered = reversed_rows(a, ab, tokens);
        for (int level = 0; level < kCpuIsaCount; ++level) {
          const CpuIsa isa = CpuIsa(level);
          if (!supports(detect_cpu_features(), isa)) continue;
          for (bool gather : {false, true})
            for (CpuPrefetch pf : {CpuPrefetch::kSoftware, CpuPrefetch::kHardware}) {
              SCOPED_TRACE(std::string(name(type)) + " " + std::string(isa_name(isa)) + ", " + std::to_string(cols) +
                           " columns, rows 4-" + std::to_string(r1) + ", " + std::to_string(tokens) + " tokens" +
                           (gather ? ", gathered, " : ", ") +
                           std::string(prefetch_name(pf)) + " prefetch");
              RowDotParams p = rowmajor_params(type, m[0].data(), row_bytes, rows, cols, a.data(), ab, tokens, 4, r1);
              p.layout = layout;
              p.a_rows = gather ? gathered.data() : nullptr;
              p.prefetch = pf;
              std::vector<float> alone[2], pair[2];
              for (int i = 0; i < 2; ++i) {
                alone[i].assign(p.y_row_stride * size_t(tokens), -7.0f);
                pair[i] = alone[i];
                RowDotParams q = p;
                q.w = m[i].data();
                q.y = alone[i].data();
                row_dot_for(isa, type)(q);
              }
              p.pair_w = m[1].data();
              p.y = pair[0].data();
              p.pair_y = pair[1].data();
              row_dot_check(p);
              row_dot_for(isa, type)(p);
              ASSERT_EQ(pair[0], alone[0]) << "the first matrix";
              ASSERT_EQ(pair[1], alone[1]) << "the pair";
              for (int i = 0; i < 2; ++i)  // and the rows were written
                ASSERT_NE(alone[i][4], -7.0f);
            }
        }
      }
    }
  }
  const std::vector<uint8_t> w(size_t(*bytes_for(DType::kQ8_0, 256)) * 16);
  std::vector<float> y(17), y2(17);
  const std::vector<uint8_t> a(row_dot_activation_bytes(DType::kQ8_0, 256));
  RowDotParams p = rowmajor_params(DType::kQ8_0, w.data(), w.size() / 16, 16, 256, a.data(), a.size(), 1, 0, 16);
  p.y = y.data();
  p.pair_w = w.data();
  p.pair_y = y2.data();
  EXPECT_THROW(row_dot_check(p), Error) << "a rowmajor pair";
  p.layout = WeightLayout::kQ8_0X4;
  row_dot_check(p);
  p.pair_y = nullptr;
  EXPECT_THROW(row_dot_check(p), Error) << "a pair without its output";
}

// bf16_x16 at every level against the generic level over rowmajor: one
// token bit for bit (ggml's vec_dot order), several tokens bit for bit
// below avx512bf16 (the reference reads the layout) and within
// (cols / 2 + 2) * 2^-24 * sum|w*x| at avx512bf16, whose outer product adds
// each row's pairs in order (a sum of cols / 2 rounded terms), and within
// (cols + 2) * 2^-24 * sum|w*x| at amx, whose tdpbf16ps rounds after each
// product (Intel's pseudo-code). 17 and 33 tokens: chunks of 16 tokens,
// and, gathered, steps of fewer columns.
TEST(WeightLayout, Bf16X16RowDotsAgreeWithRowmajorAtEveryLevel) {
  std::mt19937 rng(23);
  const DType type = DType::kBF16;
  double worst = 0;
  // 1088 columns: a step of 1024 and one of 64 (15 tokens and more; fewer
  // take the whole width in one step); 4224: rows longer than the 4096
  // columns one token took a chunk at a time until stop 42, at two row
  // counts only (its cost)
  for (int64_t cols : {64, 320, 1088, 2048, 4224}) {
    for (int64_t rows : {16, 64, 80, 96, 112, 176}) {
      if (cols > 2048 && rows != 16 && rows != 80) continue;
      const std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
      std::vector<uint8_t> x16 = w;
      repack_rows(WeightLayout::kBf16X16, type, x16.data(), rows, cols);
      std::vector<float> wd(size_t(rows * cols));
      dequantize_generic(type, w.data(), wd.data(), wd.size());
      const size_t row_bytes = w.size() / size_t(rows), ab = row_dot_activation_bytes(type, cols);
      // 2-4 tokens and 19 (9 + 9 + 1): passes with split sums; 10, 13 and
      // 14: two groups by all the tokens in one pass
      for (int64_t tokens : {1, 2, 3, 4, 6, 8, 9, 10, 13, 14, 17, 19, 33}) {
        const std::vector<float> x = random_x(tokens * cols, rng);
        std::vector<uint8_t> a(ab * size_t(tokens));
        convert_row_dot_activations(type, x.data(), size_t(cols), tokens, cols, a.data(), ab);
        std::vector<float> xd(size_t(tokens * cols));
        for (int64_t t = 0; t < tokens; ++t)
          dequantize_generic(DType::kBF16, a.data() + size_t(t) * ab, xd.data() + t * cols, size_t(cols));
        const std::vector<const uint8_t*> gathered = reversed_rows(a, ab, tokens);
        // rows > 16: skip the first and last group (a ragged range of 2 to
        // 9 groups: tiles of three from the range's thirds, then two or one)
        const int64_t r0 = rows > 16 ? 16 : 0, r1 = rows > 16 ? rows - 16 : rows;
        RowDotParams p = rowmajor_params(type, w.data(), row_bytes, rows, cols, a.data(), ab, tokens, r0, r1);
        std::vector<float> ref(p.y_row_stride * size_t(tokens), -7.0f);
        p.y = ref.data();
        generic::find(type)(p);
        for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
          if (!supports(detect_cpu_features(), isa)) continue;
          for (bool gather : {false, true}) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                         ", " + std::to_string(tokens) + " tokens" + (gather ? ", gathered" : ""));
            RowDotParams q = p;
            q.w = x16.data();
            q.layout = WeightLayout::kBf16X16;
            q.a_rows = gather ? gathered.data() : nullptr;
            std::vector<float> y(ref.size(), -7.0f);
            q.y = y.data();
            row_dot_check(q);
            row_dot_for(isa, type)(q);
            const bool exact = tokens == 1 || isa < CpuIsa::kAvx512Bf16;
            const double terms = isa == CpuIsa::kAmx ? double(cols + 2) : double(cols / 2 + 2);
            ASSERT_NO_FATAL_FAILURE(expect_outputs(y, ref, p.y_row_stride, rows, cols, tokens, r0, r1, gather, exact,
                                                   terms, wd, xd, worst));
          }
        }
      }
    }
  }
  std::printf("  bf16_x16, several tokens: worst |avx512bf16 or amx - generic| / sum|w*x| = %.2e\n", worst);
}

}  // namespace
}  // namespace tandem::kernels
