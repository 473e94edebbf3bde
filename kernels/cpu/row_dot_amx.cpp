// The amx level (cpu_isa.h): BF16 weights stored as bf16_x16 against 6 or
// more tokens through AMX tiles (here), FP8 rows the same way
// (row_dot_amx_fp8.cpp); everything else is the avx512bf16 level's.
//
// A bf16_x16 group block (32 columns of 16 rows, 1 KiB) is, line for line,
// what tdpbf16ps takes as its B tile: row i holds column pair i of the 16
// rows, pairs adjacent. A tile of M tokens' 32 columns (64 bytes each) is A,
// and C is the M x 16 floats y[t][r0..r0+15], whose rows lie in y as they
// are (y_row_stride apart). So a step of 32 columns is one tile load of
// weights and one tdpbf16ps per group, with no repacking; the weights are
// read once for up to 32 tokens (two A tiles against each B), and more
// tokens re-read a step's weights from L1/L2.
//
// Why: at 8 tokens a weight byte carries 8 flops, and the avx512bf16 outer
// product (row_dot_x86_x16.cpp) spends its issue slots on vdpbf16ps while
// it streams; here the arithmetic of 1 KiB is one instruction, so the core
// spends its time on the loads and prefetches that keep DRAM busy.
// Sums: each output lane adds its pairs' products in column order, rounding
// after each product (Intel's pseudo-code for tdpbf16ps), tested against the
// reference within (cols + 2) * 2^-24 * sum|w*x|.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/row_dot_amx.h"

