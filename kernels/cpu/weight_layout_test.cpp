// The repacked layouts (weight_layout.h), q4_k_x4, q5_k_x4, q6_k_x4,
// q8_0_x4 and bf16_x16: their names, which level stores which, and byte
// permutations that pack and unpack exactly (the row dots over them:
// weight_layout_row_dot_test.cpp; fp8_x16: fp8_x16_test.cpp).
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

using testing::random_rows;
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
