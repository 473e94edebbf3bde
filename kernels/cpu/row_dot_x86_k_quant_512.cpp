// Q5_K and Q6_K x Q8_K rows in 512-bit registers (the avx512 levels), in
// ggml_vec_dot_q5_K_q8_K's and ggml_vec_dot_q6_K_q8_K's orders: the same
// exact int32 lanes per super-block as the 256-bit tiles
// (row_dot_x86_quant.cpp, below AVX-512), so the same results bit for bit.
//
// Why tiles of their own: Q6_K's 256-bit tile spends about 40 instructions
// a 64-byte line (values put together 32 at a time, a vpmulld per 32 values
// for the scales), so at batch 1 a thread read about 19 GB/s of it where a
// plain read takes twice that (Q4_K_M files keep many downs in Q6_K); Q5_K
// (Q5_K_M files' most matrices) rode the 512-bit Q4_K tile, which summed
// each row's mins alone: 31-32 GB/s hot for one thread, 37 here (and
// 38-42 since its values take GFNI's bit matrices where the level has them).
//
// Here a register holds 64 values, put together from one load with per-word
// shifts that treat its two halves differently, and the scales go in as
// int16 through vpmaddwd, whose pairs never span two sub-blocks.
//
// The lanes: register m holds values 64m..64m+63, so its int32 lane i sums
// values 64m+4i..64m+4i+3, which lie in ggml's 32-value chunk 2m + i/8 at
// bytes 4(i%8): ggml's lane i%8. The two halves of the register sum (exact,
// in integers) are then ggml's 8 lanes, converted and fma'd as ggml does.
#include <cmath>

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

// Lanes j of 32 int16 holding entry sel[j] of the 16 int16 in v.
inline __m512i spread16(__m512i v, __m512i sel) { return _mm512_permutexvar_epi16(sel, v); }

// One row's Q5_K super-block, decoded: sub-blocks 2m and 2m+1 (values
// 64m..64m+63) in q[m], their scales in the int16 lanes of sc[m], and the
// mins, one per pair of Q8_K's 16-value sums, in m16.
struct Q5KBlock512 {
  __m512i q[4], sc[4];
  __m256i m16;

  explicit Q5KBlock512(const uint8_t* wb) {
    const __m128i sm = k4_unpack_vec(wb + offsetof(BlockQ5_K, scales));  // sc[0..7], m[0..7]
    const __m512i s16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
    // Register m's low half is sub-block 2m, its high half 2m + 1.
    const __m512i high_half = _mm512_set_epi64(0x0001000100010001, 0x0001000100010001, 0x0001000100010001,
                                          0x0001000100010001, 0, 0, 0, 0);
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) sc[m] = spread16(s16, _mm512_add_epi16(high_half, _mm512_set1_epi16(short(2 * m))));
    // bsums k and k+1 (16 values each) share min k/2: entries 8 + k/2.
    const __m512i pair_min = _mm512_castsi256_si512(
        _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    m16 = _mm512_castsi512_si256(spread16(s16, pair_min));

    // qs bytes 32m..32m+31: sub-block 2m in the low nibbles, 2m + 1 in the
    // high ones; bit j of qh byte l is value l's 5th bit in sub-block j.
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + offsetof(BlockQ5_K, qh))));
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i raw = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + offsetof(BlockQ5_K, qs) + 32 * m)));
      q[m] = value_bits(raw, qh, m);
    }
  }

#if defined(__GFNI__)
  // With GFNI a bit matrix a 64-bit lane picks each byte's bits: the low
  // half's low nibble or the high half's high one, each byte's bit 2m (low
  // half) or 2m + 1 (high) of qh moved to bit 4, both clean, so an or joins
  // them: 3 operations where shifts and masks take 4. One thread, 64 x 2048
  // hot, against the shifts in the same rounds: 1.04-1.05x alone, 1.06-1.07x
  // with the dmins below (stop 58).
  // Row i of an 8 x 8 bit matrix (the byte that makes result bit i) is the
  // matrix's byte 7 - i.
  static __m512i value_bits(__m512i raw, __m512i qh, int m) {
    const auto halves = [](uint64_t lo, uint64_t hi) {
      return _mm512_inserti64x4(_mm512_set1_epi64(int64_t(lo)), _mm256_set1_epi64x(int64_t(hi)), 1);
    };
    const __m512i nibbles = halves(0x0102040800000000ull, 0x1020408000000000ull);  // bits 0-3 <- 0-3 | 4-7
    const __m512i fifth = halves(uint64_t(1u << (2 * m)) << 24, uint64_t(1u << (2 * m + 1)) << 24);  // bit 4
    return _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8(raw, nibbles, 0),
                           _mm512_gf2p8affine_epi64_epi8(qh, fifth, 0));
  }
