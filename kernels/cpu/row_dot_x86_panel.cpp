// Calls of many tokens (a prefill's) of FP8 E4M3 rowmajor rows at the avx2
// level, as a GEMM. The tiles (row_dot_x86_tile.h) widen every weight once
// per 4 tokens, and hold 4 rows x 4 tokens of sums, more than AVX2's 16
// registers; one thread ran FP8 prefill at 46-49 GFLOP/s of a 95 peak, 33
// where the activations do not fit row_dot_x86_fp8_wide.cpp's buffer
// (DeepSeek-V3's 7168 columns from 5 tokens). Here
// - the activations of up to 64 tokens x 256 columns are widened to f32 and
//   transposed (x[c][t]: a load holds 8 tokens of one column), 66 KiB on
//   the stack;
// - 12 rows at a time are widened to f32 over those columns (a panel, 12
//   KiB on the stack: once for all the tokens);
// - a tile of R rows x TV vectors of 8 tokens (R * TV = 12 sums in
//   registers) takes per column TV loads, R broadcast weights and 12 fmas.
// One thread, weights in L2: 59 GFLOP/s at 16 tokens, 65-70 at 32-64 (7168
// columns: 42 at 8). BF16 the same way ran 62-73 against its tiles' 55 in
// that harness, but slower than them in DeepSeek-V3's layer at 1024 tokens
// (docs/cpu-kernels.md, "Stop 46"), so BF16 keeps its tiles.
//
// Every dot sums in one order whatever the call's tokens, their order or its
// rows: each 128-column block in column order in one f32 lane, times the
// block's scale, the blocks added up in order, then each 256-column chunk's
// sum into y in order. So a token's floats are the same in every call that
// comes here (not the tiles' floats). The weights widen as
// row_dot_x86_fp8_wide.cpp's (the same 2^-120 and 2^112 bookkeeping, NaN
// bytes found per block, not under DAZ).
#include <algorithm>

