// The repacked layouts (weight_layout.h), q4_k_x4, q5_k_x4, q6_k_x4,
// q8_0_x4 and bf16_x16: byte permutations that pack and unpack exactly, and
// row dots over them that equal the rowmajor generic ones bit for bit at
// every level (the same exact integer sums and the same fmas; bf16_x16's
// several-token outer product and q5_k_x4's and q6_k_x4's sums per
// super-block within stated bounds, the same at every level from avx2 up),
// on ragged row ranges, token counts and gathered activations, and the
// k-quant tiles at their values' limits (fp8_x16: fp8_x16_test.cpp).
#include "kernels/cpu/weight_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/row_dot.h"
#include "kernels/cpu/row_dot_test_params.h"

namespace tandem::kernels {
namespace {

std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t row_bytes = *bytes_for(type, uint64_t(cols));
  std::vector<uint8_t> w(row_bytes * size_t(rows));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng) * float(1 + r % 5);
    row[size_t(r % cols)] *= 8;  // large scales and mins too
    quantize_generic(type, row.data(), w.data() + size_t(r) * row_bytes, row.size());
  }
  return w;
}

using testing::random_x;
using testing::reversed_rows;
using testing::rowmajor_params;

TEST(WeightLayout, NamesAndFits) {
  for (WeightLayout l : {WeightLayout::kRowMajor, WeightLayout::kQ4KX4, WeightLayout::kQ8_0X4,
                         WeightLayout::kBf16X16, WeightLayout::kFp8X16, WeightLayout::kQ8_0X16,
                         WeightLayout::kBf16X16Z, WeightLayout::kQ5KX4, WeightLayout::kQ6KX4})
    EXPECT_EQ(layout_from_name(layout_name(l)), l);
  EXPECT_FALSE(layout_from_name("fp8_s16"));  // stops 35-48's FP8 layout, gone with layout version 8
  // FP8: fp8_x16 at avx512bf16 only (weight_layout.h) where it fits, else rowmajor
  EXPECT_EQ(expert_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16, 2048, 7168), WeightLayout::kFp8X16);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16, 7168, 2048), WeightLayout::kFp8X16);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16, 768, 2048), WeightLayout::kFp8X16);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16, 8, 7168), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512Bf16, 32, 200), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAmx, 2048, 7168), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kF8E4M3, CpuIsa::kAvx512, 2048, 7168), WeightLayout::kRowMajor);
  // BF16: bf16_x16z at avx512bf16 where whole units of 128 columns fit, else bf16_x16 (the
  // loader's fallback too: layout_fallback), bf16_x16 at amx
  EXPECT_EQ(expert_matrix_layout(DType::kBF16, CpuIsa::kAvx512Bf16, 32, 128), WeightLayout::kBf16X16Z);
  EXPECT_EQ(expert_matrix_layout(DType::kBF16, CpuIsa::kAvx512Bf16, 32, 192), WeightLayout::kBf16X16);
  EXPECT_EQ(expert_matrix_layout(DType::kBF16, CpuIsa::kAmx, 32, 128), WeightLayout::kBf16X16);
  EXPECT_EQ(layout_fallback(WeightLayout::kBf16X16Z), WeightLayout::kBf16X16);
  EXPECT_EQ(layout_fallback(WeightLayout::kQ8_0X16), WeightLayout::kQ8_0X16);
  EXPECT_EQ(expert_matrix_layout(DType::kBF16, CpuIsa::kAvx512Bf16, 32, 96), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kQ4_K, CpuIsa::kAvx512, 8, 512), WeightLayout::kQ4KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ4_K, CpuIsa::kAvx512, 6, 512), WeightLayout::kRowMajor);
  // Q5_K: q5_k_x4 from avx2 up where it fits
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kAvx512, 8, 512), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kAvx512Bf16, 8, 512), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kAmx, 8, 512), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kAvx2, 8, 512), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kGeneric, 8, 512), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kQ5_K, CpuIsa::kAvx512, 6, 512), WeightLayout::kRowMajor);
  EXPECT_FALSE(layout_fits(WeightLayout::kQ5KX4, DType::kQ4_K, 8, 512));
  EXPECT_FALSE(layout_fits(WeightLayout::kQ5KX4, DType::kQ5_K, 8, 384));
  EXPECT_TRUE(permutes_activations(WeightLayout::kQ5KX4));
  EXPECT_TRUE(permutes_activations(WeightLayout::kQ6KX4));
  // Q6_K: q6_k_x4 from avx2 up where it fits
  EXPECT_EQ(expert_matrix_layout(DType::kQ6_K, CpuIsa::kAvx512Bf16, 8, 512), WeightLayout::kQ6KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ6_K, CpuIsa::kAvx2, 8, 512), WeightLayout::kQ6KX4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ6_K, CpuIsa::kGeneric, 8, 512), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_matrix_layout(DType::kQ6_K, CpuIsa::kAvx512, 10, 512), WeightLayout::kRowMajor);
  EXPECT_FALSE(layout_fits(WeightLayout::kQ6KX4, DType::kQ5_K, 8, 512));
  EXPECT_FALSE(permutes_activations(WeightLayout::kQ8_0X4));
  // Q8_0: q8_0_x16 at avx512bf16 where it fits, else q8_0_x4; the amx level keeps q8_0_x4 for its tiles
  EXPECT_EQ(expert_matrix_layout(DType::kQ8_0, CpuIsa::kAvx512Bf16, 32, 96), WeightLayout::kQ8_0X16);
  EXPECT_EQ(expert_matrix_layout(DType::kQ8_0, CpuIsa::kAvx512Bf16, 8, 96), WeightLayout::kQ8_0X4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ8_0, CpuIsa::kAvx512, 32, 96), WeightLayout::kQ8_0X4);
  EXPECT_EQ(expert_matrix_layout(DType::kQ8_0, CpuIsa::kAmx, 32, 96), WeightLayout::kQ8_0X4);
  EXPECT_FALSE(layout_from_name("q4_k_x8"));
  EXPECT_TRUE(layout_fits(WeightLayout::kQ4KX4, DType::kQ4_K, 8, 512));
  EXPECT_FALSE(layout_fits(WeightLayout::kQ4KX4, DType::kQ4_K, 6, 512));
  EXPECT_FALSE(layout_fits(WeightLayout::kQ4KX4, DType::kQ6_K, 8, 512));
  EXPECT_TRUE(layout_fits(WeightLayout::kRowMajor, DType::kQ6_K, 7, 512));
  EXPECT_TRUE(layout_fits(WeightLayout::kQ8_0X4, DType::kQ8_0, 4, 96));
  EXPECT_FALSE(layout_fits(WeightLayout::kQ8_0X4, DType::kQ4_K, 4, 256));
  EXPECT_FALSE(layout_fits(WeightLayout::kQ8_0X4, DType::kQ8_0, 0, 96));
  EXPECT_EQ(repacked_layout(DType::kQ8_0), WeightLayout::kQ8_0X4);
  EXPECT_EQ(repacked_layout(DType::kBF16), WeightLayout::kBf16X16);
  EXPECT_EQ(repacked_layout(DType::kF32), WeightLayout::kRowMajor);
  EXPECT_TRUE(layout_fits(WeightLayout::kBf16X16, DType::kBF16, 32, 128));
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16, DType::kBF16, 24, 128));  // whole groups of 16
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16, DType::kBF16, 16, 96));   // whole runs of 64
  EXPECT_FALSE(layout_fits(WeightLayout::kBf16X16, DType::kF16, 16, 128));
  // Each level gets the layouts it has kernels for.
  EXPECT_EQ(expert_layout(DType::kQ4_K, CpuIsa::kAvx512), WeightLayout::kQ4KX4);
  EXPECT_EQ(expert_layout(DType::kQ4_K, CpuIsa::kAvx2), WeightLayout::kQ4KX4);
  EXPECT_EQ(expert_layout(DType::kQ4_K, CpuIsa::kGeneric), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_layout(DType::kQ8_0, CpuIsa::kAvx2), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_layout(DType::kQ8_0, CpuIsa::kAvx512), WeightLayout::kQ8_0X4);
  EXPECT_EQ(expert_layout(DType::kBF16, CpuIsa::kAvx512), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_layout(DType::kBF16, CpuIsa::kAvx512Bf16), WeightLayout::kBf16X16);
  EXPECT_EQ(expert_layout(DType::kQ6_K, CpuIsa::kAvx512Bf16), WeightLayout::kQ6KX4);
  EXPECT_EQ(expert_layout(DType::kQ5_K, CpuIsa::kAvx512), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_layout(DType::kQ6_K, CpuIsa::kAvx2), WeightLayout::kQ6KX4);
  EXPECT_EQ(expert_layout(DType::kQ5_K, CpuIsa::kAvx2), WeightLayout::kQ5KX4);
  EXPECT_EQ(expert_layout(DType::kQ6_K, CpuIsa::kGeneric), WeightLayout::kRowMajor);
  EXPECT_EQ(expert_layout(DType::kQ5_K, CpuIsa::kGeneric), WeightLayout::kRowMajor);
  std::vector<uint8_t> w(6 * 144);
  EXPECT_THROW(repack_rows(WeightLayout::kQ4KX4, DType::kQ4_K, w.data(), 6, 256), Error);
}

