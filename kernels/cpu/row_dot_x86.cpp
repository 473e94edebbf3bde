// The vector row dots (row_dot.h), one source compiled once per level with
// that level's compiler flags (kernels/cpu/CMakeLists.txt): avx2 (256-bit),
// avx512 (512-bit F/BW/DQ/VL) and avx512bf16 (+ vdpbf16ps and vpdpbusd).
// TANDEM_ROW_DOT_NS names the level's namespace. The differences between
// levels stay inside this file, in the small helpers below.
//
// Shape of every kernel: a tile of R weight rows (4, or 1 for the last rows)
// by T tokens (1..4) keeps R*T accumulators in registers and walks the
// columns once, so each weight byte is loaded once per 4 tokens and the rows'
// streams run side by side for the hardware prefetchers.
//
// Integer types use 256-bit blocks at every level: one Q8_0 block or one
// 32-value sub-block of a k-quant is one register, and u8 x s8 products go
// through vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (exact either way: no
// pair of products here reaches int16's limit).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_dot.h"

#ifndef TANDEM_ROW_DOT_NS
#error "compile with -DTANDEM_ROW_DOT_NS=<level>"
#endif

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
namespace {

// ---- float vectors: 16 lanes with AVX-512, 8 with AVX2 ----------------------------
#if defined(__AVX512F__)
using VF = __m512;
constexpr int kLanes = 16;
inline VF vzero() { return _mm512_setzero_ps(); }
inline VF vset1(float v) { return _mm512_set1_ps(v); }
inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(VF v) { return _mm512_reduce_add_ps(v); }
inline VF load_f32(const uint8_t* p) { return _mm512_loadu_ps(p); }
inline VF load_bf16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// 16 FP8 values as f32 * 2^-8: the FP8 bits placed into an fp16 (whose
// exponent bias is 8 more) convert exactly, subnormals included.
inline VF load_fp8_scaled(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
                                    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  return _mm512_cvtph_ps(h);
}
#else
using VF = __m256;
constexpr int kLanes = 8;
inline VF vzero() { return _mm256_setzero_ps(); }
inline VF vset1(float v) { return _mm256_set1_ps(v); }
inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(VF v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline VF load_f32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline VF load_bf16(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VF load_fp8_scaled(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7),
                                 _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  return _mm256_cvtph_ps(h);
}
#endif

// A tail of n < step values, copied into a zeroed buffer so the full-width
// loads above read zeros past the end of the row (never past the mapping).
struct Tail {
  alignas(64) uint8_t bytes[256] = {};
  const uint8_t* from(const uint8_t* p, size_t n_bytes) {
    std::memcpy(bytes, p, n_bytes);
    return bytes;
  }
};

// ---- 256-bit integer dot: sum of 4 u8*s8 products per int32 lane ---------------
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum256i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
inline float half(const uint8_t* p) { return _cvtsh_ss(load_unaligned<uint16_t>(p)); }

// Software prefetch kPrefetch bytes ahead in every weight row. Each row is a
// stream of its own; with 4 rows per thread the hardware prefetchers alone
// leave DRAM idle part of the time (one core, BF16 GEMV: 22.7 GB/s without,
// 31.9 GB/s with 2 KiB ahead). Near a row's end the target moves on to the
// same row of the next tile (`next` bytes further), so short rows (a down
// projection's 2 KiB) do not start cold. Prefetches never fault.
constexpr size_t kPrefetch = 2048;
struct Ahead {
  size_t row_bytes = 0;  // bytes of one weight row
  intptr_t next = 0;     // from a row to the same row of the next tile
  void at(const uint8_t* row, size_t pos) const {
    const size_t t = pos + kPrefetch;
    const uintptr_t q = t < row_bytes ? uintptr_t(row) + t : uintptr_t(row) + uintptr_t(next) + (t - row_bytes);
    _mm_prefetch(reinterpret_cast<const char*>(q), _MM_HINT_T0);
  }
  // One prefetch per 64 bytes of a step of `step` bytes at `pos`.
  void step(const uint8_t* row, size_t pos, size_t step_bytes) const {
    for (size_t o = 0; o < step_bytes; o += 64) at(row, pos + o);
  }
};

// ---- the tile driver -------------------------------------------------------------
// Tile<R, T>::run(p, rows[R], w[R], a[T], out[R][T], ahead) computes the
// R x T dots of weight rows rows[0..R) (row pointers w) and tokens a.
//
// The R rows of a tile are not neighbours: a call's row range is cut into R
// quarters and tile j takes row j of each, so every thread reads R streams
// far apart, each sequential (one quarter, row after row). DRAM serves such
// streams faster than R neighbouring rows (its banks work in parallel): a
// read of 4 separate streams measured 84 GB/s where one stream gave 62.
template <template <int, int> class Tile, int R, int T>
void tile(const RowDotParams& p, const int64_t (&rows)[R], int64_t t, const Ahead& ah) {
  const uint8_t* w[R];
  const uint8_t* a[T];
  float out[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) w[i] = p.w + size_t(rows[i]) * p.w_row_stride;
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) a[j] = activation_row(p, t + j);
  Tile<R, T>::run(p, rows, w, a, out, ah);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) p.y[size_t(t + j) * p.y_row_stride + size_t(rows[i])] = out[i][j];
}

