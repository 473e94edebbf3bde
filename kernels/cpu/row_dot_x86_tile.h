// Internal to the per-level row-dot sources (row_dot_x86*.cpp, compiled once
// per level with that level's flags, TANDEM_ROW_DOT_NS naming its namespace):
// the vector helpers that differ between levels and the tile driver that every
// kernel shares. Include nowhere else.
//
// Shape of every kernel: a tile of R weight rows (4, or 1 for the last rows)
// by T tokens (1..4) keeps R*T accumulators in registers and walks the
// columns once, so each weight byte is loaded once per 4 tokens and the rows'
// streams run side by side for the hardware prefetchers.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/float_convert.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_dot.h"

#ifndef TANDEM_ROW_DOT_NS
#error "compile with -DTANDEM_ROW_DOT_NS=<level>"
#endif

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

// The kernels of each source file, by weight type (nullptr: not there).
RowDotFn find_float(DType wtype);
RowDotFn find_quant(DType wtype);
// Q4_K and Q8_0 stored as q4_k_x4 and q8_0_x4 (weight_layout.h): row_dot_x86_x4.cpp (avx2:
// row_dot_x86_q4_k_x4_256.cpp) and row_dot_x86_q8_0_x4.cpp.
void q4_k_x4_rows(const RowDotParams& p);
// Q5_K stored as q5_k_x4, row_dot_x86_x4.cpp (avx2: row_dot_x86_q4_k_x4_256.cpp).
void q5_k_x4_rows(const RowDotParams& p);
// Q6_K stored as q6_k_x4, row_dot_x86_q6_k_x4.cpp (avx2: row_dot_x86_q6_k_x4_256.cpp).
void q6_k_x4_rows(const RowDotParams& p);
void q8_0_x4_rows(const RowDotParams& p);
// Q4_K rowmajor rows in the GEMV order below AVX-512, row_dot_x86_q4_k_256.cpp.
void q4_k_gemv256_rows(const RowDotParams& p);
// Q5_K and Q6_K rowmajor rows at the AVX-512 levels, row_dot_x86_k_quant_512.cpp.
void q5_k_512_rows(const RowDotParams& p);
void q6_k_512_rows(const RowDotParams& p);
// q8_0_x4 summed as the amx level's Q8_0 tiles (one fma per block; row_dot_amx.h).
void q8_0_x4_block_rows(const RowDotParams& p);
// BF16 stored as bf16_x16, row_dot_x86_x16.cpp.
void bf16_x16_rows(const RowDotParams& p);
// BF16 stored as bf16_x16z, row_dot_x86_x16z.cpp (below avx512bf16: the reference).
void bf16_x16z_rows(const RowDotParams& p);
// FP8 stored as fp8_x16, row_dot_x86_fp8_x16.cpp, and Q8_0 as q8_0_x16,
// row_dot_x86_q8_0_x16.cpp (below avx512bf16: the reference).
void fp8_x16_rows(const RowDotParams& p);
void q8_0_x16_rows(const RowDotParams& p);
// FP8 over whole scale blocks, up to kFp8LoopMaxCols columns (row_dot.h),
// row_dot_x86_fp8_loop.cpp: false (nothing done) where this level or call
// has no such loop.
bool try_fp8_loop(const RowDotParams& p);
// FP8 rowmajor rows below avx512bf16 with the activations widened once per
// call, row_dot_x86_fp8_wide.cpp: false (nothing done) where they would not
// fit its buffer.
bool try_fp8_wide(const RowDotParams& p);
// BF16 rowmajor rows at the avx2 level (only there), a column pair per
// 32-bit lane: row_dot_x86_bf16_pairs.cpp.
void bf16_pair_rows(const RowDotParams& p);
// FP8 rowmajor rows of many tokens at the avx2 level, as a GEMM
// (row_dot_x86_panel.cpp): false (nothing done) at other levels, for other
// types and layouts, fewer tokens than pay, gemm_order and under DAZ.
bool try_panel(const RowDotParams& p);

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
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7F));
  __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                              _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  // 0x7F/0xFF (NaN) would land on a finite fp16: give it the all-ones exponent
  h = _mm256_or_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7C00)));
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
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7F));
  __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
  h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)), _mm_set1_epi16(0x7C00)));  // NaN
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

