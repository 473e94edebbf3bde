// The amx level's Q8_0 kernel (q8_0_x4) for several tokens: each 32-column
// block's integer dots of 16 weight rows and up to 16 tokens in one tdpbssd,
// where the avx512bf16 tile spends a vpdpbusd, a conversion, a scale and an
// fma per 2 rows, 32 columns and token.
//
// Tiles: A is 16 weight rows x a block's 32 int8s: four q8_0_x4 groups,
// whose block already holds its 4 rows' values one after the other (stored
// + 128, so they are staged with the sign bit flipped back); B is the
// tokens' int8s of the same block, dword i of every token in line i (staged
// once per step for all rows of the call); C is 16 rows x the tokens in
// int32, the exact block dots. C is stored and each row's lane t adds
// float(dot) * (d_w * d_x[t]): the block's scales once per block, as the
// other levels do, one fma per block where they add 8 lanes' (within
// (blocks + 2) * 2^-24 * sum|w*x| of the generic kernel; weight_layout_test).
// Rows in 16s from row_begin; the rows past the last 16, and a last pass
// of fewer than kMinTokensQ8 tokens, go to avx512bf16's kernel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_dot_amx.h"

namespace tandem::kernels::amx {

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
namespace {

constexpr int64_t kStepBlocks = 64;   // blocks (2048 columns) staged at a time
constexpr int64_t kChunkRows = 256;   // rows whose sums wait in `sums`
constexpr int kTilesPerChunk = int(kChunkRows / kMaxM);
constexpr int kGroups = kMaxM / kX4Rows;  // q8_0_x4 groups per tile
constexpr int64_t kBlockBytes = int64_t(sizeof(BlockQ8_0));
// Blocks per batch (below). Hot, one thread, 256 x 2048, against the
// kernel without the pipeline, alternating: 1.2-1.8x at 8 and 16 tokens;
// batches of 4 and 8 no better.
constexpr int kBatch = 2;

// Tile registers: two blocks in turn, C tmm0 and tmm3, A tmm1 and tmm4, B
// tmm2 and tmm5.
void configure(int n) {
  TileConfig c;
  c.set(0, kMaxM, 4 * n);
  c.set(1, kMaxM, kQK8_0);
  c.set(2, kQK8_0 / 4, 4 * n);
  c.set(3, kMaxM, 4 * n);
  c.set(4, kMaxM, kQK8_0);
  c.set(5, kQK8_0 / 4, 4 * n);
  load_config(c);
}

struct Q8Amx {
  // The buffers stay uninitialised but for c_out and dx, whose lanes past n
  // (which tile stores and the staging leave alone) must be finite.
  Q8Amx(const RowDotParams& params, int tokens, float* out) : p(params), n(tokens), y(out) {
    std::memset(c_out, 0, sizeof c_out);
    std::memset(dx, 0, sizeof dx);
  }
  const RowDotParams& p;
  int n;     // tokens, <= 16
  float* y;  // token 0's outputs
  const uint8_t* a[kMaxM];
  // B tiles of one step: [block][dword line][token]
  alignas(64) uint32_t stage[kStepBlocks][kQK8_0 / 4][16];
  alignas(64) float dx[kStepBlocks][16];             // the tokens' block scales
  alignas(64) float sums[kTilesPerChunk][kMaxM][16];  // [tile][row][token]
  // Blocks go through the tiles kBatch at a time, software-pipelined: a
  // batch's tiles run while the next batch's A tiles are staged and the
  // last batch's C tiles are scaled, so neither the tile loads wait for the
  // staging stores nor the scaling for the tile stores.
  alignas(64) int8_t wide[2][kBatch][kMaxM][kQK8_0];  // A tiles
  alignas(64) float dw[2][kBatch][kMaxM];              // their rows' scales
  alignas(64) int32_t c_out[2][kBatch][kMaxM][16];