// With several token groups per tile only the first one streams its rows
// from DRAM, and the in-row prefetch distance is too short in time for a
// compute-dense tile (a prefill's). So the later groups each ask for a share
// of the next tile's rows (to L2; the in-row prefetch then brings them to
// L1), and the next tile starts warm.
template <int R>
void prefetch_next_rows(const RowDotParams& p, const int64_t (&rows)[R], const Ahead& ah,
                        int64_t share, int64_t shares) {
  const size_t span = (ah.row_bytes + 63) / 64, b0 = span * size_t(share) / size_t(shares),
               b1 = span * size_t(share + 1) / size_t(shares);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const uint8_t* next = p.w + size_t(rows[i]) * p.w_row_stride + size_t(ah.next);
    for (size_t b = b0; b < b1; ++b) _mm_prefetch(reinterpret_cast<const char*>(next + 64 * b), _MM_HINT_T1);
  }
}

template <template <int, int> class Tile, int R>
void tokens(const RowDotParams& p, const int64_t (&rows)[R], const Ahead& ah) {
  int64_t t = 0;
  const int64_t groups = p.n_tokens / 4;
  for (; t + 4 <= p.n_tokens; t += 4) {
    if (t > 0) prefetch_next_rows<R>(p, rows, ah, t / 4 - 1, groups - 1);
    tile<Tile, R, 4>(p, rows, t, ah);
  }
  switch (p.n_tokens - t) {
    case 3: tile<Tile, R, 3>(p, rows, t, ah); break;
    case 2: tile<Tile, R, 2>(p, rows, t, ah); break;
    case 1: tile<Tile, R, 1>(p, rows, t, ah); break;
    default: break;
  }
}

// The first rows start cold: ask for their first kPrefetch bytes before
// computing (later rows were prefetched while their predecessors ran).
inline void prefetch_row_start(const RowDotParams& p, int64_t r) {
  const uint8_t* row = p.w + size_t(r) * p.w_row_stride;
  for (size_t o = 0; o < kPrefetch; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(row + o), _MM_HINT_T0);
}

template <template <int, int> class Tile>
void drive(const RowDotParams& p) {
  const int64_t n = p.row_end - p.row_begin, q = n / 4;
  const size_t row_bytes = size_t(*bytes_for(p.wtype, uint64_t(p.cols)));
  // Each stream's next row is the next one; the last rows run on into the
  // caller's next rows (then_rows), when given.
  const Ahead ah{row_bytes, intptr_t(p.w_row_stride)};
  for (int64_t i = 0; i < 4 && q > 0; ++i) prefetch_row_start(p, p.row_begin + i * q);
  for (int64_t j = 0; j < q; ++j) {
    const int64_t rows[4] = {p.row_begin + j, p.row_begin + q + j, p.row_begin + 2 * q + j,
                             p.row_begin + 3 * q + j};
    if (j + 1 == q && p.then_rows && 4 * q == n) {
      Ahead last = ah;
      last.next = intptr_t(uintptr_t(p.then_rows) - uintptr_t(p.w + size_t(rows[3]) * p.w_row_stride));
      tokens<Tile, 4>(p, rows, last);
    } else {
      tokens<Tile, 4>(p, rows, ah);
    }
  }
  for (int64_t r = p.row_begin + 4 * q; r < p.row_end; ++r) {
    const int64_t rows[1] = {r};
    tokens<Tile, 1>(p, rows, ah);
  }
}

