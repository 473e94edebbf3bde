// Internal to row_dot_x86_fp8_wide.cpp and row_dot_x86_panel.cpp (levels
// without AVX512_BF16): FP8 E4M3 bytes widened to f32 with three integer
// instructions (row_dot_x86_fp8_wide.cpp says how), NaN bytes found and kept.
#pragma once

#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512BF16__)
namespace {

// The f32 activations of one call of row_dot_x86_fp8_wide.cpp: 256 KiB on
// the stack, 9 tokens of DeepSeek-V3's 7168 columns, 32 of its 2048. Stop 62
// doubled it: at 5 to 9 tokens of 7168 columns the calls went to Fp8Tile's
// ten-instruction widening or the panel, which the widened tiles now beat
// (8 tokens, two threads from DRAM: 83 GFLOP/s against the panel's 65).
constexpr int64_t kWideFloats = 65536;

constexpr float kTwo112 = 0x1p112f;
constexpr int kSignExpMant = int(0x87F00000u);  // the bits a widened byte keeps

#if defined(__AVX512F__)
using VI = __m512i;
inline VI widen_fp8_bits(const uint8_t* p) {
  const VI b = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_and_si512(_mm512_slli_epi32(b, 20), _mm512_set1_epi32(kSignExpMant));
}
inline VI nan_where_fp8_nan(VI bits) {  // magnitude 0x7F widened: 0x07F00000
  const __mmask16 m = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FF00000)),
                                              _mm512_set1_epi32(0x07F00000));
  return _mm512_mask_blend_epi32(m, bits, _mm512_set1_epi32(-1));
}
inline VF as_float(VI v) { return _mm512_castsi512_ps(v); }
inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline void store_f32(float* p, VF v) { _mm512_storeu_ps(p, v); }
#else
using VI = __m256i;
inline VI widen_fp8_bits(const uint8_t* p) {
  const VI b = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_slli_epi32(b, 20), _mm256_set1_epi32(kSignExpMant));
}
inline VI nan_where_fp8_nan(VI bits) {
  const VI m =
      _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FF00000)), _mm256_set1_epi32(0x07F00000));
  return _mm256_or_si256(bits, m);
}
inline VF as_float(VI v) { return _mm256_castsi256_ps(v); }
inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline void store_f32(float* p, VF v) { _mm256_storeu_ps(p, v); }
#endif

// kLanes weights from p as f32, times 2^-120 (kScaledX) or 2^-8.
template <bool kScaledX, bool kNaN>
inline VF widen_fp8(const uint8_t* p) {
  VI bits = widen_fp8_bits(p);
  if constexpr (kNaN) bits = nan_where_fp8_nan(bits);
  return kScaledX ? as_float(bits) : vmul(as_float(bits), vset1(kTwo112));
}

// Whether the call's bf16 activations can be scaled by 2^112: every |x| <
// 2^16 (bf16 0x4780; inf and NaN are not).
inline bool fp8_x_scalable(const RowDotParams& p) {
  uint16_t most = 0;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* src = activation_row(p, t);
    for (int64_t c = 0; c < p.cols; ++c) {
      const uint16_t b = load_unaligned<uint16_t>(src + 2 * c) & 0x7FFF;
      most = b > most ? b : most;
    }
  }
  return most < 0x4780;
}

// Whether n bytes at p hold an FP8 NaN.
inline bool has_fp8_nan(const uint8_t* p, int64_t n) {
  int64_t c = 0;
  __m256i any = _mm256_setzero_si256();
  const __m256i mag = _mm256_set1_epi8(0x7F);
  for (; c + 32 <= n; c += 32)
    any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_and_si256(load256(p + c), mag), mag));
  bool found = !_mm256_testz_si256(any, any);
  for (; c < n; ++c) found |= (p[c] & 0x7F) == 0x7F;
  return found;
}

}  // namespace
#endif
}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