  // Blocks [b, b + cnt) of the tile's groups into wide[buf], dw[buf].
  void stage_weights(const uint8_t* const (&grp)[kGroups], const uint8_t* const* next, int64_t b, int cnt, int buf) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int j = 0; j < cnt; ++j) {
      const size_t off = size_t(b + j) * kQ8_0X4GroupBlock;
#pragma GCC unroll 4
      for (int g = 0; g < kGroups; ++g) {
        const uint8_t* gb = grp[g] + off;
        if (next) {
          // 136 bytes a block: three lines cover every line it can touch
          _mm_prefetch(reinterpret_cast<const char*>(next[g] + off), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(next[g] + off + 64), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(next[g] + off + 128), _MM_HINT_T0);
        }
        _mm_store_ps(dw[buf][j] + kX4Rows * g, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb))));
        _mm512_store_si512(wide[buf][j][kX4Rows * g], _mm512_xor_si512(_mm512_loadu_si512(gb + 8), flip));
        _mm512_store_si512(wide[buf][j][kX4Rows * g + 2], _mm512_xor_si512(_mm512_loadu_si512(gb + 72), flip));
      }
    }
  }

  // The integer dots of staged blocks j0.. (cnt of them) into c_out[buf]:
  // two C tiles in turn (tmm0 and tmm3), so one's store overlaps the other's product.
  void dots(int64_t j0, int cnt, int buf) {
    for (int j = 0; j < cnt; j += 2) {
      TANDEM_TILE_LOAD(1, wide[buf][j][0], kQK8_0);
      TANDEM_TILE_LOAD(2, stage[j0 + j][0], 64);
      _tile_zero(0);
      _tile_dpbssd(0, 1, 2);
      if (j + 1 < cnt) {
        TANDEM_TILE_LOAD(4, wide[buf][j + 1][0], kQK8_0);
        TANDEM_TILE_LOAD(5, stage[j0 + j + 1][0], 64);
        _tile_zero(3);
        _tile_dpbssd(3, 4, 5);
      }
      _tile_stored(0, c_out[buf][j], 64);
      if (j + 1 < cnt) _tile_stored(3, c_out[buf][j + 1], 64);
    }
  }

  void scale(__m512 (&s)[kMaxM], int64_t j0, int cnt, int buf) {
    for (int j = 0; j < cnt; ++j) {
      const __m512 xs = _mm512_load_ps(dx[j0 + j]);
#pragma GCC unroll 16
      for (int i = 0; i < kMaxM; ++i)
        s[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c_out[buf][j][i])),
                               _mm512_mul_ps(xs, _mm512_set1_ps(dw[buf][j][i])), s[i]);
    }
  }

  void stage_step(int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j = b - b0;
      for (int t = 0; t < n; ++t) {
        const uint8_t* blk = a[t] + size_t(b * kBlockBytes);
        uint16_t d;
        std::memcpy(&d, blk, 2);
        dx[j][t] = _cvtsh_ss(d);
        for (int i = 0; i < kQK8_0 / 4; ++i) std::memcpy(&stage[j][i][t], blk + 2 + 4 * i, 4);
      }
    }
  }

  // Rows r0..r0+15, blocks [b0, b1): sums (16 vectors, lane t) += each
  // block's dot times its scales. next: the groups the next tile reads.
  void tile(int64_t r0, int64_t b0, int64_t b1, float (&acc)[kMaxM][16], const uint8_t* const* next) {
    const uint8_t* grp[kGroups];
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) grp[g] = p.w + size_t(r0 + kX4Rows * g) * p.w_row_stride;
    __m512 s[kMaxM];
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) s[i] = _mm512_load_ps(acc[i]);
    int buf = 0;
    int cnt = int(std::min<int64_t>(kBatch, b1 - b0));
    stage_weights(grp, next, b0, cnt, buf);
    for (int64_t b = b0; b < b1;) {
      dots(b - b0, cnt, buf);
      const int64_t bn = b + cnt;
      const int cn = int(std::min<int64_t>(kBatch, b1 - bn));
      if (cn > 0) stage_weights(grp, next, bn, cn, buf ^ 1);
      scale(s, b - b0, cnt, buf);
      b = bn;
      cnt = cn;
      buf ^= 1;
    }
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) _mm512_store_ps(acc[i], s[i]);
  }

  // Rows [r_begin, r_end) (whole tiles) in chunks of kChunkRows: every step
  // over the chunk's tiles, so one staging serves them all.
  void run(int64_t r_begin, int64_t r_end) {
    configure(n);
    const int64_t nb = p.cols / kQK8_0;
    for (int64_t R0 = r_begin; R0 < r_end; R0 += kChunkRows) {
      const int64_t R1 = std::min(r_end, R0 + kChunkRows);
      const int tiles = int((R1 - R0) / kMaxM);
      for (int k = 0; k < tiles; ++k)
        for (auto& row : sums[k])
          for (float& v : row) v = 0.0f;
      for (int64_t b0 = 0; b0 < nb; b0 += kStepBlocks) {
        const int64_t b1 = std::min(nb, b0 + kStepBlocks);
        stage_step(b0, b1);
        for (int k = 0; k < tiles; ++k) {
          const int64_t r0 = R0 + k * kMaxM;
          const uint8_t* next[kGroups];
          for (int g = 0; g < kGroups; ++g) next[g] = p.w + size_t(r0 + kMaxM + kX4Rows * g) * p.w_row_stride;
          tile(r0, b0, b1, sums[k], k + 1 < tiles ? next : nullptr);
        }
      }
      for (int k = 0; k < tiles; ++k)
        for (int i = 0; i < kMaxM; ++i)
          for (int t = 0; t < n; ++t) y[size_t(t) * p.y_row_stride + size_t(R0 + k * kMaxM + i)] = sums[k][i][t];
    }
  }
};

}  // namespace
void q8_0_rows(const RowDotParams& p) {
  const RowDotFn avx = avx512bf16::find(DType::kQ8_0);
  const int64_t tiled_end = p.row_begin + (p.row_end - p.row_begin) / kMaxM * kMaxM;
  if (p.layout != WeightLayout::kQ8_0X4 || p.n_tokens < kMinTokensQ8 || tiled_end == p.row_begin) return avx(p);
  int64_t m0 = 0;
  for (; p.n_tokens - m0 >= kMinTokensQ8; m0 += kMaxM) {
    Q8Amx q(p, int(std::min<int64_t>(kMaxM, p.n_tokens - m0)), p.y + size_t(m0) * p.y_row_stride);
    for (int t = 0; t < q.n; ++t) q.a[t] = activation_row(p, m0 + t);
    q.run(p.row_begin, tiled_end);
  }
  _tile_release();
  if (m0 < p.n_tokens) {  // the last few tokens, every row
    RowDotParams rest = p;
    rest.n_tokens = p.n_tokens - m0;
    if (p.a_rows)
      rest.a_rows = p.a_rows + m0;
    else
      rest.a = p.a + size_t(m0) * p.a_row_bytes;
    rest.y = p.y + size_t(m0) * p.y_row_stride;
    avx(rest);
  }
  if (tiled_end < p.row_end) {  // the tiled tokens' rows past the last 16
    RowDotParams rest = p;
    rest.n_tokens = std::min(m0, p.n_tokens);
    rest.row_begin = tiled_end;
    avx(rest);
  }
}

#else
void q8_0_rows(const RowDotParams& p) { avx512bf16::find(DType::kQ8_0)(p); }
#endif

}  // namespace tandem::kernels::amx
