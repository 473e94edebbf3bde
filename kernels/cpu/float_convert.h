// Scalar conversions between f32 and the narrow float formats found in model
// files. All narrowing conversions round to nearest, ties to even, so that a
// value which is exactly representable survives f32 and back bit for bit.
// They are plain, portable bit manipulation: this is the reference other
// (vectorised, GPU) conversions are tested against.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// IEEE 754 binary16. Subnormals, infinities and NaN payloads are kept;
// f32 values beyond the half range round to +-inf.
float fp16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_fp16(float f) noexcept;

// bfloat16: the top half of an f32. NaNs stay NaN (never collapse to inf).
float bf16_to_f32(uint16_t b) noexcept;
uint16_t f32_to_bf16(float f) noexcept;

// OCP FP8 E4M3 "fn" (torch.float8_e4m3fn): bias 7, 3 mantissa bits, no
// infinities, S.1111.111 is NaN, largest finite 448, subnormals down to 2^-9.
// f32 -> fp8 saturates: finite values and infinities beyond 448 become
// +-448 (CUDA's __NV_SATFINITE behaviour); NaN becomes NaN.
float fp8_e4m3_to_f32(uint8_t v) noexcept;
uint8_t f32_to_fp8_e4m3(float f) noexcept;

}  // namespace tandem::kernels
