// Hand-built blocks decoded against values worked out by hand from ggml's
// dequantize_row_* formulas. Each test also checks every element against an
// independent statement of the element -> (quant bits, scale) mapping.
#include "kernels/cpu/dequant.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kernels/cpu/quant_blocks.h"

namespace tandem::kernels {
namespace {

template <typename Block, size_t N>
std::array<float, N> decode(DType t, const Block& b) {
  std::array<float, N> out{};
  dequantize_generic(t, &b, out.data(), N);
  return out;
}

TEST(Dequant, BlockSizesMatchDTypeTable) {
  EXPECT_EQ(sizeof(BlockQ4_0), info(DType::kQ4_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_0), info(DType::kQ8_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_0), info(DType::kQ5_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_K), info(DType::kQ4_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_K), info(DType::kQ5_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ6_K), info(DType::kQ6_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_K), info(DType::kQ8_K).block_bytes);
}

TEST(Dequant, Q4_0) {
  BlockQ4_0 b{};
  b.d = 0x3800;  // 0.5
  b.qs[0] = 0x1F;  // x[0]: 15, x[16]: 1
  b.qs[5] = 0x80;  // x[5]: 0, x[21]: 8
  const auto y = decode<BlockQ4_0, 32>(DType::kQ4_0, b);
  EXPECT_EQ(y[0], 3.5f);    // (15-8)*0.5
  EXPECT_EQ(y[16], -3.5f);  // (1-8)*0.5
  EXPECT_EQ(y[5], -4.0f);   // (0-8)*0.5
  EXPECT_EQ(y[21], 0.0f);   // (8-8)*0.5
  EXPECT_EQ(y[1], -4.0f);   // untouched nibbles are 0
}

TEST(Dequant, Q8_0) {
  BlockQ8_0 b{};
  b.d = 0x3400;  // 0.25
  b.qs[0] = -128;
  b.qs[7] = -3;
  b.qs[31] = 127;
  const auto y = decode<BlockQ8_0, 32>(DType::kQ8_0, b);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[7], -0.75f);
  EXPECT_EQ(y[31], 31.75f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Dequant, Q5_0HighBits) {
  BlockQ5_0 b{};
  b.d = 0x3C00;  // 1.0
  // qh is a little-endian uint32: bit 0 (x[0]), bit 17 (x[17]), bit 31 (x[31]).
  b.qh[0] = 0x01;
  b.qh[2] = 0x02;
  b.qh[3] = 0x80;
  b.qs[0] = 0x21;   // x[0] low 1, x[16] low 2
  b.qs[1] = 0x3F;   // x[1] low 15, x[17] low 3
  b.qs[15] = 0xF0;  // x[15] low 0, x[31] low 15
  const auto y = decode<BlockQ5_0, 32>(DType::kQ5_0, b);
  EXPECT_EQ(y[0], 1.0f);     // (1|16) - 16
  EXPECT_EQ(y[16], -14.0f);  // 2 - 16
  EXPECT_EQ(y[1], -1.0f);    // 15 - 16
  EXPECT_EQ(y[17], 3.0f);    // (3|16) - 16
  EXPECT_EQ(y[15], -16.0f);  // 0 - 16
  EXPECT_EQ(y[31], 15.0f);   // (15|16) - 16
}

// Sub-block scales and mins used for both Q4_K and Q5_K. Sub-blocks 4-7 have
// high bits set so the split packing is exercised.
constexpr std::array<int, 8> kSc = {1, 2, 3, 63, 17, 33, 48, 5};
constexpr std::array<int, 8> kMin = {4, 0, 10, 62, 20, 40, 3, 60};
// kSc/kMin packed by hand: bytes 0-3 = sc[0..3] | (sc[4..7]>>4)<<6,
// bytes 4-7 = m[0..3] | (m[4..7]>>4)<<6, bytes 8-11 = (sc[4..7]&15) | (m[4..7]&15)<<4.
constexpr std::array<uint8_t, 12> kPacked = {0x41, 0x82, 0xC3, 0x3F, 0x44, 0x80,
                                             0x0A, 0xFE, 0x41, 0x81, 0x30, 0xC5};

TEST(Dequant, KScaleMinUnpacking) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, kPacked.data(), &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << "sub-block " << j;
    EXPECT_EQ(m, kMin[j]) << "sub-block " << j;
  }
}

