// FP8 E4M3 rowmajor rows at the levels without AVX512_BF16 (avx2, avx512):
// the same lanes, order and floats as row_dot_x86_float.cpp's Fp8Tile, in
// about a third of its instructions:
// - a weight byte widens to f32 with three integer instructions: sign-
//   extended to 32 bits, shifted left 20 and masked, its sign lands on the
//   f32 sign and its 7 magnitude bits on the exponent's low 4 bits and the
//   mantissa's top 3, which is the FP8 value times 2^-120 exactly (zero and
//   the subnormals included: FP8 subnormals become f32 subnormals). Fp8Tile
//   widens through fp16 with ten.
// - the activations widen from bf16 to f32 once per call (on the stack),
//   times 2^112 where every |x| < 2^16, so that the products are Fp8Tile's
//   (w * 2^-120 * x * 2^112 = w * 2^-8 * x, exact in the fma). Calls with a
//   larger |x| multiply each widened weight by 2^112 instead (exact too).
// - FP8's NaN bytes (0x7F, 0xFF) would widen to a finite 480 * 2^-120: a
//   scale block whose marks (fp8_marks.h) are clear has none; a marked
//   block, or any without marks, is searched, and one that holds a NaN byte
//   sets those lanes' bits to a NaN (NaN results stay NaN, their bits aside).
// Subnormal f32 inputs must not be flushed: with MXCSR's DAZ set (by a host
// process's library) the calls go to Fp8Tile.
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot_x86_fp8_widen.h"
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if !defined(__AVX512BF16__)
namespace {

// Fp8Tile's span with f32 activations (4 bytes a value).
//
// avx2's passes of 2 rows by 3 or 4 tokens (WideTile, below) load the
// step's activations first and keep them in registers (the empty asm), each
// row widened in turn: 8 sums, 4 activations, a widened row and the mask
// fit AVX2's 16 registers. Left to itself GCC folded each load into an fma,
// so every activation was loaded once per row. Same fmas, same order.
template <bool kScaledX, bool kNaN, int R, int T>
void wide_span(const uint8_t* const* w, const uint8_t* const* a, int64_t c0, int64_t c1, VF (&acc)[R][T],
               const Ahead& ah) {
  int64_t c = c0;
  for (; c + kLanes <= c1; c += kLanes) {
    if ((c & 63) == 0)
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) ah.at(w[i], size_t(c));
    if constexpr (kLanes == 8 && R == 2 && T >= 3) {
      VF av[T];
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        av[j] = load_f32(a[j] + 4 * c);
        asm("" : "+x"(av[j]));
      }
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const VF wv = widen_fp8<kScaledX, kNaN>(w[i] + c);
        #pragma GCC unroll 8
        for (int j = 0; j < T; ++j) acc[i][j] = vfma(wv, av[j], acc[i][j]);
      }
    } else {
      VF wv[R];
      #pragma GCC unroll 8
      for (int i = 0; i < R; ++i) wv[i] = widen_fp8<kScaledX, kNaN>(w[i] + c);
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        const VF av = load_f32(a[j] + 4 * c);
        #pragma GCC unroll 8
        for (int i = 0; i < R; ++i) acc[i][j] = vfma(wv[i], av, acc[i][j]);
      }
    }
  }
  if (c < c1) {  // zeros past the end, as Fp8Tile
    const size_t n = size_t(c1 - c);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      Tail tw;
      const VF wv = widen_fp8<kScaledX, kNaN>(tw.from(w[i] + c, n));
      #pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        Tail ta;
        acc[i][j] = vfma(wv, load_f32(ta.from(a[j] + 4 * c, 4 * n)), acc[i][j]);
      }
    }
  }
}