#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot_x86_fp8_widen.h"
#include "kernels/cpu/row_dot_x86_tile.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {
#if defined(__AVX512F__)
bool try_panel(const RowDotParams&) { return false; }
#else
namespace {

constexpr int64_t kChunkCols = 256;  // columns widened at a time (a multiple of 128)
constexpr int kMaxTokens = 64;       // tokens widened at a time
constexpr int kRows = 12;            // rows of a panel
// The fewest tokens a call needs to come here. One thread, weights in L2
// (the tiles: 49 GFLOP/s, 33 where the activations do not fit
// row_dot_x86_fp8_wide.cpp's buffer): 59 at 16 tokens, 39-46 at 8-12; 42 at
// 8 of 7168 columns. Against stop 62's widened tiles (two threads, 1536-row
// matrices from DRAM, alternated, two rounds): 15 tokens 1.02-1.08x (2048
// and 4096 columns), 13-14 0.84-1.04x, 12 0.83-0.88x.
constexpr int64_t kMinTokens = 15, kUnwidenedMinTokens = 8;

// Transposes 8 vectors of 8 floats: vector i lane j -> r[j] lane i.
inline void transpose8(VF (&r)[8]) {
  VF t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

// How FP8 weights widen (row_dot_x86_fp8_wide.cpp): w<nan>(p) gives the 8
// values at p as f32 times 2^-120 (kScaledX) or 2^-8, for blocks that may
// hold NaN bytes when nan. Bf16X widens the activations.
template <bool kScaledX>
struct WidenFp8 {
  static constexpr int kBytes = 1;
  template <bool kNaN>
  static VF w(const uint8_t* p) { return widen_fp8<kScaledX, kNaN>(p); }
};
struct Bf16X {
  static constexpr int kBytes = 2;
  template <bool>
  static VF w(const uint8_t* p) { return load_bf16(p); }
};

// 8 values of row from column c, zeros past n < 8 of them.
template <class W, bool kNaN>
VF widen8(const uint8_t* row, int64_t c, int64_t n) {
  if (n >= 8) return W::template w<kNaN>(row + W::kBytes * c);
  Tail t;
  return W::template w<kNaN>(t.from(row + W::kBytes * c, size_t(n * W::kBytes)));
}

// One chunk of columns of one chunk of tokens: the tokens' activations as
// f32, column by column (x[c * stride + t], zeros past tn).
struct Chunk {
  alignas(64) float x[(kChunkCols + 8) * kMaxTokens];
  int64_t c0 = 0, n = 0, t0 = 0, tn = 0;
  int64_t stride = 0;  // floats from a column to the next: tn rounded up to 8
};

// Tokens [t0, t0 + tn), columns [c0, c0 + n) into ch, times k.
void widen_activations(const RowDotParams& p, Chunk& ch, float k) {
  const VF kv = vset1(k);
  for (int g = 0; g < ch.tn; g += 8) {
    for (int64_t c = 0; c < ch.n; c += 8) {
      VF r[8];
      for (int i = 0; i < 8; ++i) {
        if (g + i >= ch.tn) {
          r[i] = vzero();
          continue;
        }
        const uint8_t* src = activation_row(p, ch.t0 + g + i);
        r[i] = _mm256_mul_ps(widen8<Bf16X, false>(src, ch.c0 + c, ch.n - c), kv);
      }
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_store_ps(ch.x + (c + j) * ch.stride + g, r[j]);
    }
  }
}

// Rows of one panel, widened to f32 row by row (v[i * kChunkCols + c]).
struct Panel {
  alignas(64) float v[kRows * kChunkCols + 8];
};

// Rows w[0..nr) over the chunk's columns into pn (rows past nr zero); blocks
// that may hold NaN bytes widen keeping them.
template <class W>
void fill_panel(const RowDotParams& p, const Chunk& ch, const uint8_t* const* w, int64_t r0, int nr, Panel& pn) {
  for (int i = 0; i < kRows; ++i) {
    float* dst = pn.v + i * kChunkCols;
    if (i >= nr) {
      for (int64_t c = 0; c < ch.n; c += 8) _mm256_store_ps(dst + c, vzero());
      continue;
    }
    for (int64_t b0 = 0; b0 < ch.n; b0 += kFp8ScaleBlock) {
      const int64_t b1 = std::min(b0 + kFp8ScaleBlock, ch.n);
      bool nan = false;
      const int64_t blk = (ch.c0 + b0) / kFp8ScaleBlock;
      if (!p.fp8_marks || fp8_block_marked(p.fp8_marks + size_t(r0 + i) * fp8_marks_row_bytes(p.cols), blk))
        nan = has_fp8_nan(w[i] + ch.c0 + b0, b1 - b0);
      if (nan)
        for (int64_t c = b0; c < b1; c += 8) _mm256_store_ps(dst + c, widen8<W, true>(w[i], ch.c0 + c, b1 - c));
      else
        for (int64_t c = b0; c < b1; c += 8) _mm256_store_ps(dst + c, widen8<W, false>(w[i], ch.c0 + c, b1 - c));
    }
  }
}

// The R x TV sums of panel rows and token vectors over columns [k0, k1) of
// the chunk, one f32 lane per row and token, in column order.
template <int R, int TV>
void panel_tile(const Panel& pn, int i0, const Chunk& ch, int64_t t, int64_t k0, int64_t k1, VF (&out)[R][TV]) {
  VF acc[R][TV];  // local, so the sums stay in registers through the loop
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < TV; ++v) acc[i][v] = vzero();
  for (int64_t c = k0; c < k1; ++c) {
    VF xv[TV];
#pragma GCC unroll 4
    for (int v = 0; v < TV; ++v) xv[v] = _mm256_load_ps(ch.x + c * ch.stride + t + 8 * v);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const VF w = _mm256_broadcast_ss(pn.v + (i0 + i) * kChunkCols + c);
#pragma GCC unroll 4
      for (int v = 0; v < TV; ++v) acc[i][v] = vfma(w, xv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < TV; ++v) out[i][v] = acc[i][v];
}

// Tokens [t, t + 8 * TV) of the chunk (those below tn) against panel rows
// [i0, i0 + R) (those below nr; y's rows r0 + i), block by block, each
// block's sums times its scale, the chunk's sums added to y (the call's
// first chunk stores).
template <int R, int TV>
void panel_tokens(const RowDotParams& p, const Chunk& ch, const Panel& pn, int64_t r0, int i0, int nr, int64_t t) {
  VF sum[R][TV];
  for (auto& row : sum)
    for (auto& v : row) v = vzero();
  for (int64_t k0 = 0; k0 < ch.n; k0 += kFp8ScaleBlock) {
    VF blk[R][TV];
    panel_tile<R, TV>(pn, i0, ch, t, k0, std::min(k0 + kFp8ScaleBlock, ch.n), blk);
    for (int i = 0; i < R; ++i) {
      // The block's scale, times 2^8, which the widening took off.
      const int64_t row = r0 + std::min(i0 + i, nr - 1);
      const VF s = vset1(256.0f * p.scales[size_t(row / kFp8ScaleBlock) * p.scale_row_stride +
                                           size_t((ch.c0 + k0) / kFp8ScaleBlock)]);
      for (int v = 0; v < TV; ++v) sum[i][v] = vfma(blk[i][v], s, sum[i][v]);
    }
  }
  alignas(32) float out[R][8 * TV];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < TV; ++v) _mm256_store_ps(out[i] + 8 * v, sum[i][v]);
  const bool first = ch.c0 == 0;
  const int rows = std::min(R, nr - i0);
  for (int64_t k = 0; k < 8 * TV && t + k < ch.tn; ++k) {
    float* y = p.y + size_t(ch.t0 + t + k) * p.y_row_stride + size_t(r0 + i0);
    for (int i = 0; i < rows; ++i) y[i] = first ? out[i][k] : y[i] + out[i][k];
  }
}

// The panel's rows in parts of R against tokens [t, t + 8 * TV): R * TV = 12
// sums in registers (R = 12 / TV), each part's rows read once per column.
template <int TV>
void panel_parts(const RowDotParams& p, const Chunk& ch, const Panel& pn, int64_t r0, int nr, int64_t t) {
  constexpr int R = kRows / TV;
  for (int i0 = 0; i0 < nr; i0 += R) panel_tokens<R, TV>(p, ch, pn, r0, i0, nr, t);
}

// Columns [c0, c0 + n) of rows [r0, r1) (those of the call) to L2.
template <class W>
void prefetch_rows(const RowDotParams& p, int64_t c0, int64_t n, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < std::min(r1, p.row_end); ++r) {
    const auto* row = reinterpret_cast<const char*>(p.w + size_t(r) * p.w_row_stride) + W::kBytes * c0;
    for (int64_t b = 0; b < W::kBytes * n; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
  }
}

// Rows [r0, r0 + nr) (nr <= kRows) of the chunk, widened once for all its tokens.
template <class W>
void panel_rows(const RowDotParams& p, const Chunk& ch, int64_t r0, int nr, Panel& pn) {
  const uint8_t* w[kRows];
  for (int i = 0; i < nr; ++i) w[i] = p.w + size_t(r0 + i) * p.w_row_stride;
  // The rows of the panel after next, to L2 while this one computes (the
  // first two of a chunk: panel_call).
  prefetch_rows<W>(p, ch.c0, ch.n, r0 + kRows + nr, r0 + 2 * kRows + nr);
  fill_panel<W>(p, ch, w, r0, nr, pn);
  // Token vectors three at a time, a last four as two pairs. (Four at a
  // time, 3 rows x 4 vectors, take 17 registers: one sum went to the stack,
  // and the tile ran at half speed.)
  for (int64_t t = 0; t < ch.tn;) {
    const int64_t left = (ch.tn - t + 7) / 8;
    if (left == 1) {
      panel_parts<1>(p, ch, pn, r0, nr, t);
      t += 8;
    } else if (left == 2 || left == 4) {
      panel_parts<2>(p, ch, pn, r0, nr, t);
      t += 16;
    } else {
      panel_parts<3>(p, ch, pn, r0, nr, t);
      t += 24;
    }
  }
}

template <class W>
void panel_call(const RowDotParams& p, float x_scale) {
  Chunk ch;
  Panel pn;
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kMaxTokens) {
    ch.t0 = t0;
    ch.tn = std::min<int64_t>(kMaxTokens, p.n_tokens - t0);
    ch.stride = (ch.tn + 7) / 8 * 8;
    for (int64_t c0 = 0; c0 < p.cols; c0 += kChunkCols) {
      ch.c0 = c0;
      ch.n = std::min(kChunkCols, p.cols - c0);
      prefetch_rows<W>(p, c0, ch.n, p.row_begin, p.row_begin + 2 * kRows);
      widen_activations(p, ch, x_scale);
      for (int64_t r = p.row_begin; r < p.row_end; r += kRows)
        panel_rows<W>(p, ch, r, int(std::min<int64_t>(kRows, p.row_end - r)), pn);
    }
  }
}

}  // namespace

bool try_panel(const RowDotParams& p) {
  if (p.wtype != DType::kF8E4M3 || p.layout != WeightLayout::kRowMajor || p.row_end <= p.row_begin) return false;
  if (p.n_tokens < (p.n_tokens * p.cols > kWideFloats ? kUnwidenedMinTokens : kMinTokens)) return false;
  // gemm_order asks for the tiles (row_dot.h); under DAZ widened subnormal
  // weights would read as zero.
  if (p.gemm_order || (_mm_getcsr() & 0x40) != 0) return false;
  if (fp8_x_scalable(p))
    panel_call<WidenFp8<true>>(p, kTwo112);
  else
    panel_call<WidenFp8<false>>(p, 1.0f);
  return true;
}
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
