#include "kernels/cpu/float_convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::kernels {
namespace {

// ---- independent oracles, in double ------------------------------------
// Values of the non-negative codes of each format, computed from the format
// definition (not from the code under test). `top` is the first code past
// the largest finite one for fp16/bf16 (inf, valued as one more ulp, which
// is exactly where IEEE rounding overflows), and the largest code for fp8
// (which saturates instead).

double fp16_value(uint32_t c) {
  if (c >= 0x7c00) return 65536.0;
  const int e = static_cast<int>(c >> 10), m = static_cast<int>(c & 0x3ff);
  return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
}
double bf16_value(uint32_t c) {
  if (c >= 0x7f80) return std::ldexp(1.0, 128);
  const int e = static_cast<int>(c >> 7), m = static_cast<int>(c & 0x7f);
  return e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
}
double fp8_value(uint32_t c) {
  const int e = static_cast<int>(c >> 3), m = static_cast<int>(c & 0x7);
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
}

// The code nearest to a >= 0, ties to the even code (codes are monotone in
// value, so an even code is an even mantissa), never past `top`.
template <typename Value>
uint32_t nearest_code(double a, uint32_t top, Value value) {
  uint32_t lo = 0, hi = top;  // invariant: value(lo) <= a, and a < value(hi) unless hi == top
  if (a >= value(top)) return top;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double dlo = a - value(lo), dhi = value(hi) - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo % 2 == 0) ? lo : hi;
}

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }

// Test inputs: random bit patterns in the exponent window that matters for a
// format, plus every midpoint between neighbouring codes and the floats just
// either side of it, where rounding mistakes show.
template <typename Value>
std::vector<float> probe_values(uint32_t top, Value value, int min_exp, int max_exp) {
  std::vector<float> out;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffff);
  std::uniform_int_distribution<int> exp(min_exp + 127, max_exp + 127);  // f32 exponent field, >= 0
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = (static_cast<uint32_t>(exp(rng)) << 23) | mant(rng);
    out.push_back(std::bit_cast<float>(bits));
  }
  for (uint32_t c = 0; c + 1 <= top; ++c) {
    const float mid = static_cast<float>((value(c) + value(c + 1)) / 2);  // exact in f32
    out.push_back(mid);
    out.push_back(std::nextafter(mid, 0.0f));
    out.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  return out;
}

// ---- fp16 -------------------------------------------------------------------

TEST(Fp16, EveryPatternRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << "pattern 0x" << h;
  }
}

TEST(Fp16, DecodesToTheDefinedValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    const uint32_t mag = h & 0x7fff;
    const bool neg = (h & 0x8000) != 0;
    if (mag > 0x7c00) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else if (mag == 0x7c00) {
      ASSERT_EQ(f, neg ? -INFINITY : INFINITY);
    } else {
      ASSERT_EQ(static_cast<double>(f), (neg ? -1 : 1) * fp16_value(mag)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), neg);
    }
  }
}

TEST(Fp16, HandPickedRounding) {
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);        // tie, down to even
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);    // tie, up to even
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // just past the tie
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);               // tie to even is inf
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_fp16(0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(f32_to_fp16(0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);               // tie to even is 0
  EXPECT_EQ(f32_to_fp16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_fp16(3 * 0x1p-25f), 0x0002);           // 1.5 units: tie up to 2
  EXPECT_EQ(f32_to_fp16(1023.5f * 0x1p-24f), 0x0400);     // subnormal rounds into normal
  EXPECT_EQ(f32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x3555), 0x1.554p-2f);
}

TEST(Fp16, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low f32 bits must not become inf.
  const uint16_t h = f32_to_fp16(std::bit_cast<float>(0x7f800001u));
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x03ff, 0);
  EXPECT_EQ(f32_to_fp16(std::bit_cast<float>(0xffc00000u)) & 0x8000, 0x8000);  // sign kept
}

TEST(Fp16, MatchesOracleOnRandomAndMidpoints) {
  for (float f : probe_values(0x7c00, fp16_value, -27, 17)) {
    for (float s : {f, -f}) {
      const uint32_t want =
          (std::signbit(s) ? 0x8000u : 0u) | nearest_code(std::fabs(s), 0x7c00, fp16_value);
      ASSERT_EQ(f32_to_fp16(s), want) << std::hexfloat << s;
    }
  }
}

// ---- bf16 -------------------------------------------------------------------

TEST(Bf16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    ASSERT_EQ(f32_bits(f), b << 16);
    ASSERT_EQ(f32_to_bf16(f), b) << std::hex << "pattern 0x" << b;
  }
}

TEST(Bf16, HandPickedRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, down to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, up to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xbf80ffffu)), 0xbf81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max: inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie to 0
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);
}

TEST(Bf16, NaNStaysNaN) {
  for (uint32_t bits : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = f32_to_bf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << bits;
    EXPECT_EQ(b & 0x8000, (bits >> 16) & 0x8000);
  }
}

TEST(Bf16, MatchesOracleOnRandomAndMidpoints) {
  for (float f : probe_values(0x7f80, bf16_value, -127, 127)) {
    for (float s : {f, -f}) {
      const uint32_t want =
          (std::signbit(s) ? 0x8000u : 0u) | nearest_code(std::fabs(s), 0x7f80, bf16_value);
      ASSERT_EQ(f32_to_bf16(s), want) << std::hexfloat << s;
    }
  }
}

// ---- fp8 e4m3fn ---------------------------------------------------------------

TEST(Fp8E4M3, EveryPatternRoundTrips) {
  for (uint32_t v = 0; v <= 0xff; ++v) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    ASSERT_EQ(f32_to_fp8_e4m3(f), v) << std::hex << "pattern 0x" << v;
  }
}

TEST(Fp8E4M3, DecodesToTheDefinedValue) {
  for (uint32_t v = 0; v <= 0xff; ++v) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    const uint32_t mag = v & 0x7f;
    if (mag == 0x7f) {
      ASSERT_TRUE(std::isnan(f)) << v;
    } else {
      ASSERT_EQ(static_cast<double>(f), ((v & 0x80) ? -1 : 1) * fp8_value(mag)) << v;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xc4), -3.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in "fn"
}

TEST(Fp8E4M3, SaturatesAndKeepsNaN) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(463.99f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);  // would round to 480, which does not exist
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_fp8_e4m3(0x1.000002p-10f), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(f32_to_fp8_e4m3(15 * 0x1p-10f), 0x08);  // 7.5 subnormal units: up into normal
}

TEST(Fp8E4M3, MatchesOracleOnRandomAndMidpoints) {
  for (float f : probe_values(0x7e, fp8_value, -12, 10)) {
    for (float s : {f, -f}) {
      const uint32_t want =
          (std::signbit(s) ? 0x80u : 0u) | nearest_code(std::fabs(s), 0x7e, fp8_value);
      ASSERT_EQ(f32_to_fp8_e4m3(s), want) << std::hexfloat << s;
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
