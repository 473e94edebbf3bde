#include "kernels/cpu/float_convert.h"

#include <bit>

namespace tandem::kernels {
namespace {

constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr uint32_t kF32ImplicitOne = 0x00800000u;
constexpr uint32_t kF32MantMask = 0x007fffffu;

// Shifts `mant` right by `shift` (1..31) rounding to nearest, ties to even.
// A carry out of the mantissa lands in the exponent field of the caller's
// packed result, which is exactly the right thing for IEEE-style formats.
constexpr uint32_t shift_round_even(uint32_t mant, int shift) {
  const uint32_t kept = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

float fp16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | kF32Inf | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: mant * 2^-24. Normalise so the leading 1 becomes implicit.
    uint32_t e = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_fp16(float f) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) {
    // NaN: keep the top payload bits; force a payload bit so it stays NaN.
    uint32_t m = (abs >> 13) & 0x3ffu;
    if (m == 0) m = 0x200u;
    return static_cast<uint16_t>(sign | 0x7c00u | m);
  }
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16: inf
  if (abs >= 0x38800000u) {
    // Normal half (>= 2^-14): rebias the exponent by 127-15 and round off 13
    // mantissa bits. Rounding up from 65520 carries into the inf pattern.
    return static_cast<uint16_t>(sign | shift_round_even(abs - (112u << 23), 13));
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 ties to 0
  // Subnormal half: count units of 2^-24. A result of 0x400 is the smallest
  // normal, whose bit pattern is what the carry produces.
  const uint32_t e = abs >> 23;
  const uint32_t mant = (abs & kF32MantMask) | kF32ImplicitOne;
  return static_cast<uint16_t>(sign | shift_round_even(mant, static_cast<int>(126 - e)));
}

float bf16_to_f32(uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

uint16_t f32_to_bf16(float f) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & kF32AbsMask) > kF32Inf) {
    // Truncate NaNs rather than round (rounding could carry into the sign),
    // and keep a payload bit so the result is not inf.
    uint32_t r = bits >> 16;
    if ((r & 0x7fu) == 0) r |= 0x40u;
    return static_cast<uint16_t>(r);
  }
  // Adding 0x7fff plus the lowest kept bit rounds half to even; finite values
  // past the bf16 range carry into the inf pattern, as IEEE rounding does.
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float fp8_e4m3_to_f32(uint8_t v) noexcept {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exp == 0) {
    // Subnormal (or zero): mant * 2^-9, exact in f32.
    const float mag = static_cast<float>(mant) * (1.0f / 512.0f);
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 127 - 7) << 23) | (mant << 20));
}

uint8_t f32_to_fp8_e4m3(float f) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) return static_cast<uint8_t>(sign | 0x7fu);
  // Everything from 448 up (inf included) saturates: values below 464 would
  // round to 448 anyway, and the next step (480) does not exist in "fn".
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);
  if (abs >= 0x3c800000u) {
    // Normal fp8 (>= 2^-6): rebias 127 -> 7 and round off 20 mantissa bits.
    // The maximum reachable result is 0x7e (448), never the NaN pattern.
    return static_cast<uint8_t>(sign | shift_round_even(abs - (120u << 23), 20));
  }
  if (abs <= 0x3a800000u) return static_cast<uint8_t>(sign);  // <= 2^-10 ties to 0
  // Subnormal fp8: count units of 2^-9.
  const uint32_t e = abs >> 23;
  const uint32_t mant = (abs & kF32MantMask) | kF32ImplicitOne;
  return static_cast<uint8_t>(sign | shift_round_even(mant, static_cast<int>(141 - e)));
}

}  // namespace tandem::kernels