// ---- F32, BF16 (widened), FP8 (widened) ------------------------------------------
// Load(p, i) gives kLanes weights from element i; the activation rows are
// f32 (F32) or bf16 (BF16, FP8), AL gives them.
struct LoadF32 {
  static constexpr int kBytes = 4;
  static VF w(const uint8_t* p) { return load_f32(p); }
  static VF a(const uint8_t* p) { return load_f32(p); }
};
struct LoadBf16 {
  static constexpr int kBytes = 2;
  static VF w(const uint8_t* p) { return load_bf16(p); }
  static VF a(const uint8_t* p) { return load_bf16(p); }
};

template <class L, int R, int T>
void widened_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
                  VF (&acc)[R][T], const Ahead& ah) {
  constexpr int B = L::kBytes;
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) {
    VF wv[R];
    if ((B * c) % 64 < B * kLanes)  // once per 64 bytes
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], B * c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::w(w[i] + B * c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const VF av = L::a(a[j] + B * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c) * B;
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const VF wv = L::w(tw.from(w[i] + B * c, n));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        acc[i][j] = vfma(wv, L::a(ta.from(a[j] + B * c, n)), acc[i][j]);
      }
    }
  }
}

template <class L>
struct Widened {
  template <int R, int T>
  struct Tile {
    static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w,
                    const uint8_t* const* a, float (&out)[R][T], const Ahead& ah) {
      VF acc[R][T];
      #pragma GCC unroll 8
      for (auto& row : acc)
        #pragma GCC unroll 8
        for (auto& v : row) v = vzero();
      widened_span<L, R, T>(w, a, 0, p.cols, acc, ah);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        #pragma GCC unroll 8
        for (int j = 0; j < T; ++j) out[i][j] = vsum(acc[i][j]);
    }
  };
};
template <int R, int T> using F32Tile = Widened<LoadF32>::template Tile<R, T>;

#if defined(__AVX512BF16__)
// bf16 pairs with vdpbf16ps: 32 values per instruction.
inline __m512i load_w_bf16x32(const uint8_t* p) { return _mm512_loadu_si512(p); }
// 32 FP8 values as bf16. Sign-extended to 16 bits, shifted by 4 and masked
// (0x87F0), an FP8 lands in bf16's sign, exponent and mantissa fields with
// its exponent bias 120 short, which one add restores; the sign bit is clear
// of the add's carries. The 7 subnormal magnitudes (m * 2^-9), whose exponent
// field is 0, come from a table instead (vdpbf16ps would flush bf16
// subnormals anyway), with the sign put back.
inline __m512i load_fp8_as_bf16x32(const uint8_t* p) {
  const __m512i s = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  __m512i v = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(s, 4), _mm512_set1_epi16(int16_t(0x87F0))),
                               _mm512_set1_epi16(120 << 7));
  const __m512i sub = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0x3C60, 0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80,
                                       0x3B00, 0);
  const __mmask32 tiny = _mm512_testn_epi16_mask(s, _mm512_set1_epi16(0x78));
  v = _mm512_mask_permutexvar_epi16(v, tiny, s, sub);  // index: the low 5 bits, 0mmm
  // v | (s & 0x8000): the sign, for the table's lanes
  return _mm512_ternarylogic_epi32(v, s, _mm512_set1_epi16(int16_t(0x8000)), 0xF8);
}

