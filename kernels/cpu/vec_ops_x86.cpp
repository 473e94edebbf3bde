// The vector variants of vec_ops.h, compiled once per level like
// the row_dot_x86*.cpp sources (TANDEM_ROW_DOT_NS names the level).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/vec_ops.h"

#ifndef TANDEM_ROW_DOT_NS
#error "compile with -DTANDEM_ROW_DOT_NS=<level>"
#endif

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
namespace {

// exp(x): x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact
// product), e^r by its Taylor polynomial to degree 6 (Horner), times 2^n.
// Inputs are clamped to [-87.3, 88.7], where the result stays normal or
// reaches +inf as expf's does.
#if defined(__AVX512F__)
using V = __m512;
constexpr int kW = 16;
inline V set1(float v) { return _mm512_set1_ps(v); }
inline V load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
inline V clamp(V x, float lo, float hi) { return _mm512_min_ps(_mm512_max_ps(x, set1(lo)), set1(hi)); }
inline V round_nearest(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V add(V a, V b) { return _mm512_add_ps(a, b); }
inline V times_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }
#else
using V = __m256;
constexpr int kW = 8;
inline V set1(float v) { return _mm256_set1_ps(v); }
inline V load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
inline V clamp(V x, float lo, float hi) { return _mm256_min_ps(_mm256_max_ps(x, set1(lo)), set1(hi)); }
inline V round_nearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
// p * 2^n in two steps (n up to 128 does not fit one exponent field).
inline V times_pow2(V p, V n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h = _mm256_srai_epi32(ni, 1);
  const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
  const V s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
  return mul(mul(p, s1), s2);
}
#endif

inline V vexp(V x) {
  x = clamp(x, -87.3f, 88.7f);
  const V n = round_nearest(mul(x, set1(1.44269504088896341f)));
  V r = fnma(n, set1(0.693359375f), x);
  r = fnma(n, set1(-2.12194440e-4f), r);
  V p = set1(1.0f / 720);
  p = fma(p, r, set1(1.0f / 120));
  p = fma(p, r, set1(1.0f / 24));
  p = fma(p, r, set1(1.0f / 6));
  p = fma(p, r, set1(0.5f));
  p = fma(p, r, set1(1.0f));
  p = fma(p, r, set1(1.0f));
  return times_pow2(p, n);
}

void swiglu(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const V x = load(g + i);
#if defined(__AVX512F__)
    const V s = _mm512_div_ps(x, _mm512_add_ps(set1(1.0f), vexp(_mm512_sub_ps(set1(0.0f), x))));
    store(g + i, _mm512_mul_ps(s, load(u + i)));
#else
    const V s = _mm256_div_ps(x, _mm256_add_ps(set1(1.0f), vexp(_mm256_sub_ps(set1(0.0f), x))));
    store(g + i, _mm256_mul_ps(s, load(u + i)));
#endif
  }
  for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// A multiply, then an add: never fused, as the generic loop (GCC would
// contract these intrinsics into an fma at these levels' -ffp-contract=fast).
__attribute__((optimize("fp-contract=off"))) void add_scaled(float* y, const float* x, float a, int64_t n) {
  int64_t i = 0;
  const V av = set1(a);
  for (; i + kW <= n; i += kW) store(y + i, add(load(y + i), mul(av, load(x + i))));
  for (; i < n; ++i) y[i] += a * x[i];
}

// Integer rounding as f32_to_bf16 (not vcvtne2ps2bf16, which flushes
// subnormal inputs to zero): add 0x7FFF plus the lowest kept bit; NaNs are
// truncated and keep a payload bit.
void to_bf16(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __m512i hi = _mm512_srli_epi32(v, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, abs_mask), inf);
    const __mmask16 bare = _mm512_mask_testn_epi32_mask(nan, hi, _mm512_set1_epi32(0x7F));
    r = _mm512_mask_mov_epi32(r, nan, hi);
    r = _mm512_mask_or_epi32(r, bare, r, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
#endif
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

#if defined(__AVX512F__)
// ggml's x86 Q8_0 activation quantiser (quantize.cpp's quant_q8_0_activation)
// 32 values at a time: amax, id = 127 / amax, q = round-half-even(x * id).
void quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0, out += sizeof(BlockQ8_0)) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t d = f32_to_fp16(amax / 127.0f);
    std::memcpy(out, &d, 2);
    const __m512 v = _mm512_set1_ps(id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, v))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 18), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, v))));
  }
}

// ggml's quantize_row_q8_K_ref (quantize.cpp's quant_q8_k): the value of
// largest magnitude (the first on ties, sign kept) maps to -127, quants are
// min(127, round-half-even(x * -127 / max)), bsums the sums of 16.
void quantize_q8_k(const float* x, uint8_t* out, int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K, out += sizeof(BlockQ8_K)) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < kQK_K; i += 16) m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), m);
    const float amax = _mm512_reduce_max_ps(m);
    BlockQ8_K blk{};
    if (amax != 0.0f) {
      float max = 0.0f;
      for (int i = 0; i < kQK_K; i += 16) {  // the first value of that magnitude
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)),
                                                 _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (hit) {
          max = x[i + __builtin_ctz(hit)];
          break;
        }
      }
      const float iscale = -127.0f / max;
      const __m512 v = _mm512_set1_ps(iscale);
      for (int i = 0; i < kQK_K; i += 16) {
        const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), v)),
                                           _mm512_set1_epi32(127));
        const __m128i q8 = _mm512_cvtepi32_epi8(q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + i), q8);
        blk.bsums[i / 16] = int16_t(_mm512_reduce_add_epi32(q));
      }
      blk.d = 1.0f / iscale;
    }
    std::memcpy(out, &blk, sizeof(blk));
  }
}
#else
void quantize_q8_0(const float* x, uint8_t* out, int64_t n) { quantize_activations(DType::kQ8_0, x, out, size_t(n)); }
void quantize_q8_k(const float* x, uint8_t* out, int64_t n) { quantize_activations(DType::kQ8_K, x, out, size_t(n)); }
#endif

}  // namespace

VecOps vec_ops() { return {swiglu, to_bf16, quantize_q8_0, quantize_q8_k, add_scaled}; }

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