TEST(Dequant, Q4_K) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPacked.data(), 12);
  b.qs[0] = 0x5A;    // x[0] (sub 0) low 10, x[32] (sub 1) high 5
  b.qs[33] = 0x2C;   // x[65] (sub 2) 12, x[97] (sub 3) 2
  b.qs[64] = 0x97;   // x[128] (sub 4) 7, x[160] (sub 5) 9
  b.qs[127] = 0xF3;  // x[223] (sub 6) 3, x[255] (sub 7) 15
  const auto y = decode<BlockQ4_K, 256>(DType::kQ4_K, b);
  EXPECT_EQ(y[0], 8.0f);       // 1*1*10 - 0.5*4
  EXPECT_EQ(y[32], 10.0f);     // 1*2*5 - 0.5*0
  EXPECT_EQ(y[65], 31.0f);     // 3*12 - 0.5*10
  EXPECT_EQ(y[97], 95.0f);     // 63*2 - 0.5*62
  EXPECT_EQ(y[128], 109.0f);   // 17*7 - 0.5*20
  EXPECT_EQ(y[160], 277.0f);   // 33*9 - 0.5*40
  EXPECT_EQ(y[223], 142.5f);   // 48*3 - 0.5*3
  EXPECT_EQ(y[255], 45.0f);    // 5*15 - 0.5*60
  EXPECT_EQ(y[1], -2.0f);      // q = 0: -0.5*4
  // Every element: chunk c = e/64; sub-block 2c or 2c+1; nibble of qs[32c + e%32].
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64, sub = 2 * c + (r >= 32);
    const uint8_t byte = b.qs[32 * c + r % 32];
    const int q = r < 32 ? (byte & 0xF) : (byte >> 4);
    EXPECT_EQ(y[e], 1.0f * kSc[sub] * q - 0.5f * kMin[sub]) << "element " << e;
  }
}

TEST(Dequant, Q5_K) {
  BlockQ5_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  std::memcpy(b.scales, kPacked.data(), 12);
  b.qs[0] = 0x5A;
  b.qh[0] = 0x03;    // 5th bit of x[0] (bit 0) and x[32] (bit 1)
  b.qs[65] = 0x01;   // x[129] (sub 4) 1, x[161] (sub 5) 0
  b.qh[1] = 0x10;    // bit 4: chunk 2, low half -> x[129]
  b.qs[127] = 0xF3;
  b.qh[31] = 0x80;   // bit 7: chunk 3, high half -> x[255]
  const auto y = decode<BlockQ5_K, 256>(DType::kQ5_K, b);
  EXPECT_EQ(y[0], 24.0f);     // 1*(10+16) - 0.5*4
  EXPECT_EQ(y[32], 42.0f);    // 2*(5+16) - 0
  EXPECT_EQ(y[129], 279.0f);  // 17*(1+16) - 0.5*20
  EXPECT_EQ(y[161], -20.0f);  // 33*0 - 0.5*40
  EXPECT_EQ(y[223], 142.5f);  // 48*3 - 0.5*3 (bit 6 of qh[31] clear)
  EXPECT_EQ(y[255], 125.0f);  // 5*(15+16) - 0.5*60
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64, hi = r >= 32, sub = 2 * c + hi;
    const uint8_t byte = b.qs[32 * c + r % 32];
    const int q = (hi ? (byte >> 4) : (byte & 0xF)) + (((b.qh[r % 32] >> sub) & 1) << 4);
    EXPECT_EQ(y[e], 1.0f * kSc[sub] * q - 0.5f * kMin[sub]) << "element " << e;
  }
}

TEST(Dequant, Q6_K) {
  BlockQ6_K b{};
  b.d = 0x3800;  // 0.5, stored after everything else
  constexpr std::array<int8_t, 16> kScales = {1, -2, 3, -4, 5, 6, 7, 8,
                                              9, 10, 11, 12, 13, 14, 15, -128};
  std::memcpy(b.scales, kScales.data(), 16);
  b.ql[0] = 0x3A;   // x[0] low 10, x[64] low 3
  b.ql[32] = 0x7F;  // x[32] low 15, x[96] low 7
  b.qh[0] = 0xE4;   // 2-bit highs of x[0], x[32], x[64], x[96]: 0, 1, 2, 3
  b.ql[79] = 0x0F;  // x[143] (second half, l = 15) low 15
  b.qh[47] = 0x03;  // x[143] high 3
  b.ql[127] = 0x50; // x[255] (second half, l = 31, k = 3) low 5
  b.qh[63] = 0x40;  // x[255] high 1
  const auto y = decode<BlockQ6_K, 256>(DType::kQ6_K, b);
  EXPECT_EQ(y[0], -11.0f);    // 0.5 * sc[0]=1 * (10-32)
  EXPECT_EQ(y[32], -1.5f);    // 0.5 * sc[2]=3 * ((15|16)-32)
  EXPECT_EQ(y[64], 7.5f);     // 0.5 * sc[4]=5 * ((3|32)-32)
  EXPECT_EQ(y[96], 80.5f);    // 0.5 * sc[6]=7 * ((7|48)-32)
  EXPECT_EQ(y[143], 139.5f);  // 0.5 * sc[8]=9 * ((15|48)-32)
  EXPECT_EQ(y[255], 704.0f);  // 0.5 * sc[15]=-128 * ((5|16)-32)
  EXPECT_EQ(y[16], 32.0f);    // 0.5 * sc[1]=-2 * (0-32)
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t lo_byte = b.ql[64 * h + (k % 2) * 32 + l];
    const int lo = k < 2 ? (lo_byte & 0xF) : (lo_byte >> 4);
    const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
    const int sc = kScales[8 * h + l / 16 + 2 * k];
    EXPECT_EQ(y[e], 0.5f * sc * ((lo | (hi << 4)) - 32)) << "element " << e;
  }
}

