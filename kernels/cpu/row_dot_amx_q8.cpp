// The amx level's Q8_0 kernel (q8_0_x4) for 4 or more tokens: a block's
// integer dots of 16 weight rows and up to 16 tokens in one tdpbssd (up to 8
// tokens: two blocks in one), where the avx512bf16 tile spends a vpdpbusd, a
// conversion, a scale and an fma per 2 rows, 32 columns and token.
//
// Tiles: A is 16 weight rows x a block's 32 int8s: four q8_0_x4 groups,
// whose block already holds its 4 rows' values one after the other (stored
// + 128, so they are staged with the sign bit flipped back); B is the
// tokens' int8s of the same block, dword i of every token in line i (staged
// once per step for all rows of the call); C is 16 rows x the tokens in
// int32, the exact block dots. C is stored and each row and token adds
// float(dot) * (d_w * d_x) with one fma, block after block: ggml adds 8
// lanes' (within 2 * (blocks + 2) * 2^-24 * sum|w*x| of the generic kernel), and
// so that a token's floats do not depend on its batch (the engine's replay
// and continuous batching rely on it: docs/process-graph.md) this level's
// x4 kernel for fewer tokens, and for the rows and tokens the tiles leave,
// sums the same way (avx512bf16::q8_0_x4_block_rows; weight_layout_test's
// Q8_0X4TokensGetTheSameFloatsInAnyBatch). Rows in 16s from row_begin.
//
// Measured (tandem-bench-moe --types q8_0 --batches 256, two runs, against
// the avx512bf16 x4 kernel, weights from DRAM): DeepSeek-V3 618-756 ms
// against 1271-1429, Qwen3-30B-A3B 54-71 against 147-155. With hot weights,
// one thread, 256 x 2048: 1.2x at 4 tokens, 2-3x at 8, 3-4x at 16; slower
// than the x4 kernel at 2 and 3 tokens (0.5x, 0.9x), hence kMinTokensQ8.
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

// Tile registers: two products in turn, C tmm0 and tmm3, A tmm1 and tmm4, B
// tmm2 and tmm5. A product's K is one block, or two side by side (kPair,
// up to 8 tokens): B then holds block b's tokens in columns 0..7 of its
// first 8 lines and block b+1's in columns 8..15 of the next 8, so one
// product gives both blocks' dots, and the tile unit (whose loads, product
// and store run one after another) does half the work per weight.
void configure(int n, bool pair) {
  const int k = pair ? 2 * kQK8_0 : kQK8_0, cols = pair ? 64 : 4 * n;
  TileConfig c;
  for (int t : {0, 3}) c.set(t, kMaxM, cols);
  for (int t : {1, 4}) c.set(t, kMaxM, k);
  for (int t : {2, 5}) c.set(t, k / 4, cols);
  load_config(c);
}

template <bool kPair>
struct Q8Amx {
  static constexpr int kUnit = kPair ? 2 : 1;  // blocks per product
  static constexpr int64_t kStepUnits = kStepBlocks / kUnit;
  // The buffers stay uninitialised but for c_out and dx, whose lanes past
  // the tokens (which tile stores and the staging leave alone) must be
  // finite, and with kPair stage, whose columns past the tokens the
  // products read (one block a product reads only the tokens' columns).
  Q8Amx(const RowDotParams& params, int tokens, float* out) : p(params), n(tokens), y(out) {
    if constexpr (kPair) std::memset(stage, 0, sizeof stage);
    std::memset(c_out, 0, sizeof c_out);
    std::memset(dx, 0, sizeof dx);
  }
  const RowDotParams& p;
  int n;     // tokens, <= 16 (kPair: <= 8)
  float* y;  // token 0's outputs
  const uint8_t* a[kMaxM];
  // B tiles of one step: [unit][dword line][column]
  alignas(64) uint32_t stage[kStepUnits][8 * kUnit][16];
  alignas(64) float dx[kStepUnits][16];               // the columns' block scales
  alignas(64) float sums[kTilesPerChunk][kMaxM][16];  // [tile][row][column]
  // Products go through the tiles kBatch at a time, software-pipelined: a
  // batch's tiles run while the next batch's A tiles are staged, and are
  // scaled after that, so neither the tile loads wait for the staging
  // stores nor the scaling for the tile stores.
  alignas(64) int8_t wide[2][kBatch][kMaxM][kQK8_0 * kUnit];  // A tiles
  alignas(64) float dw[2][kBatch][kUnit][kMaxM];              // their rows' scales
  alignas(64) int32_t c_out[2][kBatch][kMaxM][16];

