// Internal to row_dot_x86_x16.cpp and row_dot_x86_x16z.cpp (after
// row_dot_x86_tile.h): what the bf16_x16 and bf16_x16z kernels share at the
// avx512bf16 level. Include nowhere else.
#pragma once

#if defined(__AVX512BF16__)
namespace tandem::kernels::TANDEM_ROW_DOT_NS::x16 {

// Activation pair k (columns 2k and 2k + 1) of a token, in every lane.
inline __m512bh pair_of(const uint8_t* a, int64_t k) {
  return (__m512bh)_mm512_set1_epi32(load_unaligned<int32_t>(a + 4 * k));
}

// _mm512_reduce_add_ps's tree over 16 vectors, lane by lane (f32_dot.h's
// reduce16): halves, quarters, then pairs.
inline __m512 reduce16_lanes(const __m512* v) {
  __m512 t8[8], t4[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) t8[i] = _mm512_add_ps(v[8 + i], v[i]);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) t4[i] = _mm512_add_ps(t8[4 + i], t8[i]);
  return _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
}

// float(double(c1) + double(c2)) per lane, as ggml adds the two reduced sums.
inline void store_vec_dot(float* y, __m512 c1, __m512 c2) {
  const __m512d lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(c1)),
                                   _mm512_cvtps_pd(_mm512_castps512_ps256(c2)));
  const __m512d hi = _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c1), 1))),
                                   _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c2), 1))));
  _mm256_storeu_ps(y, _mm512_cvtpd_ps(lo));
  _mm256_storeu_ps(y + 8, _mm512_cvtpd_ps(hi));
}

// A tile's groups start at w, group_bytes apart in the weights and y_group
// floats apart in the outputs (far-apart groups: the prefill's thirds).
struct TileGroups {
  const uint8_t* w;
  size_t group_bytes, y_group;
};

// What a prefill tile's loop prefetches: the first token group streams the
// weights from DRAM ahead of its arithmetic; the second (experts with more
// tokens than a pass) asks for the next step's lines while the step's own
// sit in L2; later ones ask for nothing (row_dot_x86_x16.cpp).
enum class TileAhead { kNone, kStream, kNextStep };

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS::x16
#endif