TEST(Dequant, Q8_K) {
  BlockQ8_K b{};
  b.d = 0.125f;
  b.qs[0] = -128;
  b.qs[255] = 100;
  b.bsums[0] = 999;  // not used for decoding
  const auto y = decode<BlockQ8_K, 256>(DType::kQ8_K, b);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[255], 12.5f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Dequant, PlainTypes) {
  float out[3];
  const uint8_t f16[] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};
  dequantize_generic(DType::kF16, f16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0x1p-24f);
  const uint8_t bf16[] = {0x80, 0x3F, 0x49, 0x40, 0x80, 0xFF};
  dequantize_generic(DType::kBF16, bf16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.140625f);
  EXPECT_EQ(out[2], -INFINITY);
  const uint8_t f8[] = {0x38, 0xC4, 0x7E};
  dequantize_generic(DType::kF8E4M3, f8, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 448.0f);
  const int8_t i8[] = {-5, 127, -128};
  dequantize_generic(DType::kI8, i8, out, 3);
  EXPECT_EQ(out[0], -5.0f);
  EXPECT_EQ(out[2], -128.0f);
  const uint8_t u8[] = {250, 0, 1};
  dequantize_generic(DType::kU8, u8, out, 3);
  EXPECT_EQ(out[0], 250.0f);
  const int32_t i32[] = {-123456, 16777216, 7};
  dequantize_generic(DType::kI32, i32, out, 3);
  EXPECT_EQ(out[0], -123456.0f);
  EXPECT_EQ(out[1], 16777216.0f);
  const float f32[] = {1.5f, -0.0f, 3e38f};
  dequantize_generic(DType::kF32, f32, out, 3);
  EXPECT_EQ(std::memcmp(out, f32, sizeof f32), 0);
}

TEST(Dequant, UnalignedSourceAndManyBlocks) {
  // Three Q8_K blocks starting at an odd address decode like aligned ones.
  std::vector<BlockQ8_K> blocks(3);
  for (int i = 0; i < 3; ++i) {
    blocks[i].d = static_cast<float>(i + 1);
    for (int j = 0; j < 256; ++j) blocks[i].qs[j] = static_cast<int8_t>(j - 128);
  }
  std::vector<uint8_t> raw(sizeof(BlockQ8_K) * 3 + 1);
  std::memcpy(raw.data() + 1, blocks.data(), sizeof(BlockQ8_K) * 3);
  std::vector<float> a(768), b(768);
  dequantize_generic(DType::kQ8_K, blocks.data(), a.data(), 768);
  dequantize_generic(DType::kQ8_K, raw.data() + 1, b.data(), 768);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[512 + 255], 3.0f * 127);
}

TEST(Dequant, PartialBlockThrows) {
  float out[300];
  const std::vector<uint8_t> src(4096);
  for (int k = 0; k < kDTypeCount; ++k) {
    const DType t = static_cast<DType>(k);
    const size_t be = info(t).block_elems;
    EXPECT_NO_THROW(dequantize_generic(t, src.data(), out, 0)) << name(t);
    EXPECT_NO_THROW(dequantize_generic(t, src.data(), out, be)) << name(t);
    if (be == 1) continue;
    for (size_t n : {be - 1, be + 1, size_t{1}}) {
      try {
        dequantize_generic(t, src.data(), out, n);
        ADD_FAILURE() << name(t) << " accepted " << n << " elements";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
      }
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