  // Units [u, u + cnt) of the step from block b0 (which ends at b1), of the
  // tile's groups, into wide[buf], dw[buf].
  void stage_weights(const uint8_t* const (&grp)[kGroups], const uint8_t* const* next, int64_t b0, int64_t b1,
                     int64_t u, int cnt, int buf) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int j = 0; j < cnt; ++j) {
      const int64_t b = b0 + (u + j) * kUnit;
      const size_t off = size_t(b) * kQ8_0X4GroupBlock;
      const bool both = kPair && b + 1 < b1;  // else the second block is zeros
#pragma GCC unroll 4
      for (int g = 0; g < kGroups; ++g) {
        const uint8_t* gb = grp[g] + off;
        if (next)  // 136 bytes a block: every line the unit's blocks can touch
          for (size_t l = 0; l < (kPair ? 5 : 3); ++l)
            _mm_prefetch(reinterpret_cast<const char*>(next[g] + off + 64 * l), _MM_HINT_T0);
        _mm_store_ps(dw[buf][j][0] + kX4Rows * g, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb))));
        const __m512i x01 = _mm512_xor_si512(_mm512_loadu_si512(gb + 8), flip);
        const __m512i x23 = _mm512_xor_si512(_mm512_loadu_si512(gb + 72), flip);
        if constexpr (kPair) {
          const uint8_t* gn = gb + kQ8_0X4GroupBlock;
          __m512i y01 = _mm512_setzero_si512(), y23 = _mm512_setzero_si512();
          __m128 d1 = _mm_setzero_ps();
          if (both) {
            d1 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gn)));
            y01 = _mm512_xor_si512(_mm512_loadu_si512(gn + 8), flip);
            y23 = _mm512_xor_si512(_mm512_loadu_si512(gn + 72), flip);
          }
          _mm_store_ps(dw[buf][j][1] + kX4Rows * g, d1);
          // row r: its 32 values of block b, then of block b + 1
          int8_t(*w)[kQK8_0 * kUnit] = wide[buf][j] + kX4Rows * g;
          _mm512_store_si512(w[0], _mm512_shuffle_i64x2(x01, y01, 0x44));
          _mm512_store_si512(w[1], _mm512_shuffle_i64x2(x01, y01, 0xEE));
          _mm512_store_si512(w[2], _mm512_shuffle_i64x2(x23, y23, 0x44));
          _mm512_store_si512(w[3], _mm512_shuffle_i64x2(x23, y23, 0xEE));
        } else {
          _mm512_store_si512(wide[buf][j][kX4Rows * g], x01);
          _mm512_store_si512(wide[buf][j][kX4Rows * g + 2], x23);
        }
      }
    }
  }

  // The integer dots of staged units u.. (cnt of them) into c_out[buf]:
  // two C tiles in turn (tmm0 and tmm3).
  void dots(int64_t u, int cnt, int buf) {
    for (int j = 0; j < cnt; j += 2) {
      TANDEM_TILE_LOAD(1, wide[buf][j][0], kQK8_0 * kUnit);
      TANDEM_TILE_LOAD(2, stage[u + j][0], 64);
      _tile_zero(0);
      _tile_dpbssd(0, 1, 2);
      if (j + 1 < cnt) {
        TANDEM_TILE_LOAD(4, wide[buf][j + 1][0], kQK8_0 * kUnit);
        TANDEM_TILE_LOAD(5, stage[u + j + 1][0], 64);
        _tile_zero(3);
        _tile_dpbssd(3, 4, 5);
      }
      _tile_stored(0, c_out[buf][j], 64);
      if (j + 1 < cnt) _tile_stored(3, c_out[buf][j + 1], 64);
    }
  }

  // Row i, token t: s[i] lane t += float(dot) * (d_w * d_x) with one fma,
  // block after block (kPair: block b's from columns 0..7, then block
  // b+1's from 8..15), as the x4 kernels do for any token count.
  void scale(__m512 (&s)[kMaxM], int64_t u, int cnt, int buf) {
    for (int j = 0; j < cnt; ++j) {
      if constexpr (kPair) {
        const __m256 x0 = _mm256_load_ps(dx[u + j]), x1 = _mm256_load_ps(dx[u + j] + 8);
#pragma GCC unroll 16
        for (int i = 0; i < kMaxM; ++i) {
          const int32_t* c = c_out[buf][j][i];
          __m256 a = _mm512_castps512_ps256(s[i]);
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(c))),
                              _mm256_mul_ps(x0, _mm256_set1_ps(dw[buf][j][0][i])), a);
          a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(c + 8))),
                              _mm256_mul_ps(x1, _mm256_set1_ps(dw[buf][j][1][i])), a);
          s[i] = _mm512_castps256_ps512(a);
        }
      } else {
        const __m512 xs = _mm512_load_ps(dx[u + j]);
#pragma GCC unroll 16
        for (int i = 0; i < kMaxM; ++i)
          s[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c_out[buf][j][i])),
                                 _mm512_mul_ps(xs, _mm512_set1_ps(dw[buf][j][0][i])), s[i]);
      }
    }
  }

  // The tokens' blocks [b0, b1) as B tiles and their scales.
  void stage_step(int64_t b0, int64_t b1) {
    for (int64_t u = 0; u < (b1 - b0 + kUnit - 1) / kUnit; ++u)
      for (int h = 0; h < kUnit; ++h) {
        const int64_t b = b0 + u * kUnit + h;
        for (int t = 0; t < n; ++t) {
          const int col = 8 * h + t;
          if (b >= b1) {  // a pair's missing second block
            dx[u][col] = 0.0f;
            for (int i = 0; i < kQK8_0 / 4; ++i) stage[u][8 * h + i][col] = 0;
            continue;
          }
          const uint8_t* blk = a[t] + size_t(b * kBlockBytes);
          uint16_t d;
          std::memcpy(&d, blk, 2);
          dx[u][col] = _cvtsh_ss(d);
          for (int i = 0; i < kQK8_0 / 4; ++i) std::memcpy(&stage[u][8 * h + i][col], blk + 2 + 4 * i, 4);
        }
      }
  }

  // Rows r0..r0+15, blocks [b0, b1): sums (16 vectors, lane = column) +=
  // each block's dot times its scales. next: the groups the next tile reads.
  void tile(int64_t r0, int64_t b0, int64_t b1, float (&acc)[kMaxM][16], const uint8_t* const* next) {
    const uint8_t* grp[kGroups];
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) grp[g] = p.w + size_t(r0 + kX4Rows * g) * p.w_row_stride;
    __m512 s[kMaxM];
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) s[i] = _mm512_load_ps(acc[i]);
    const int64_t units = (b1 - b0 + kUnit - 1) / kUnit;
    int buf = 0;
    int cnt = int(std::min<int64_t>(kBatch, units));
    stage_weights(grp, next, b0, b1, 0, cnt, buf);
    for (int64_t u = 0; u < units;) {
      dots(u, cnt, buf);
      const int64_t un = u + cnt;
      const int cn = int(std::min<int64_t>(kBatch, units - un));
      if (cn > 0) stage_weights(grp, next, b0, b1, un, cn, buf ^ 1);
      scale(s, u, cnt, buf);
      u = un;
      cnt = cn;
      buf ^= 1;
    }
