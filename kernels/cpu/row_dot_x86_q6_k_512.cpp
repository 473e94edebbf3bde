// Q6_K x Q8_K rows in 512-bit registers (the avx512 levels), in
// ggml_vec_dot_q6_K_q8_K's order: the same exact int32 lanes per
// super-block as the 256-bit tile (row_dot_x86_quant.cpp), so the same
// results bit for bit.
//
// Why its own tile: the 256-bit one spends about 40 instructions a 64-byte
// line (the 6-bit values put together in halves, a vpmulld per 32 values
// for the scales), so at batch 1 a thread reads about 19 GB/s of Q6_K
// where a plain read takes twice that (Q4_K_M files keep many downs in
// Q6_K, and Q6_K files all). Here a register holds 64 values: four
// registers a super-block, each put together from one load of ql and the
// half of qh it needs with four operations (per-word shifts take the two
// quarters of qh at once), and the scales applied in int16 by vpmaddwd,
// whose pairs never span two 16-value sub-blocks.
//
// The lanes: register m holds values 64m..64m+63, so its int32 lane i sums
// values 64m+4i..64m+4i+3, which lie in ggml's 32-value chunk 2m + i/8 at
// bytes 4(i%8): ggml's lane i%8. The two halves of the register sum (exact,
// in integers) are then ggml's 8 lanes, converted and fma'd as ggml does.
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BW__)
namespace {

// One row's super-block, decoded: values 64m..64m+63 in q[m] (0..63, the
// -32 still to take), and each value pair's scale in the int16 lanes of
// sc[m].
struct Q6KBlock512 {
  __m512i q[4], sc[4];

  explicit Q6KBlock512(const uint8_t* wb) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), two_bits = _mm512_set1_epi8(0x30);
    // Per 16-bit word: the low 256 bits take qh's bits 0-1 (and 4-5), the
    // high 256 bits bits 2-3 (and 6-7), all brought to bits 4-5.
    const __m512i up = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                        0x0002000200020002, 0x0004000400040004, 0x0004000400040004,
                                        0x0004000400040004, 0x0004000400040004);
    const __m512i down = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                          0x0002000200020002, 0, 0, 0, 0);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // ql bytes 0..31 hold values 0..31 (low nibbles) and 64..95 (high),
      // bytes 32..63 values 32..63 and 96..127: one load, both in order.
      const __m512i l = _mm512_loadu_si512(wb + offsetof(BlockQ6_K, ql) + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + offsetof(BlockQ6_K, qh) + 32 * h)));
      const __m512i hi0 = _mm512_and_si512(_mm512_sllv_epi16(qh, up), two_bits);
      const __m512i hi1 = _mm512_and_si512(_mm512_srlv_epi16(qh, down), two_bits);
      // (a & 0x0F) | b, b having only bits 4-5
      q[2 * h] = _mm512_ternarylogic_epi32(l, hi0, low4, 0xEC);
      q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), hi1, low4, 0xEC);
    }
    // Pair j of register m: values 64m + 2j, +1, of sub-block 4m + j/8.
    const __m512i s16 = _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + offsetof(BlockQ6_K, scales)))));
    const __m512i pair_sub = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
                                              1, 0, 0, 0, 0, 0, 0, 0, 0);
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m)
      sc[m] = _mm512_permutexvar_epi16(_mm512_add_epi16(pair_sub, _mm512_set1_epi16(short(4 * m))), s16);
  }

  // ggml's 8 int32 lanes of sum (q - 32) * x * scale against one Q8_K block.
  __m256i dot(const uint8_t* xq) const {
    const __m512i m32 = _mm512_set1_epi8(32);
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i x = _mm512_loadu_si512(xq + 64 * m);
      // u8 x s8 pair sums: |63 * 128 * 2| and the difference fit in int16.
      const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(q[m], x), _mm512_maddubs_epi16(m32, x));
      sum = _mm512_add_epi32(sum, _mm512_madd_epi16(p, sc[m]));
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
  }
};

template <int R, int T>
struct Q6KTile512 {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (auto& row : acc)
#pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
    const int64_t nb = p.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t woff = size_t(b) * sizeof(BlockQ6_K), aoff = size_t(b) * sizeof(BlockQ8_K);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const uint8_t* wb = w[i] + woff;
        ah.step(w[i], woff, sizeof(BlockQ6_K));
        const Q6KBlock512 blk(wb);
        const float d = half(wb + offsetof(BlockQ6_K, d));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const uint8_t* xb = a[t] + aoff;
          const __m256i isum = blk.dot(xb + offsetof(BlockQ8_K, qs));
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * load_unaligned<float>(xb)),
                                      acc[i][t]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) out[i][t] = hsum256(acc[i][t]);
  }
};

}  // namespace

void q6_k_512_rows(const RowDotParams& p) { drive<Q6KTile512>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