#else
  // Per-word shifts that treat the halves differently: the nibbles by 0 and
  // 4, qh's bit 2m (low half) and 2m + 1 (high) to bit 4 (the neighbouring
  // byte's bits land elsewhere), then masks.
  static __m512i value_bits(__m512i raw, __m512i qh, int m) {
    const auto counts = [](int a, int b) {
      return _mm512_inserti64x4(_mm512_set1_epi16(short(a)), _mm256_set1_epi16(short(b)), 1);
    };
    const int lo = 2 * m, hi = 2 * m + 1;
    const __m512i fifth_bits = m < 2 ? _mm512_sllv_epi16(qh, counts(4 - lo, 4 - hi))
                                     : _mm512_srlv_epi16(qh, counts(lo - 4, hi - 4));
    // (nibbles & 0x0F) | (fifth_bits & 0x10)
    return _mm512_ternarylogic_epi32(_mm512_srlv_epi16(raw, counts(0, 4)),
                                     _mm512_and_si512(fifth_bits, _mm512_set1_epi8(0x10)), _mm512_set1_epi8(0x0F),
                                     0xEC);
  }
#endif

  // ggml's 8 int32 lanes of sum q * x * scale against one Q8_K block.
  __m256i dot(const uint8_t* xq) const {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i x = _mm512_loadu_si512(xq + 64 * m);
      // u8 x s8 pair sums: |31 * 128 * 2| fits in int16.
      sum = _mm512_add_epi32(sum, _mm512_madd_epi16(_mm512_maddubs_epi16(q[m], x), sc[m]));
    }
    return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
  }
};

// The mins' exact sums of four rows against one token (row i's m16 times
// the token's bsums, in pairs), reduced together: [row 0, 1, 2, 3].
inline __m128i mins4(const __m256i (&m16)[4], const uint8_t* bsums) {
  const __m256i x = load256(bsums);
  const __m256i h01 = _mm256_hadd_epi32(_mm256_madd_epi16(x, m16[0]), _mm256_madd_epi16(x, m16[1]));
  const __m256i h23 = _mm256_hadd_epi32(_mm256_madd_epi16(x, m16[2]), _mm256_madd_epi16(x, m16[3]));
  const __m256i h = _mm256_hadd_epi32(h01, h23);  // [rows' first four lanes | their last four]
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// The mins go into a scalar per row and token by one fma a super-block, as
// ggml's; a tile of four rows keeps the four rows' scalars in the lanes of
// one vector and does the four fmas at once (lane for lane the same
// operations).
template <int R, int T>
struct Q5KTile512 {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    static_assert(R == 1 || R == 4, "drive's tiles");
    __m256 acc[R][T];
    __m128 mins[T];
#pragma GCC unroll 8
    for (auto& row : acc)
#pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (auto& v : mins) v = _mm_setzero_ps();
    const int64_t nb = p.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t woff = size_t(b) * sizeof(BlockQ5_K), aoff = size_t(b) * sizeof(BlockQ8_K);
      __m256i m16[4];
      // The rows' dmin as fp16 lanes, converted together: built in a float
      // array, GCC put the four floats together in general registers and
      // stored them for a vector load that then waited (stop 58: 4% hot).
      // A masked broadcast, not an insert: the insert's lane must be an
      // immediate, which an unoptimised build does not make of i.
      __m128i dmin_h = _mm_setzero_si128();
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const uint8_t* wb = w[i] + woff;
        ah.step(w[i], woff, sizeof(BlockQ5_K));
        const Q5KBlock512 blk(wb);
        m16[i] = blk.m16;
        const auto dmin_bits = short(load_unaligned<uint16_t>(wb + offsetof(BlockQ5_K, dmin)));
        dmin_h = _mm_mask_set1_epi16(dmin_h, __mmask8(1u << i), dmin_bits);
        const float d = half(wb + offsetof(BlockQ5_K, d));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const uint8_t* xb = a[t] + aoff;
          const __m256i isum = blk.dot(xb + offsetof(BlockQ8_K, qs));
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * load_unaligned<float>(xb)),
                                      acc[i][t]);
        }
      }
      const __m128 dmins = _mm_cvtph_ps(dmin_h);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const uint8_t* xb = a[t] + aoff;
        // -(dmin * dx), the sign flipped exactly as the scalar negation
        const __m128 neg = _mm_xor_ps(_mm_mul_ps(dmins, _mm_set1_ps(load_unaligned<float>(xb))), _mm_set1_ps(-0.0f));
        const uint8_t* bsums = xb + offsetof(BlockQ8_K, bsums);
        const __m128i msum =
            R == 4 ? mins4(m16, bsums) : _mm_cvtsi32_si128(hsum256i(_mm256_madd_epi16(load256(bsums), m16[0])));
        mins[t] = _mm_fmadd_ps(neg, _mm_cvtepi32_ps(msum), mins[t]);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      alignas(16) float m[4];
      _mm_store_ps(m, mins[t]);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) out[i][t] = hsum256(acc[i][t]) + m[i];
    }
  }
};

// The tokens' loop is Q5KTile512's, written out again: as a shared helper
// taking a row's sums by reference, the one-token Q6_K tile ran at 50
// instead of 56 GB/s hot (one thread, 64 x 2048).
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

void q5_k_512_rows(const RowDotParams& p) { drive<Q5KTile512>(p); }
void q6_k_512_rows(const RowDotParams& p) { drive<Q6KTile512>(p); }
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