// Q4_K's and Q5_K's 12 scale bytes unpacked as ggml does, in one register:
// bytes 0..7 sc[0..7], 8..15 m[0..7]. Reads 16 bytes from `scales` (the 12
// scale bytes and the 4 after them, of qs or qh). ggml's masks on the
// 32-bit words u0..u2, in vector lanes: [u0 & 0x3f.., u2 & 0x0f.. | (u0 >> 6
// & 0x03..) << 4, u1 & 0x3f.., u2 >> 4 & 0x0f.. | (u1 >> 6 & 0x03..) << 4].
// Stop 56: 3-5% faster for the Q5_K tile (one thread, hot) than two byte
// shuffles and their masks.
inline __m128i k4_unpack_vec(const uint8_t* scales) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
  const __m128i lo_words = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i hi_words = _mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2);
  return _mm_or_si128(_mm_and_si128(lo_words, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                      _mm_and_si128(hi_words, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}

// f.template operator()<N>() for the run-time n in 1..kMax (nothing
// otherwise): a pass of n tokens as a tile of N, its sums in registers.
template <int kMax, class F>
inline void with_tokens(int64_t n, F&& f) {
  if constexpr (kMax >= 1) {
    if (n == kMax)
      f.template operator()<kMax>();
    else
      with_tokens<kMax - 1>(n, f);
  }
}

// Software prefetch kPrefetch bytes ahead in every weight row. Each row is a
// stream of its own; with 4 rows per thread the hardware prefetchers alone
// leave DRAM idle part of the time (one core, BF16 GEMV: 22.7 GB/s without,
// 31.9 GB/s with 2 KiB ahead). Near a row's end the target moves on to the
// same row of the next tile (`next` bytes further), so short rows (a down
// projection's 2 KiB) do not start cold. Prefetches never fault. A Zen 4
// leaves the rows to its prefetchers (cpu_prefetch(); see drive()).
//
// Always inlined, as are prefetch_next_rows and its loop's asm: GCC counts
// a prefetch as having no effect (prefetch_kept_test.sh), took these
// members for const functions and dropped every call, so from stop 59 to 62
// the tiles built on them asked for nothing (docs/cpu-kernels.md, stop 62;
// stop 59's batch-1 measure of leaving the rows to a Zen 4 thus held for
// every token count: Q5_K, Q6_K and Q4_K + Q6_K, ten alternated runs, of a
// plain read, at reads of 52-60 GB/s 0.63-0.89 -> 0.67-0.93, below 35
// within -5.5% to +4%).
constexpr size_t kPrefetch = 2048;
struct Ahead {
  size_t row_bytes = 0;  // bytes of one weight row
  intptr_t next = 0;     // from a row to the same row of the next tile
  bool to_caller = false;  // next leads from the call's last tile to the caller's then_rows
  bool ask = true;         // false leaves the rows to the CPU (drive() decides)
  [[gnu::always_inline]] void at(const uint8_t* row, size_t pos) const {
    if (!ask) return;
    const size_t t = pos + kPrefetch;
    const uintptr_t q = t < row_bytes ? uintptr_t(row) + t : uintptr_t(row) + uintptr_t(next) + (t - row_bytes);
    _mm_prefetch(reinterpret_cast<const char*>(q), _MM_HINT_T0);
  }
  // One prefetch per 64 bytes of a step of `step` bytes at `pos`.
  [[gnu::always_inline]] void step(const uint8_t* row, size_t pos, size_t step_bytes) const {
    for (size_t o = 0; o < step_bytes; o += 64) at(row, pos + o);
  }
};

// A tile of 4 rows run as two passes of 2 (rows 0, 1 then 2, 3), where its
// sums do not fit the registers at once: the passes' Aheads. drive() gives
// the rows a quarter of the call apart (w[2] - w[0] == w[3] - w[1]); the
// first pass's prefetches run on into the second pass's rows, the second's
// into the next tile's first rows (ah.next leads one row on), or, in a
// call's last tile, into the caller's then_rows, which it keeps.
struct TwoPassAhead {
  Ahead first, second;
  TwoPassAhead(const uint8_t* const* w, const Ahead& ah) : first(ah), second(ah) {
    const intptr_t half = intptr_t(w[2] - w[0]);
    first.next = half;
    if (!ah.to_caller) second.next = ah.next - half;
  }
};

// ---- FP8's scale blocks ----------------------------------------------------------
// A tile (see below) of FP8 rows: Span::template run<R, T>(p, rows, w, a, c0,
// c1, blk, ah) adds columns c0..c1 (one scale block) of each row and token
// into blk, as the value over kUnscale; each block's sums times its scale
// (times kUnscale, exact) go into running sums, reduced at the end. The
// FP8 kernels of every level differ only in their Span.
template <class Span, float kUnscale, int R, int T>
struct Fp8BlockTile {
  static void run(const RowDotParams& p, const int64_t* rows, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
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
      Span::template run<R, T>(p, rows, w, a, c0, c1, blk, ah);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const VF s = vset1(kUnscale * p.scales[size_t(rows[i] / kFp8ScaleBlock) * p.scale_row_stride +
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
[[gnu::always_inline]] inline void prefetch_next_rows(const RowDotParams& p, const int64_t (&rows)[R], const Ahead& ah,
                        int64_t share, int64_t shares) {
  const size_t span = (ah.row_bytes + 63) / 64, b0 = span * size_t(share) / size_t(shares),
               b1 = span * size_t(share + 1) / size_t(shares);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    // In integers: next may lead below the row or out of the mapping.
    const uintptr_t next = uintptr_t(p.w + size_t(rows[i]) * p.w_row_stride) + uintptr_t(ah.next);
    for (size_t b = b0; b < b1; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(next + 64 * b), _MM_HINT_T1);
      asm volatile("");  // a loop of prefetches alone is deleted (-ffinite-loops)
    }
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
  Ahead ah{row_bytes, intptr_t(p.w_row_stride)};
  // These tiles ask for their rows at every token count where the profile
  // asks for one token's (cpu_prefetch(); not asks_for_stream's rule), and
  // leave them to the CPU on a Zen 4. From stop 59 to 62 the compiler had
  // dropped the requests, so a Zen 4 ran them without; put back there, they
  // slowed avx512bf16's BF16 tiles at 3, 4 and 8 tokens to 0.76-0.95 (two
  // threads over matrices from DRAM, alternated in one process), and forced
  // avx2's BF16 pairs at 2 tokens to 0.76-0.89 (at 8: 1.05-1.12); Q8_0 and
  // FP8 ran within +-5% either way (docs/cpu-kernels.md, stop 62). Other
  // CPUs keep the requests they were tuned with before stop 59.
  ah.ask = prefetch_profile(p) == CpuPrefetch::kSoftware;
  for (int64_t i = 0; i < 4 && q > 0; ++i) prefetch_row_start(p, p.row_begin + i * q);
  for (int64_t j = 0; j < q; ++j) {
    const int64_t rows[4] = {p.row_begin + j, p.row_begin + q + j, p.row_begin + 2 * q + j,
                             p.row_begin + 3 * q + j};
    if (j + 1 == q && p.then_rows && 4 * q == n) {
      Ahead last = ah;
      last.next = intptr_t(uintptr_t(p.then_rows) - uintptr_t(p.w + size_t(rows[3]) * p.w_row_stride));
      last.to_caller = true;
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

}  // namespace
}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