// Columns [c0, c1) of bf16 activations against weights given as bf16 by
// LoadW (32 at a time), with vdpbf16ps.
template <int WB, __m512i (*LoadW)(const uint8_t*), int R, int T>
void dpbf16_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
                 __m512 (&acc)[R][T], const Ahead& ah) {
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32) {
    __m512i wv[R];
    if (WB == 2 || (c & 63) == 0)
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], WB * c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = LoadW(w[i] + WB * c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a[j] + 2 * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv[i], av);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const __m512i wv = LoadW(tw.from(w[i] + WB * c, n * WB));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        const __m512bh av = (__m512bh)_mm512_loadu_si512(ta.from(a[j] + 2 * c, n * 2));
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv, av);
      }
    }
  }
}

template <int R, int T>
struct Bf16Tile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m512 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm512_setzero_ps();
    dpbf16_span<2, load_w_bf16x32, R, T>(w, a, 0, p.cols, acc, ah);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

#if defined(__AVX512VBMI__)
// FP8 -> bf16 through two 128-entry byte tables (vpermi2b): the high and the
// low byte of every magnitude's bf16, subnormals included; the sign is put
// back into the high byte. Interleaving low and high bytes (vpunpck*bw)
// yields the bf16 values of columns [0-7, 16-23, 32-39, 48-55] and
// [8-15, ...] of each 64, so the activations are permuted (vpermt2w) the
// same way, once per token for all R rows. 8 instructions per 64 weights
// where the arithmetic conversion took 18.
struct Fp8Tables {
  alignas(64) uint8_t hi[128], lo[128];
  constexpr Fp8Tables() : hi(), lo() {
    for (int v = 0; v < 128; ++v) {
      const int e = v >> 3, m = v & 7;
      int bits = 0;
      if (v == 127) {
        bits = 0x7FC0;  // NaN
      } else if (e > 0) {
        bits = ((e + 120) << 7) | (m << 4);
      } else if (m > 0) {  // m * 2^-9, normal in bf16
        const int k = m >= 4 ? 2 : m >= 2 ? 1 : 0;
        bits = ((118 + k) << 7) | ((m - (1 << k)) << (7 - k));
      }
      hi[v] = uint8_t(bits >> 8);
      lo[v] = uint8_t(bits & 0xFF);
    }
  }
};
alignas(64) constexpr Fp8Tables kFp8Tables{};
alignas(64) constexpr int16_t kFp8OrderA[32] = {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18,
                                                19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
                                                38, 39, 48, 49, 50, 51, 52, 53, 54, 55};
alignas(64) constexpr int16_t kFp8OrderB[32] = {8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26,
                                                27, 28, 29, 30, 31, 40, 41, 42, 43, 44, 45,
                                                46, 47, 56, 57, 58, 59, 60, 61, 62, 63};

template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              __m512 (&acc)[R][T], const Ahead& ah) {
  const __m512i hi0 = _mm512_load_si512(kFp8Tables.hi), hi1 = _mm512_load_si512(kFp8Tables.hi + 64);
  const __m512i lo0 = _mm512_load_si512(kFp8Tables.lo), lo1 = _mm512_load_si512(kFp8Tables.lo + 64);
  const __m512i order_a = _mm512_load_si512(kFp8OrderA), order_b = _mm512_load_si512(kFp8OrderB);
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  auto step = [&](const uint8_t* const* wp, const uint8_t* const* ap) {
    __m512i xa[T], xb[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i x0 = _mm512_loadu_si512(ap[t]), x1 = _mm512_loadu_si512(ap[t] + 64);
      xa[t] = _mm512_permutex2var_epi16(x0, order_a, x1);
      xb[t] = _mm512_permutex2var_epi16(x0, order_b, x1);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i q = _mm512_loadu_si512(wp[i]);
      __m512i h = _mm512_permutex2var_epi8(hi0, q, hi1);
      const __m512i l = _mm512_permutex2var_epi8(lo0, q, lo1);
      h = _mm512_ternarylogic_epi32(h, q, sign, 0xF8);  // h | (q & 0x80)
      const __m512bh wa = (__m512bh)_mm512_unpacklo_epi8(l, h), wb = (__m512bh)_mm512_unpackhi_epi8(l, h);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wa, (__m512bh)xa[t]);
        acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wb, (__m512bh)xb[t]);
      }
    }
  };
  int64_t c = c0;
  for (; c + 64 <= c1; c += 64) {
    const uint8_t* wp[R];
    const uint8_t* ap[T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      wp[i] = w[i] + c;
      ah.at(w[i], size_t(c));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) ap[t] = a[t] + 2 * c;
    step(wp, ap);
  }
  if (c < c1) {  // a ragged end: zero-padded copies
    const size_t n = size_t(c1 - c);
    Tail tw[R], ta[T];
    const uint8_t* wp[R];
    const uint8_t* ap[T];
    for (int i = 0; i < R; ++i) wp[i] = tw[i].from(w[i] + c, n);
    for (int t = 0; t < T; ++t) ap[t] = ta[t].from(a[t] + 2 * c, 2 * n);
    step(wp, ap);
  }
}
#else
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              __m512 (&acc)[R][T], const Ahead& ah) {
  dpbf16_span<1, load_fp8_as_bf16x32, R, T>(w, a, c0, c1, acc, ah);
}
#endif