namespace tandem::kernels::amx {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
namespace {

constexpr int kGroupRows = kX16Rows;                     // 16 rows: one C tile's columns
constexpr size_t kBlock = kBf16X16GroupBlock;            // one B tile
constexpr int64_t kCols = int64_t(kBlock / (2 * kX16Rows));  // 32 columns per block
// One step's activations for every token, [block][token][64 bytes], when
// they come gathered (a_rows): 32 KiB stays in L1 beside the weights.
constexpr size_t kStageBytes = 32 * 1024;
constexpr int64_t kMaxStepBlocks = 32;  // 1024 columns
// Prefetch distance in the weight streams (bytes ahead of the tile load).
constexpr size_t kAhead = 4096;

// Tile registers, one token chunk (MC = 1): C of group g is tmm g, A tmm4,
// B tmm5..7. Two chunks (MC = 2, G <= 2): C of chunk c, group g is
// tmm(2c + g), A of chunk c tmm(4 + c), B of group g tmm(6 + g).

// A chunk pair's shape: m[c] tokens in chunk c (m[1] = 0: one chunk).
struct Shape {
  int m[2];
  bool operator==(const Shape& o) const { return m[0] == o.m[0] && m[1] == o.m[1]; }
};

void configure(const Shape& s) {
  TileConfig c;
  auto set = [&c](int t, int rows) { c.set(t, rows, 64); };
  if (s.m[1] == 0) {
    for (int t = 0; t < 5; ++t) set(t, s.m[0]);
    for (int t = 5; t < 8; ++t) set(t, 16);
  } else {
    for (int c2 = 0; c2 < 2; ++c2) {
      set(2 * c2, s.m[c2]);
      set(2 * c2 + 1, s.m[c2]);
      set(4 + c2, s.m[c2]);
    }
    set(6, 16);
    set(7, 16);
  }
  load_config(c);
}

// Where a step's A tiles come from: block b's tile for tokens m0.. is at
// base + b * block_stride + m0 * token_stride, rows token_stride apart.
struct Tokens {
  const uint8_t* base;
  size_t block_stride, token_stride;
};

template <int G>
struct Groups {
  const uint8_t* w[G];  // each group's first block
  float* y[G];          // each group's first output column (token 0)
};

inline void prefetch_block(const uint8_t* p) {
#pragma GCC unroll 16
  for (int l = 0; l < 16; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + kAhead + 64 * size_t(l)), _MM_HINT_T0);
}

// Tile t of C: zeroed on the first step, else loaded from y. A macro: GCC's
// tile intrinsics take the register number as a literal.
#define TANDEM_AMX_C_BEGIN(t, y)      \
  do {                                \
    if (first)                        \
      _tile_zero(t);                  \
    else                              \
      TANDEM_TILE_LOAD(t, y, y_stride); \
  } while (0)

// C (+)= A x B over blocks [b0, b1) for the tokens from m0 (one chunk, or
// two of them side by side when MC = 2, which share each weight tile). The
// first pass over a step streams the weights (prefetching kAhead on); later
// ones find them in L1/L2.
template <int G, int MC>
void tiles(const Groups<G>& gs, const Tokens& a, int64_t b0, int64_t b1, int64_t m0, size_t y_stride, bool first,
           bool stream) {
  static_assert(MC == 1 ? G <= 3 : G <= 2, "8 tile registers");
  const size_t yrow = y_stride / sizeof(float);
  float* y0[G];
  float* y1[G] = {};  // the second chunk's rows (MC = 2)
  for (int g = 0; g < G; ++g) {
    y0[g] = gs.y[g] + size_t(m0) * yrow;
    if constexpr (MC == 2) y1[g] = y0[g] + size_t(kMaxM) * yrow;
  }
  TANDEM_AMX_C_BEGIN(0, y0[0]);
  if constexpr (G > 1) TANDEM_AMX_C_BEGIN(1, y0[1]);
  if constexpr (MC == 1 && G > 2) TANDEM_AMX_C_BEGIN(2, y0[2]);
  if constexpr (MC == 2) {
    TANDEM_AMX_C_BEGIN(2, y1[0]);
    if constexpr (G > 1) TANDEM_AMX_C_BEGIN(3, y1[1]);
  }
  const uint8_t* ab = a.base + size_t(m0) * a.token_stride;
  const size_t a1 = size_t(kMaxM) * a.token_stride;
  for (int64_t b = b0; b < b1; ++b) {
    const size_t wo = kBlock * size_t(b);
    if (stream)
#pragma GCC unroll 3
      for (int g = 0; g < G; ++g) prefetch_block(gs.w[g] + wo);
    const uint8_t* at = ab + a.block_stride * size_t(b - b0);
    if constexpr (MC == 1) {
      TANDEM_TILE_LOAD(4, at, a.token_stride);
      TANDEM_TILE_LOAD(5, gs.w[0] + wo, 64);
      _tile_dpbf16ps(0, 4, 5);
      if constexpr (G > 1) {
        TANDEM_TILE_LOAD(6, gs.w[1] + wo, 64);
        _tile_dpbf16ps(1, 4, 6);
      }
      if constexpr (G > 2) {
        TANDEM_TILE_LOAD(7, gs.w[2] + wo, 64);
        _tile_dpbf16ps(2, 4, 7);
      }
    } else {
      TANDEM_TILE_LOAD(4, at, a.token_stride);
      TANDEM_TILE_LOAD(5, at + a1, a.token_stride);
      TANDEM_TILE_LOAD(6, gs.w[0] + wo, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (G > 1) {
        TANDEM_TILE_LOAD(7, gs.w[1] + wo, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  _tile_stored(0, y0[0], y_stride);
  if constexpr (G > 1) _tile_stored(1, y0[1], y_stride);
  if constexpr (MC == 1 && G > 2) _tile_stored(2, y0[2], y_stride);
  if constexpr (MC == 2) {
    _tile_stored(2, y1[0], y_stride);
    if constexpr (G > 1) _tile_stored(3, y1[1], y_stride);
  }
}

struct Prefill {
  const RowDotParams& p;
  int64_t nb, step;    // blocks in a row, blocks per step
  bool staged;         // activations gathered (a_rows): copied per step
  uint8_t* stage;      // kStageBytes, 64-aligned
  Shape configured{{0, 0}};

  void shape(const Shape& s) {
    if (s == configured) return;
    configure(s);
    configured = s;
  }

  // Block b0..b1's A tiles: gathered activations copied in tile order
  // (once per step for every group of the call), or contiguous ones in place.
  Tokens step_tokens(int64_t b0, int64_t b1) {
    if (!staged) return {p.a + 64 * size_t(b0), 64, p.a_row_bytes};
    const int64_t n = b1 - b0, T = p.n_tokens;
    for (int64_t t = 0; t < T; ++t) {
      const uint8_t* src = p.a_rows[t] + 64 * size_t(b0);
      for (int64_t i = 0; i < n; ++i)
        _mm512_store_si512(stage + 64 * size_t(i * T + t), _mm512_loadu_si512(src + 64 * size_t(i)));
    }
    return {stage, 64 * size_t(T), 64};
  }

  // Every token over one step of G groups: chunks of 16 tokens, two at a
  // time while two remain (then G <= 2).
  template <int G>
  void step_groups(const Groups<G>& gs, const Tokens& a, int64_t b0, int64_t b1) {
    const int64_t T = p.n_tokens;
    const size_t ys = p.y_row_stride * sizeof(float);
    for (int64_t m0 = 0; m0 < T;) {
      const int64_t left = T - m0;
      if constexpr (G <= 2) {
        if (left > kMaxM) {
          shape({{kMaxM, int(std::min<int64_t>(kMaxM, left - kMaxM))}});
          tiles<G, 2>(gs, a, b0, b1, m0, ys, b0 == 0, m0 == 0);
          m0 += 2 * kMaxM;
          continue;
        }
      }
      shape({{int(std::min<int64_t>(kMaxM, left)), 0}});
      tiles<G, 1>(gs, a, b0, b1, m0, ys, b0 == 0, m0 == 0);
      m0 += kMaxM;
    }
  }

  // G groups: the first at row r0, the others gstep groups apart.
  template <int G>
  Groups<G> groups_at(int64_t r0, int64_t gstep) const {
    Groups<G> gs;
    for (int g = 0; g < G; ++g) {
      const int64_t r = r0 + g * gstep * kGroupRows;
      gs.w[g] = p.w + size_t(r) * p.w_row_stride;
      gs.y[g] = p.y + r;
    }
    return gs;
  }

  // Tiles of G groups from the G parts of the range (far-apart streams, as
  // the avx512bf16 prefill takes thirds), then the groups left over; f(gs)
  // for each.
  template <int G, class F>
  void each_tile(F&& f) const {
    const int64_t groups = (p.row_end - p.row_begin) / kGroupRows, q = groups / G;
    for (int64_t j = 0; j < q; ++j) f(groups_at<G>(p.row_begin + j * kGroupRows, q));
    const int64_t r0 = p.row_begin + G * q * kGroupRows;
    switch (groups - G * q) {
      case 2: f(groups_at<2>(r0, 1)); break;
      case 1: f(groups_at<1>(r0, 1)); break;
      default: break;
    }
  }

  // Contiguous activations: each tile over every step, so each group's
  // weights stream from start to end. Gathered ones: each step over every
  // tile, so the step's copy serves them all (copied per tile, it moved as
  // many bytes as a tile's weights at 16 tokens and more).
  template <int G>
  void run() {
    if (!staged) {
      each_tile<G>([&](const auto& gs) {
        for (int64_t b0 = 0; b0 < nb; b0 += step) {
          const int64_t b1 = std::min(nb, b0 + step);
          step_groups(gs, step_tokens(b0, b1), b0, b1);
        }
      });
      return;
    }
    for (int64_t b0 = 0; b0 < nb; b0 += step) {
      const int64_t b1 = std::min(nb, b0 + step);
      const Tokens a = step_tokens(b0, b1);
      each_tile<G>([&](const auto& gs) { step_groups(gs, a, b0, b1); });
    }
  }
};

void bf16_rows(const RowDotParams& p) {
  if (p.layout != WeightLayout::kBf16X16 || p.n_tokens < kMinTokens) return avx512bf16::find(DType::kBF16)(p);
  alignas(64) uint8_t stage[kStageBytes];
  const bool staged = p.a_rows != nullptr;
  const int64_t step = staged ? std::clamp<int64_t>(int64_t(kStageBytes / 64) / p.n_tokens, 1, kMaxStepBlocks)
                              : kMaxStepBlocks;
  Prefill pf{p, p.cols / kCols, step, staged, stage};
  // Three groups per tile for one chunk of tokens, two for two chunks.
  if (p.n_tokens <= kMaxM)
    pf.run<3>();
  else
    pf.run<2>();
  _tile_release();
}

#undef TANDEM_AMX_C_BEGIN

}  // namespace

RowDotFn find(DType wtype) {
  switch (wtype) {
    case DType::kBF16: return bf16_rows;
    case DType::kF8E4M3: return fp8_rows;
    case DType::kQ8_0: return q8_0_rows;
    default: return nullptr;
  }
}

#else
RowDotFn find(DType) { return nullptr; }
#endif

}  // namespace tandem::kernels::amx