// q4_k_x4's meta by its definition (weight_layout.h), from blocks of random
// bytes (every one of the 96 scale bits and d, dmin free): row r's word h at
// 16r + 8h holds sc[4h + k] at bits 6k, m[4h + k] at 24 + 6k, d or dmin at
// 48; and back to the same bytes.
TEST(WeightLayout, Q4KX4MetaHoldsEachScaleAndMinWhereTheKernelReadsIt) {
  std::mt19937 rng(6);
  for (int round = 0; round < 50; ++round) {
    std::vector<uint8_t> blocks(4 * sizeof(BlockQ4_K));
    for (auto& b : blocks) b = uint8_t(rng());
    const uint8_t* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = blocks.data() + r * sizeof(BlockQ4_K);
    std::vector<uint8_t> g(kQ4KX4GroupBlock);
    pack_group_block(WeightLayout::kQ4KX4, rows, g.data());
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        uint64_t word;
        std::memcpy(&word, g.data() + 16 * r + 8 * h, 8);
        uint16_t half;
        std::memcpy(&half, rows[r] + 2 * h, 2);
        ASSERT_EQ(word >> 48, half) << "row " << r << " word " << h;
        for (int k = 0; k < 4; ++k) {
          uint8_t sc, m;
          k4_scale_min(4 * h + k, rows[r] + offsetof(BlockQ4_K, scales), &sc, &m);
          ASSERT_EQ((word >> (6 * k)) & 63, sc) << "row " << r << " scale " << 4 * h + k;
          ASSERT_EQ((word >> (24 + 6 * k)) & 63, m) << "row " << r << " min " << 4 * h + k;
        }
      }
    std::vector<uint8_t> back(blocks.size());
    uint8_t* out[4];
    for (int r = 0; r < 4; ++r) out[r] = back.data() + r * sizeof(BlockQ4_K);
    unpack_group_block(WeightLayout::kQ4KX4, g.data(), out);
    ASSERT_EQ(back, blocks);
  }
}