template <int R, int T>
struct Fp8Tile {
  static void run(const RowDotParams& p, const int64_t* rows, const uint8_t* const* w,
                  const uint8_t* const* a, float (&out)[R][T], const Ahead& ah) {
    __m512 sum[R][T];
    #pragma GCC unroll 8
    for (auto& row : sum)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < p.cols; c0 += kFp8ScaleBlock) {
      __m512 blk[R][T];
      #pragma GCC unroll 8
      for (auto& row : blk)
        #pragma GCC unroll 8
        for (auto& v : row) v = _mm512_setzero_ps();
      const int64_t c1 = c0 + kFp8ScaleBlock < p.cols ? c0 + kFp8ScaleBlock : p.cols;
      fp8_span<R, T>(w, a, c0, c1, blk, ah);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 s = _mm512_set1_ps(
            p.scales[size_t(rows[i] / kFp8ScaleBlock) * p.scale_row_stride + size_t(c0 / kFp8ScaleBlock)]);
        #pragma GCC unroll 8
        for (int j = 0; j < T; ++j) sum[i][j] = _mm512_fmadd_ps(blk[i][j], s, sum[i][j]);
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = _mm512_reduce_add_ps(sum[i][j]);
  }
};
#else
template <int R, int T> using Bf16Tile = Widened<LoadBf16>::template Tile<R, T>;

struct LoadFp8 {
  static constexpr int kBytes = 1;
  static VF w(const uint8_t* p) { return load_fp8_scaled(p); }
  static VF a(const uint8_t* p) { return load_bf16(p); }
};
// The activation pointer advances by 2 bytes per value, the weights by 1.
template <int R, int T>
void fp8_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1,
              VF (&acc)[R][T], const Ahead& ah) {
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) {
    VF wv[R];
    if ((c & 63) == 0)
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], size_t(c));
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = load_fp8_scaled(w[i] + c);
    #pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const VF av = load_bf16(a[j] + 2 * c);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
    }
  }
  if (c < c1) {
    const size_t n = size_t(c1 - c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const VF wv = load_fp8_scaled(tw.from(w[i] + c, n));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        acc[i][j] = vfma(wv, load_bf16(ta.from(a[j] + 2 * c, 2 * n)), acc[i][j]);
      }
    }
  }
}