#pragma GCC unroll 16
    for (int i = 0; i < kMaxM; ++i) _mm512_store_ps(acc[i], s[i]);
  }

  // Rows [r_begin, r_end) (whole tiles) in chunks of kChunkRows: every step
  // over the chunk's tiles, so one staging serves them all.
  void run(int64_t r_begin, int64_t r_end) {
    configure(n, kPair);
    const int64_t nb = p.cols / kQK8_0;
    for (int64_t R0 = r_begin; R0 < r_end; R0 += kChunkRows) {
      const int64_t R1 = std::min(r_end, R0 + kChunkRows);
      const int tiles = int((R1 - R0) / kMaxM);
      std::memset(sums, 0, sizeof sums[0] * size_t(tiles));
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

template <bool kPair>
void tokens_through_tiles(const RowDotParams& p, int64_t m0, int n, int64_t tiled_end) {
  Q8Amx<kPair> q(p, n, p.y + size_t(m0) * p.y_row_stride);
  for (int t = 0; t < n; ++t) q.a[t] = activation_row(p, m0 + t);
  q.run(p.row_begin, tiled_end);
}

}  // namespace

void q8_0_rows(const RowDotParams& p) {
  if (p.layout != WeightLayout::kQ8_0X4) return avx512bf16::find(DType::kQ8_0)(p);
  const RowDotFn avx = avx512bf16::q8_0_x4_block_rows;  // takes a pair side by side
  const int64_t tiled_end = p.row_begin + (p.row_end - p.row_begin) / kMaxM * kMaxM;
  if (p.n_tokens < kMinTokensQ8 || tiled_end == p.row_begin) return avx(p);
  if (p.pair_w) return rows_then_pair(q8_0_rows, p);  // the tiles below take one matrix
  int64_t m0 = 0;
  for (; p.n_tokens - m0 >= kMinTokensQ8; m0 += kMaxM) {
    const int n = int(std::min<int64_t>(kMaxM, p.n_tokens - m0));
    if (n <= kMaxM / 2)
      tokens_through_tiles<true>(p, m0, n, tiled_end);
    else
      tokens_through_tiles<false>(p, m0, n, tiled_end);
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
void q8_0_rows(const RowDotParams& p) {
  if (p.layout == WeightLayout::kQ8_0X4)
    avx512bf16::q8_0_x4_block_rows(p);
  else
    avx512bf16::find(DType::kQ8_0)(p);
}
#endif

}  // namespace tandem::kernels::amx