TEST(WeightLayout, RepackedLayoutsPackAndUnpackExactly) {
  std::mt19937 rng(5);
  for (DType type : {DType::kQ4_K, DType::kQ8_0, DType::kBF16, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(name(type)));
    const WeightLayout l = repacked_layout(type);
    const LayoutBlocks lb = layout_blocks(l);
    const int64_t rows = 3 * lb.rows, cols = 768;
    const std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
    std::vector<uint8_t> packed = w;
    repack_rows(l, type, packed.data(), rows, cols);
    EXPECT_NE(packed, w);
    const size_t row_bytes = w.size() / rows, nb = row_bytes / lb.row_block;
    ASSERT_EQ(lb.group_block, size_t(lb.rows) * lb.row_block);
    std::vector<uint8_t> back(w.size());
    for (int64_t g = 0; g < rows / lb.rows; ++g)
      for (size_t b = 0; b < nb; ++b) {
        uint8_t* group_rows[kX16Rows];
        for (int r = 0; r < lb.rows; ++r)
          group_rows[r] = back.data() + size_t(lb.rows * g + r) * row_bytes + b * lb.row_block;
        unpack_group_block(l, packed.data() + size_t(g) * size_t(lb.rows) * row_bytes + b * lb.group_block,
                           group_rows);
      }
    EXPECT_EQ(back, w);
  }
  // bf16_x16 by its definition: row r's pair k of block b at 1024b + 64k + 4r
  {
    const int64_t rows = 32, cols = 128;
    std::vector<uint8_t> w = random_rows(DType::kBF16, rows, cols, rng), packed = w;
    repack_rows(WeightLayout::kBf16X16, DType::kBF16, packed.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t at = size_t(r / 16) * 16 * 256 + size_t(c / 32) * 1024 + size_t(c % 32 / 2) * 64 +
                          size_t(r % 16) * 4 + size_t(c % 2) * 2;
        ASSERT_EQ(std::memcmp(packed.data() + at, w.data() + size_t(r * cols + c) * 2, 2), 0) << r << "," << c;
      }
  }
  // q5_k_x4 by its definition: row r's qs byte 32c + 4s + k at 128 + 64s +
  // 64(s / 4) + 16r + 4c + k, and bit 2c + h of its qh[4s + k] (value 4s + k
  // of sub-block 2c + h) at byte 64 + 320(s / 4) + 16r + 4c + k, bit
  // 2(s % 4) + h
  {
    const int64_t rows = 8, cols = 512;
    std::vector<uint8_t> w = random_rows(DType::kQ5_K, rows, cols, rng), packed = w;
    repack_rows(WeightLayout::kQ5KX4, DType::kQ5_K, packed.data(), rows, cols);
    int ones = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / 256; ++b) {
        const uint8_t* blk = w.data() + size_t(r * (cols / 256) + b) * sizeof(BlockQ5_K);
        const uint8_t* g = packed.data() + size_t(r / 4) * 4 * size_t(cols / 256) * 176 + size_t(b) * 704;
        const int rr = int(r % 4);
        for (int s = 0; s < 8; ++s)
          for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 4; ++k) {
              ASSERT_EQ(g[128 + 64 * s + 64 * (s / 4) + 16 * rr + 4 * c + k],
                        blk[offsetof(BlockQ5_K, qs) + 32 * c + 4 * s + k]);
              for (int h = 0; h < 2; ++h) {
                const int want = blk[offsetof(BlockQ5_K, qh) + 4 * s + k] >> (2 * c + h) & 1;
                ones += want;
                ASSERT_EQ(g[64 + 320 * (s / 4) + 16 * rr + 4 * c + k] >> (2 * (s % 4) + h) & 1, want)
                    << "row " << r << " block " << b << " s " << s << " c " << c << " k " << k << " h " << h;
              }
            }
      }
    EXPECT_GT(ones, 0);
  }
  // q6_k_x4 by its definition, against the values dequantised: row r's
  // value 64c + 4s + k (low nibble) and 64c + 32 + 4s + k (high) at step s's
  // qs byte 16r + 4c + k, their top bits at bits 4(s % 2) and 4(s % 2) + 2
  // of that byte of part s / 2's top-bits line; scales at 16r, d at 832 + 2r
  {
    const int64_t rows = 4, cols = 256;
    std::vector<uint8_t> w = random_rows(DType::kQ6_K, rows, cols, rng), packed = w;
    repack_rows(WeightLayout::kQ6KX4, DType::kQ6_K, packed.data(), rows, cols);
    std::vector<float> wd(size_t(rows * cols));
    dequantize_generic(DType::kQ6_K, w.data(), wd.data(), wd.size());
    for (int r = 0; r < rows; ++r) {
      const uint8_t* blk = w.data() + size_t(r) * sizeof(BlockQ6_K);
      const float d = fp16_to_f32(load_unaligned<uint16_t>(blk + offsetof(BlockQ6_K, d)));
      ASSERT_EQ(std::memcmp(packed.data() + 832 + 2 * r, blk + offsetof(BlockQ6_K, d), 2), 0);
      ASSERT_EQ(std::memcmp(packed.data() + 16 * r, blk + offsetof(BlockQ6_K, scales), 16), 0);
      for (int s = 0; s < 8; ++s)
        for (int c = 0; c < 4; ++c)
          for (int k = 0; k < 4; ++k)
            for (int h = 0; h < 2; ++h) {
              const int v = 64 * c + 32 * h + 4 * s + k;
              const uint8_t nib = packed[64 + 192 * (s / 2) + 64 + 64 * (s % 2) + 16 * r + 4 * c + k] >> (4 * h) & 0xF;
              const uint8_t top = packed[64 + 192 * (s / 2) + 16 * r + 4 * c + k] >> (4 * (s % 2) + 2 * h) & 3;
              const auto sc = int8_t(packed[16 * r + v / 16]);
              ASSERT_EQ(d * float(sc) * float(int(nib | top << 4) - 32), wd[size_t(r * cols + v)])
                  << "row " << r << " value " << v;
            }
    }
  }
  // q4_k_x4's activations: Q8_K blocks permuted, and back
  const int64_t cols = 768;
  const std::vector<float> x = random_x(cols, rng);
  const size_t ab = row_dot_activation_bytes(DType::kQ4_K, cols);
  std::vector<uint8_t> a(ab), ap(ab);
  convert_row_dot_activations(DType::kQ4_K, x.data(), 0, 1, cols, a.data(), ab);
  convert_row_dot_activations(DType::kQ4_K, x.data(), 0, 1, cols, ap.data(), ab, CpuIsa::kGeneric,
                              WeightLayout::kQ4KX4);
  EXPECT_NE(ap, a);
  q4_k_x4_unpermute_activations(ap.data(), cols);
  EXPECT_EQ(ap, a);
}

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