// Columns c0..c1 of one scale block, searched for NaN bytes unless the
// rows' marks clear it; 2^-8 times the values, as Fp8Tile's.
template <bool kScaledX>
struct WideSpan {
  template <int R, int T>
  static void run(const RowDotParams& p, const int64_t* rows, const uint8_t* const* w, const uint8_t* const* a,
                  int64_t c0, int64_t c1, VF (&blk)[R][T], const Ahead& ah) {
    bool nan = false;
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      if (!p.fp8_marks ||
          fp8_block_marked(p.fp8_marks + size_t(rows[i]) * fp8_marks_row_bytes(p.cols), c0 / kFp8ScaleBlock))
        nan |= has_fp8_nan(w[i] + c0, c1 - c0);
    if (nan)
      wide_span<kScaledX, true, R, T>(w, a, c0, c1, blk, ah);
    else
      wide_span<kScaledX, false, R, T>(w, a, c0, c1, blk, ah);
  }
};
// A tile of 4 rows by 3 or 4 tokens at avx2 runs as two passes of 2 rows
// (as row_dot_x86_bf16_pairs.cpp's): its 4 x 4 block sums and running sums
// would need 32 of AVX2's 16 registers, and spilled in the loop (the
// passes' prefetches: TwoPassAhead, row_dot_x86_tile.h). One thread,
// weights in L2 (256 x 2048), best of 8 alternated runs: 3 tokens 47 -> 60
// GFLOP/s, 4 to 12 tokens 57 -> 66 (of a 116 peak); two threads from DRAM,
// DeepSeek-V3's 7168 columns at 4 tokens, 121 (docs/cpu-kernels.md, stop
// 62). The same sums in the same order, so the same floats.
template <bool kScaledX, int R, int T>
struct WideTile {
  using Span = WideSpan<kScaledX>;
  static void run(const RowDotParams& p, const int64_t* rows, const uint8_t* const* w, const uint8_t* const* a,
                  float (&out)[R][T], const Ahead& ah) {
    if constexpr (kLanes == 8 && R == 4 && T >= 3) {
      const TwoPassAhead pass(w, ah);
      float o[2][2][T];
      Fp8BlockTile<Span, 256.0f, 2, T>::run(p, rows, w, a, o[0], pass.first);
      Fp8BlockTile<Span, 256.0f, 2, T>::run(p, rows + 2, w + 2, a, o[1], pass.second);
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < T; ++j) out[i][j] = o[i / 2][i % 2][j];
    } else {
      Fp8BlockTile<Span, 256.0f, R, T>::run(p, rows, w, a, out, ah);
    }
  }
};
template <int R, int T> using Fp8ScaledXTile = WideTile<true, R, T>;
template <int R, int T> using Fp8PlainXTile = WideTile<false, R, T>;

}  // namespace

bool try_fp8_wide(const RowDotParams& p) {
  // Under DAZ widened subnormal weights would read as zero (Fp8Tile's vcvtph2ps ignores it).
  if (p.cols * p.n_tokens > kWideFloats || (_mm_getcsr() & 0x40) != 0) return false;
  alignas(64) float x[kWideFloats];
  const bool scaled = fp8_x_scalable(p);
  const VF k = vset1(scaled ? kTwo112 : 1.0f);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* src = activation_row(p, t);
    float* dst = x + t * p.cols;
    int64_t c = 0;
    for (; c + kLanes <= p.cols; c += kLanes) store_f32(dst + c, vmul(load_bf16(src + 2 * c), k));
    if (c < p.cols) {  // the tail through a zeroed buffer, as the spans' tails
      Tail tail;
      alignas(64) float rest[kLanes];
      store_f32(rest, vmul(load_bf16(tail.from(src + 2 * c, size_t(2 * (p.cols - c)))), k));
      for (int64_t i = 0; c + i < p.cols; ++i) dst[c + i] = rest[i];
    }
  }
  RowDotParams q = p;
  q.a = reinterpret_cast<const uint8_t*>(x);
  q.a_row_bytes = size_t(p.cols) * sizeof(float);
  q.a_rows = nullptr;
  if (scaled)
    drive<Fp8ScaledXTile>(q);
  else
    drive<Fp8PlainXTile>(q);
  return true;
}
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