template <int R, int T>
struct Fp8Tile {
  static void run(const RowDotParams& p, const int64_t* rows, const uint8_t* const* w,
                  const uint8_t* const* a, float (&out)[R][T], const Ahead& ah) {
    VF sum[R][T];
    #pragma GCC unroll 8
    for (auto& row : sum)
      #pragma GCC unroll 8
      for (auto& v : row) v = vzero();
    for (int64_t c0 = 0; c0 < p.cols; c0 += kFp8ScaleBlock) {
      VF blk[R][T];
      #pragma GCC unroll 8
      for (auto& row : blk)
        #pragma GCC unroll 8
        for (auto& v : row) v = vzero();
      const int64_t c1 = c0 + kFp8ScaleBlock < p.cols ? c0 + kFp8ScaleBlock : p.cols;
      fp8_span<R, T>(w, a, c0, c1, blk, ah);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        // 256 undoes the 2^-8 of load_fp8_scaled (exact).
        const VF s = vset1(256.0f * p.scales[size_t(rows[i] / kFp8ScaleBlock) * p.scale_row_stride +
                                              size_t(c0 / kFp8ScaleBlock)]);
        #pragma GCC unroll 8
        for (int j = 0; j < T; ++j) sum[i][j] = vfma(blk[i][j], s, sum[i][j]);
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = vsum(sum[i][j]);
  }
};
#endif

// ---- Q8_0 x Q8_0 -------------------------------------------------------------------
// Per 32-value block: |w| (u8) against x with w's sign, one int32 vector,
// scaled by d_w * d_x into an f32 vector.
template <int R, int T>
struct Q8_0Tile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
    const int64_t nb = p.cols / kQK8_0;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t off = size_t(b) * sizeof(BlockQ8_0);
      __m256i wq[R], wabs[R];
      float dw[R];
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        ah.at(w[i], off);
        wq[i] = load256(w[i] + off + 2);
        wabs[i] = _mm256_sign_epi8(wq[i], wq[i]);
        dw[i] = half(w[i] + off);
      }
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const __m256i xq = load256(a[j] + off + 2);
        const float dx = half(a[j] + off);
        #pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i s = dot_u8s8(wabs[i], _mm256_sign_epi8(xq, wq[i]));
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[i] * dx), acc[i][j]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = hsum256(acc[i][j]);
  }
};

// ---- k-quants x Q8_K -----------------------------------------------------------------
// A super-block of 256 values in 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 of 16
// (Q6_K) with small integer scales: the integer dots of a super-block are
// scaled by their sub-block scales in int32 and summed, then converted to
// f32 once with d_w * d_x; the mins (Q4_K, Q5_K) and Q6_K's -32 offset go
// through Q8_K's precomputed 16-value sums (bsums).
struct Q8KRef {
  float d;
  const uint8_t* block;
  explicit Q8KRef(const uint8_t* b) : d(load_unaligned<float>(b)), block(b) {}
  const uint8_t* qs(int k) const { return block + offsetof(BlockQ8_K, qs) + 32 * k; }
  int32_t bsum(int j) const {
    return load_unaligned<int16_t>(block + offsetof(BlockQ8_K, bsums) + 2 * j);
  }
};

struct K4Scales {
  int32_t sc[8], m[8];
  explicit K4Scales(const uint8_t* scales) {
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      uint8_t s, mm;
      k4_scale_min(j, scales, &s, &mm);
      sc[j] = s;
      m[j] = mm;
    }
  }
};

// Q4_K and Q5_K share everything but where the 5th bit comes from.
template <bool kFive, int R, int T>
void k45_tile(const RowDotParams& p, const uint8_t* const* w, const uint8_t* const* a,
              float (&out)[R][T], const Ahead& ah) {
  constexpr size_t kBlock = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kFive ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  __m256 acc[R][T];
  float mins[R][T] = {};
  #pragma GCC unroll 8
  for (auto& row : acc)
    #pragma GCC unroll 8
    for (auto& v : row) v = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t nb = p.cols / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* wb = w[i] + woff;
      ah.step(w[i], woff, kBlock);
      const K4Scales ks(wb + 4);
      const float d = half(wb), dmin = half(wb + 2);
      __m256i q[8];
      #pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = load256(wb + kQs + 32 * c);
        q[2 * c] = _mm256_and_si256(raw, low4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      }
      if constexpr (kFive) {
        const __m256i hb = load256(wb + offsetof(BlockQ5_K, qh));
        const __m256i one = _mm256_set1_epi8(1);
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          // bit j of every qh byte is the 5th bit of sub-block j
          const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hb, j), one);
          q[j] = _mm256_or_si256(q[j], _mm256_slli_epi16(bit, 4));
        }
      }
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const Q8KRef x(a[t] + aoff);
        __m256i isum = _mm256_setzero_si256();
        int32_t msum = 0;
        #pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          const __m256i s = dot_u8s8(q[j], load256(x.qs(j)));
          isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, _mm256_set1_epi32(ks.sc[j])));
          msum += ks.m[j] * (x.bsum(2 * j) + x.bsum(2 * j + 1));
        }
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][t]);
        mins[i][t] += dmin * x.d * float(msum);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) out[i][t] = hsum256(acc[i][t]) - mins[i][t];
}

