// The amx level's FP8 E4M3 kernel (128 x 128 block scales, rowmajor) for 2
// or more tokens: each weight is widened to bf16 once for up to 16 tokens
// and multiplied in tiles, where the avx512bf16 kernel widens it once per
// tile of 4 tokens and spends a vdpbf16ps per token on it.
//
// Tiles: A is 16 weight rows x 32 columns, widened (fp8_tables.h: each 64
// columns come out as two vectors of 32, in kFp8OrderA and kFp8OrderB's
// column order); B is the tokens' activations of the same 32 columns in
// the same order, pair i of every token in line i (staged once per step
// for all rows of the call); C is 16 rows x the tokens. A scale block's
// four tdpbf16ps go into a zeroed C, which is then stored and added, times
// the block's scale, to the rows' sums in 16 vectors (lane t: token t), as
// the other levels post-scale each block's dot. Rows in 16s from a multiple
// of 16 (so a tile never straddles a 128-row scale block); a call that
// starts elsewhere, or the rows past the last 16, go to avx512bf16's kernel.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/fp8_tables.h"
#include "kernels/cpu/row_dot_amx.h"

namespace tandem::kernels::amx {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
namespace {

constexpr int64_t kScaleBlock = kFp8ScaleBlock;  // 128
constexpr int64_t kStepCols = 512;               // columns staged at a time
constexpr int64_t kChunkRows = 256;              // rows whose sums wait in `sums`
constexpr int kTilesPerChunk = int(kChunkRows / kMaxM);
// From three tokens: the avx512bf16 tile kernel widens each weight once per 4
// tokens and spends two vdpbf16ps per 64 weights per token, so these tiles
// gained over it (one process, two threads, weights from DRAM, alternating:
// 1.06-1.31x at 2 tokens, 1.33-1.56x at 3, 1.66-1.78x at 4, 2.2x at 5,
// 2.5x at 6, 3.1x at 8, 5x at 16, over 2048 x 7168 gathered and 7168 x
// 2048). One or two tokens take the bit-map loop (fp8_one_token_rows), which
// widens each weight once for both: with two (split activations at batch 1,
// the hot Qwen3 and DeepSeek-V3 layers, alternating) 1.5-2.1x these tiles.
constexpr int64_t kMinTokensFp8 = 3;

// Tile registers: C tmm0; A tmm1, tmm3 (the two halves of 64 columns); B tmm2, tmm4.
void configure(int n) {
  TileConfig c;
  c.set(0, kMaxM, 4 * n);
  c.set(1, kMaxM, 64);
  c.set(2, kMaxM, 4 * n);
  c.set(3, kMaxM, 64);
  c.set(4, kMaxM, 4 * n);
  load_config(c);
}

struct Fp8Amx {
  // The buffers stay uninitialised but for c_out, whose lanes past n (which
  // tile stores leave alone) must be finite.
  Fp8Amx(const RowDotParams& params, int tokens, float* out) : p(params), n(tokens), y(out) {
    for (auto& row : c_out)
      for (float& v : row) v = 0.0f;
  }
  const RowDotParams& p;
  int n;                 // tokens, <= 16
  float* y;              // token 0's outputs
  const uint8_t* a[kMaxM];
  // B tiles of one step: [64-column chunk][half][pair line][token dword]
  alignas(64) uint32_t stage[kStepCols / 64][2][16][16];
  alignas(64) float sums[kTilesPerChunk][kMaxM][16];  // [tile][row][token]
  alignas(64) uint8_t wide[kMaxM][128];              // A tiles of 64 columns: halves side by side
  alignas(64) float c_out[kMaxM][16];

  // The tokens' activations of columns [c0, c1), permuted as the widened
  // weights and set out as B tiles.
  void stage_step(int64_t c0, int64_t c1) {
    const __m512i order_a = _mm512_load_si512(kFp8OrderA), order_b = _mm512_load_si512(kFp8OrderB);
    alignas(64) uint32_t half[2][16];
    for (int64_t c = c0; c < c1; c += 64) {
      const int64_t j = (c - c0) / 64;
      for (int t = 0; t < n; ++t) {
        const uint8_t* x = a[t] + 2 * c;
        const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
        _mm512_store_si512(half[0], _mm512_permutex2var_epi16(x0, order_a, x1));
        _mm512_store_si512(half[1], _mm512_permutex2var_epi16(x0, order_b, x1));
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 16; ++i) stage[j][h][i][t] = half[h][i];
      }
    }
  }