TEST(WeightLayout, Q4KX4ChecksRefuseWhatItCannotTake) {
  std::mt19937 rng(9);
  const int64_t rows = 8, cols = 256;
  std::vector<uint8_t> w = random_rows(DType::kQ4_K, rows, cols, rng);
  const size_t ab = row_dot_activation_bytes(DType::kQ4_K, cols);
  std::vector<uint8_t> a(ab);
  std::vector<float> y(rows);
  RowDotParams p;
  p.wtype = DType::kQ4_K;
  p.layout = WeightLayout::kQ4KX4;
  p.w = w.data();
  p.w_row_stride = w.size() / rows;
  p.rows = rows;
  p.cols = cols;
  p.a = a.data();
  p.a_row_bytes = ab;
  p.n_tokens = 1;
  p.y = y.data();
  p.y_row_stride = rows;
  p.row_begin = 0;
  p.row_end = rows;
  EXPECT_NO_THROW(row_dot_check(p));
  RowDotParams q = p;
  q.row_begin = 2;
  EXPECT_THROW(row_dot_check(q), Error);  // not a group boundary
  q = p;
  q.w_row_stride += 16;
  EXPECT_THROW(row_dot_check(q), Error);  // groups need contiguous rows
  q = p;
  q.gemm_order = true;
  EXPECT_THROW(row_dot_check(q), Error);  // the layout sums in the GEMV order only
  q = p;
  q.wtype = DType::kQ6_K;
  q.w_row_stride = *bytes_for(DType::kQ6_K, cols);
  EXPECT_THROW(row_dot_check(q), Error);
}

}  // namespace
}  // namespace tandem::kernels