#if defined(__AVX512F__)
// The 512-bit Q4_K/Q5_K tile. One 64-byte load of qs holds the low nibbles
// of sub-blocks (0, 2) and the high ones of (1, 3) (then 4..7 likewise), so
// the activations are gathered per token once into the same pairs, X[k],
// shared by the R rows. Per register: vpmaddubsw (u4 x s8 pairs, exact in
// int16) then vpdpwssd (or vpmaddwd + add) with the sub-block scales as
// int16, into one int32 sum per super-block; the mins go through the pair
// sums of Q8_K's bsums with vpmaddwd.
alignas(64) constexpr int16_t kK4ScaleIndex[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};
constexpr int kK4Pair[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

// ggml's unpacking of the 12 scale bytes: sc[0..7] into bytes 0..7, m[0..7]
// into bytes 8..15.
inline void k4_unpack(const uint8_t* scales, uint32_t u[4]) {
  std::memcpy(u, scales, 12);
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  const uint32_t m03 = u[1] & k1;
  u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  u[2] = m03;
  u[0] &= k1;
}

inline __m512i pair256(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

template <bool kFive, int R, int T>
void k45_tile512(const RowDotParams& p, const uint8_t* const* w, const uint8_t* const* a,
                 float (&out)[R][T], const Ahead& ah) {
  constexpr size_t kBlock = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr size_t kQs = kFive ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  __m512 acc[R][T];
  #pragma GCC unroll 8
  for (auto& row : acc)
    #pragma GCC unroll 8
    for (auto& v : row) v = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const int64_t nb = p.cols / kQK_K;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t woff = size_t(b) * kBlock, aoff = size_t(b) * sizeof(BlockQ8_K);
    __m512i X[T][4];
    __m128i pairs[T];
    float dx[T];
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = a[t] + aoff;
      const uint8_t* qs = xb + offsetof(BlockQ8_K, qs);
      #pragma GCC unroll 8
      for (int k = 0; k < 4; ++k) X[t][k] = pair256(qs + 32 * kK4Pair[k][0], qs + 32 * kK4Pair[k][1]);
      const __m256i bs = load256(xb + offsetof(BlockQ8_K, bsums));
      pairs[t] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      dx[t] = load_unaligned<float>(xb);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const uint8_t* wb = w[i] + woff;
      ah.step(w[i], woff, kBlock);
      uint32_t sm[4];
      k4_unpack(wb + 4, sm);
      const float d = half(wb), dmin = half(wb + 2);
      const __m512i sc16 = _mm512_castsi128_si512(
          _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm))));
      const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 2)));
      __m512i S[4], Q[4];
      #pragma GCC unroll 8
      for (int k = 0; k < 4; ++k)
        S[k] = _mm512_permutexvar_epi16(_mm512_load_si512(kK4ScaleIndex[k]), sc16);
      const __m512i raw0 = _mm512_loadu_si512(wb + kQs), raw1 = _mm512_loadu_si512(wb + kQs + 64);
      Q[0] = _mm512_and_si512(raw0, low4);
      Q[1] = _mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4);
      Q[2] = _mm512_and_si512(raw1, low4);
      Q[3] = _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4);
      if constexpr (kFive) {
        const __m512i hb = _mm512_broadcast_i64x4(load256(wb + offsetof(BlockQ5_K, qh)));
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k) {
          const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << kK4Pair[k][0])),
                                                  _mm256_set1_epi8(char(1 << kK4Pair[k][1])), 1);
          Q[k] = _mm512_mask_add_epi8(Q[k], _mm512_test_epi8_mask(hb, bits), Q[k], _mm512_set1_epi8(16));
        }
      }
      #pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        // two chains of two, so the dots' latency does not serialise a row
        __m512i isum0 = _mm512_setzero_si512(), isum1 = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int k = 0; k < 4; k += 2) {
          const __m512i p0 = _mm512_maddubs_epi16(Q[k], X[t][k]);
          const __m512i p1 = _mm512_maddubs_epi16(Q[k + 1], X[t][k + 1]);
#if defined(__AVX512VNNI__)
          isum0 = _mm512_dpwssd_epi32(isum0, p0, S[k]);
          isum1 = _mm512_dpwssd_epi32(isum1, p1, S[k + 1]);
#else
          isum0 = _mm512_add_epi32(isum0, _mm512_madd_epi16(p0, S[k]));
          isum1 = _mm512_add_epi32(isum1, _mm512_madd_epi16(p1, S[k + 1]));
#endif
        }
        const __m512i isum = _mm512_add_epi32(isum0, isum1);
        const __m128i msum = _mm_madd_epi16(mins, pairs[t]);
        acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * dx[t]), acc[i][t]);
        acc[i][t] = _mm512_fmadd_ps(_mm512_zextps128_ps512(_mm_cvtepi32_ps(msum)),
                                    _mm512_set1_ps(-dmin * dx[t]), acc[i][t]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int t = 0; t < T; ++t) out[i][t] = _mm512_reduce_add_ps(acc[i][t]);
}
#define TANDEM_K45_TILE k45_tile512
#else
#define TANDEM_K45_TILE k45_tile
#endif