  // Rows r0..r0+15, columns [c0, c1): sums (16 vectors, lane t) += each
  // scale block's dot times its scale. next: the rows the next tile reads.
  void tile(int64_t r0, int64_t c0, int64_t c1, float (&acc)[kMaxM][16], const uint8_t* const (&next)[kMaxM]) {
    const Fp8Widener fp8;
    const uint8_t* w = p.w + size_t(r0) * p.w_row_stride;
    const float* scales = p.scales + size_t(r0 / kScaleBlock) * p.scale_row_stride;
    __m512 s[kMaxM];
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) s[i] = _mm512_load_ps(acc[i]);
    for (int64_t cb = c0; cb < c1; cb += kScaleBlock) {
      _tile_zero(0);
      for (int64_t c = cb; c < cb + kScaleBlock; c += 64) {
#pragma GCC unroll 16
        for (int i = 0; i < kMaxM; ++i) {
          const uint8_t* row = w + size_t(i) * p.w_row_stride + size_t(c);
          if (next[i]) _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T0);
          __m512i wa, wb;
          fp8.widen(_mm512_loadu_si512(row), wa, wb);
          _mm512_store_si512(wide[i], wa);
          _mm512_store_si512(wide[i] + 64, wb);
        }
        const auto& b = stage[(c - c0) / 64];
        TANDEM_TILE_LOAD(1, wide[0], 128);
        TANDEM_TILE_LOAD(2, b[0], 64);
        _tile_dpbf16ps(0, 1, 2);
        TANDEM_TILE_LOAD(3, wide[0] + 64, 128);
        TANDEM_TILE_LOAD(4, b[1], 64);
        _tile_dpbf16ps(0, 3, 4);
      }
      _tile_stored(0, c_out, 64);
      const __m512 scale = _mm512_set1_ps(scales[cb / kScaleBlock]);
#pragma GCC unroll 16
      for (int i = 0; i < kMaxM; ++i) s[i] = _mm512_fmadd_ps(_mm512_load_ps(c_out[i]), scale, s[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) _mm512_store_ps(acc[i], s[i]);
  }

  // Rows [r_begin, r_end) (whole tiles) in chunks of kChunkRows: every step
  // over the chunk's tiles, so one staging serves them all.
  void run(int64_t r_begin, int64_t r_end) {
    configure(n);
    for (int64_t R0 = r_begin; R0 < r_end; R0 += kChunkRows) {
      const int64_t R1 = std::min(r_end, R0 + kChunkRows);
      const int tiles = int((R1 - R0) / kMaxM);
      for (int k = 0; k < tiles; ++k)
        for (auto& row : sums[k])
          for (float& v : row) v = 0.0f;
      for (int64_t c0 = 0; c0 < p.cols; c0 += kStepCols) {
        const int64_t c1 = std::min(p.cols, c0 + kStepCols);
        stage_step(c0, c1);
        for (int k = 0; k < tiles; ++k) {
          const int64_t r0 = R0 + k * kMaxM;
          const uint8_t* next[kMaxM] = {};
          if (k + 1 < tiles)
            for (int i = 0; i < kMaxM; ++i) next[i] = p.w + size_t(r0 + kMaxM + i) * p.w_row_stride;
          tile(r0, c0, c1, sums[k], next);
        }
      }
      for (int k = 0; k < tiles; ++k)
        for (int i = 0; i < kMaxM; ++i)
          for (int t = 0; t < n; ++t) y[size_t(t) * p.y_row_stride + size_t(R0 + k * kMaxM + i)] = sums[k][i][t];
    }
  }
};

}  // namespace

void fp8_rows(const RowDotParams& p) {
  const RowDotFn avx = avx512bf16::find(DType::kF8E4M3);
  const int64_t tiled_end = p.row_begin + (p.row_end - p.row_begin) / kMaxM * kMaxM;
  if (p.layout != WeightLayout::kRowMajor || p.gemm_order || p.n_tokens < kMinTokensFp8 || p.cols % kScaleBlock != 0 ||
      p.row_begin % kMaxM != 0 || tiled_end == p.row_begin)
    return avx(p);
  for (int64_t m0 = 0; m0 < p.n_tokens; m0 += kMaxM) {
    Fp8Amx f(p, int(std::min<int64_t>(kMaxM, p.n_tokens - m0)), p.y + size_t(m0) * p.y_row_stride);
    for (int t = 0; t < f.n; ++t) f.a[t] = activation_row(p, m0 + t);
    f.run(p.row_begin, tiled_end);
  }
  _tile_release();
  if (tiled_end < p.row_end) {
    RowDotParams rest = p;
    rest.row_begin = tiled_end;
    avx(rest);
  }
}

#else
void fp8_rows(const RowDotParams& p) { avx512bf16::find(DType::kF8E4M3)(p); }
#endif

}  // namespace tandem::kernels::amx