template <int R, int T>
struct Q4KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    TANDEM_K45_TILE<false, R, T>(p, w, a, out, ah);
  }
};
template <int R, int T>
struct Q5KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    TANDEM_K45_TILE<true, R, T>(p, w, a, out, ah);
  }
};

// Q6_K: value = d * sc[j] * (q - 32), q = 4 low bits from ql and 2 high bits
// from qh; the 32 values of one register span two 16-value sub-blocks.
template <int R, int T>
struct Q6KTile {
  static void run(const RowDotParams& p, const int64_t*, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    __m256 acc[R][T];
    #pragma GCC unroll 8
    for (auto& row : acc)
      #pragma GCC unroll 8
      for (auto& v : row) v = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
    const int64_t nb = p.cols / kQK_K;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t woff = size_t(b) * sizeof(BlockQ6_K), aoff = size_t(b) * sizeof(BlockQ8_K);
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const uint8_t* wb = w[i] + woff;
        ah.step(w[i], woff, sizeof(BlockQ6_K));
        const auto* sc = reinterpret_cast<const int8_t*>(wb + offsetof(BlockQ6_K, scales));
        const float d = half(wb + offsetof(BlockQ6_K, d));
        __m256i q[8];  // q[k] holds values 32k .. 32k+31
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = wb + 64 * h;
          const __m256i qh = load256(wb + offsetof(BlockQ6_K, qh) + 32 * h);
          const __m256i l0 = load256(ql), l1 = load256(ql + 32);
          auto hi = [&](int shift) {
            return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), two), 4);
          };
          q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4), hi(0));
          q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), hi(2));
          q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), hi(4));
          q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), hi(6));
        }
        #pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const Q8KRef x(a[t] + aoff);
          __m256i isum = _mm256_setzero_si256();
          int32_t offset = 0;
          #pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            const __m256i s = dot_u8s8(q[k], load256(x.qs(k)));
            // lanes 0-3: sub-block 2k, lanes 4-7: sub-block 2k+1
            const __m256i scv = _mm256_setr_m128i(_mm_set1_epi32(sc[2 * k]), _mm_set1_epi32(sc[2 * k + 1]));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(s, scv));
            offset += sc[2 * k] * x.bsum(2 * k) + sc[2 * k + 1] * x.bsum(2 * k + 1);
          }
          isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc[i][t]);
        }
      }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) out[i][j] = hsum256(acc[i][j]);
  }
};

}  // namespace

RowDotFn find(DType wtype) {
  switch (wtype) {
    case DType::kF32: return drive<F32Tile>;
    case DType::kBF16: return drive<Bf16Tile>;
    case DType::kF8E4M3: return drive<Fp8Tile>;
    case DType::kQ8_0: return drive<Q8_0Tile>;
    case DType::kQ4_K: return drive<Q4KTile>;
    case DType::kQ5_K: return drive<Q5KTile>;
    case DType::kQ6_K: return drive<Q6KTile>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
