// FP8 E4M3 rows at the avx512bf16 level, for calls of up to kFp8LoopMaxCols
// columns (row_dot.h): whole 128-column scale blocks widened by GF(2)
// affine byte maps (fp8_tables.h), the blocks the maps cannot take summed
// through the byte tables, found by a search or by the weights' marks
// (fp8_marks.h). The same floats as row_dot_x86_float.cpp's Fp8Tile, whose
// fp8_rows calls this first for rowmajor rows (docs/cpu-kernels.md, "FP8,
// one token"; fp8_x16 goes to row_dot_x86_fp8_x16.cpp).
#include <algorithm>

#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot_x86_fp8_block.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__) && defined(__AVX512VBMI__) && defined(__GFNI__)
namespace {

// How far ahead two tokens prefetch each row stream (prefetcht2; see the
// loop below).
constexpr int64_t kFp8PairAhead = 8192;
// How far ahead one token prefetches each stream into L1 (prefetcht0, a
// line per 64 weights; see the loop below).
constexpr int64_t kFp8OneTokenAhead = 2048;

// One token (or two, below), R rows (drive's quarters), whole scale blocks:
// Fp8Tile<R, 1>'s lanes and order, as one loop with the rows and their scales in registers
// (through the tile driver the compiler kept the row pointers and the
// prefetch state on the stack). xp: the token's activations in the tables'
// order (kFp8OrderA then kFp8OrderB for each 64 columns), permuted once per
// call instead of once per 4 rows.
//
// The weights widen through Fp8BitWidener (fp8_tables.h: an affine byte map
// and a vpermb, 4 instructions per 64 weights where the tables take 5, two
// of them vpermi2b, which Intel's cores run at half rate), as values times
// 2^8; a block of a row that holds one of the 18 bytes the widening cannot
// take (+-0, subnormals, NaN) is summed again through the tables. Both sum
// the same products in the same lanes, the widening's 2^8 times as large, so
// the floats are the tables' (bf16 products are exact in f32, and scaling by
// 2^8 moves no rounding).
// Measured with the weights in cache (one thread, an Intel Xeon with AMX,
// 256 rows of 2048 or 7168): 12-13 GB/s of FP8 through the tables with the
// permutes per 4 rows, 16-18 GB/s this way; without the search for the 18
// bytes it would be 20.
//
// Marked (p.fp8_marks, fp8_marks.h): the blocks that need the tables are
// known, and the loop does no search: 6 vector instructions per 64 weights
// instead of 8. Same floats; with the weights in cache (one thread, 768 to
// 7168 rows of 2048 to 7168), 1.14-1.16x where about 5% of the blocks are
// marked, 1.25-1.31x where none is. Not kept: skipping the bit maps for a
// marked row's block (the other rows' blocks then went one by one): 1.02x
// in L2, 0.93-0.95x from L3.
//
// Two tokens (the hi and lo rows of split activations, row_dot.h, or a
// batch of two): each weight vector is widened once and multiplied with
// both, each token's sums in the one-token order (so in the tiles'): 4
// vdpbf16ps per 64 weights on the same 6 or 8 widening instructions.
// Three or more: two rows by up to four tokens a pass (fp8_token_passes).
// The tiles widen a row's weights through the tables once per tile of up
// to 4 tokens and 4 rows, and hold 32 sums that do not fit the registers;
// with the weights in L2 (one thread, 256 x 2048, an AMD EPYC) they took
// 12.3, 8.3 and 4.3 GB/s of FP8 at 3, 4 and 8 tokens, this loop 14.8-16.1,
// 13.0-14.3 and 6.0-6.9 (one row by 8 tokens a pass: 4.5-6.8).
// y: token 0's outputs (token t's y_row_stride floats further).
//
// The block's end costs little, which mattered on Zen 4, where the loop is
// bound by the pipes vdpbf16ps shares with the affine map and every fma:
// - the running sums stay 2^8 times the value (bf16 products and f32 sums
//   scale exactly by a power of two), so each block's scale multiplies as
//   it is, and the row's sum takes the 2^-8 once at the end (a tables block
//   adds its sum times its scale times 2^8);
// - the blocks any of the rows marked are one bit set, read before the
//   loop, so each block tests one bit and only a marked block the rows';
// - for one or two tokens the block's loop ends at c != c0 + 128, which GCC
//   unrolls into the two steps (with <, it peeled the loop and tested the
//   bound at every step); with more tokens < kept the registers better (the
//   != form ran 4-10% slower at 4 and 8 tokens).
// Together 1.10-1.14x for one token with the weights in L2 (one thread, 256
// rows of 2048 or 7168; docs/cpu-kernels.md, stop 34). The same floats as
// before unless a running sum is above 2^120 or below 2^-126 in size (there
// scaling by 2^8 overflows, or no longer rounds as the subnormals did).
//
// kNext: a later pass over rows the first found in DRAM (fp8_token_passes)
// also prefetches the rows after them (rows[i] + 1), a line per 64 weights.
template <int R, int T, bool kMarked, bool kNext = false>
void fp8_one_token_rows(const RowDotParams& p, const int64_t (&rows)[R], const uint8_t* const* xp, float* y) {
  const Fp8BitWidener fp8;
  const __m512i below = _mm512_set1_epi8(kFp8SpecialBelow);
  const size_t marks_row = fp8_marks_row_bytes(p.cols);
  const uint8_t* w[R];
  const uint8_t* next_w[R];  // kNext: the rows after
  const float* sc[R];
  uint64_t marked[kFp8LoopMaxCols / kFp8ScaleBlock / 64] = {};
  __m512 sum[R][T];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    w[i] = p.w + size_t(rows[i]) * p.w_row_stride;
    next_w[i] = kNext ? w[i] + p.w_row_stride : nullptr;
    sc[i] = p.scales + size_t(rows[i] / kFp8ScaleBlock) * p.scale_row_stride;
    if constexpr (kMarked) {
      const uint8_t* mk = p.fp8_marks + size_t(rows[i]) * marks_row;
      for (size_t k = 0; k < marks_row; ++k) marked[k / 8] |= uint64_t(mk[k]) << (8 * (k % 8));
    }
    for (int t = 0; t < T; ++t) sum[i][t] = _mm512_setzero_ps();
  }
  for (int64_t c0 = 0; c0 < p.cols; c0 += kFp8ScaleBlock) {
    __m512 blk[R][T];
    __m512i low[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      low[i] = _mm512_set1_epi8(-1);
      for (int t = 0; t < T; ++t) blk[i][t] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t c = c0; T <= 2 ? c != c0 + kFp8ScaleBlock : c < c0 + kFp8ScaleBlock; c += 64) {
      __m512i xa[T], xb[T];
      for (int t = 0; t < T; ++t)
        xa[t] = _mm512_load_si512(xp[t] + 2 * c), xb[t] = _mm512_load_si512(xp[t] + 2 * c + 64);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        // One token: a prefetcht0 kFp8OneTokenAhead on in this stream. On
        // the AMD EPYC (Zen 5, two threads reading 78-87 GB/s when its
        // neighbours are quiet) it took the layer (tandem-bench-moe, batch
        // 1, alternated by repetition in one process) from 0.80-0.86 of the
        // read to 0.88-0.95 at quiet reads, 0.89-0.91 to 0.91-0.92 at shared
        // ones; 4 KiB ahead lost at both (docs/cpu-kernels.md, stop 38). On
        // stop 32's AMD EPYC (Zen 4, reads of 44-62) such prefetches had
        // held the layer to 29-42 GB/s where without them it reached 40-55.
        // Two tokens (a split token's pair) do twice the arithmetic per
        // byte, and there a prefetcht2 8 KiB ahead took the layer from
        // 74-88% of the read to 85-94% (stop 34).
        if constexpr (T == 1)
          _mm_prefetch(reinterpret_cast<const char*>(w[i] + c + kFp8OneTokenAhead), _MM_HINT_T0);
        if constexpr (T == 2)
          _mm_prefetch(reinterpret_cast<const char*>(w[i] + c + kFp8PairAhead), _MM_HINT_T2);
        if constexpr (kNext) _mm_prefetch(reinterpret_cast<const char*>(next_w[i] + c), _MM_HINT_T2);
        __m512i wa, wo;
        const __m512i q = _mm512_loadu_si512(w[i] + c);
        if constexpr (!kMarked) low[i] = _mm512_min_epu8(low[i], fp8.special(q));
        fp8.widen(q, wa, wo);
        for (int t = 0; t < T; ++t) {
          blk[i][t] = _mm512_dpbf16_ps(blk[i][t], (__m512bh)wa, (__m512bh)xa[t]);
          blk[i][t] = _mm512_dpbf16_ps(blk[i][t], (__m512bh)wo, (__m512bh)xb[t]);
        }
      }
    }
    const int64_t b = c0 / kFp8ScaleBlock;
    const bool some_marked = kMarked && ((marked[b / 64] >> (b % 64)) & 1) != 0;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const bool tables = kMarked ? __builtin_expect(some_marked, 0) &&
                                        fp8_block_marked(p.fp8_marks + size_t(rows[i]) * marks_row, b)
                                  : _mm512_cmplt_epu8_mask(low[i], below) != 0;
      fp8_block_end<T>(tables, blk[i], w[i] + c0, xp, c0, sc[i][b], sum[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[size_t(t) * p.y_row_stride + size_t(rows[i])] = vsum(sum[i][t]) * 0x1p-8f;
}

// The loop's calls (row_dot.h): at most kFp8LoopMaxCols columns; the
// permuted activations of kFp8LoopMaxValues tokens x columns at a time on the
// stack (256 KiB: DeepSeek-V3's 7168 columns, 18 tokens a chunk).
// Tokens per pass of three or more: R = 2 rows by 4 tokens keep their
// block sums, running sums and activations in 24 registers.
constexpr int kFp8PassTokens = 4;

// One or two tokens: the rows in four far-apart streams (the range's
// quarters), then the rest one by one. (fp8_s16's one token read its
// groups in order, stops 43-48; rowmajor rows lost that way.)
template <int T, bool kMarked>
void fp8_one_token_quarters(const RowDotParams& p, const uint8_t* const* xp) {
  const int64_t n = p.row_end - p.row_begin, q = n / 4;
  for (int64_t i = 0; i < 4 && q > 0; ++i) prefetch_row_start(p, p.row_begin + i * q);
  for (int64_t j = 0; j < q; ++j) {
    const int64_t rows[4] = {p.row_begin + j, p.row_begin + q + j, p.row_begin + 2 * q + j,
                             p.row_begin + 3 * q + j};
    fp8_one_token_rows<4, T, kMarked>(p, rows, xp, p.y);
  }
  for (int64_t r = p.row_begin + 4 * q; r < p.row_end; ++r) {
    const int64_t rows[1] = {r};
    fp8_one_token_rows<1, T, kMarked>(p, rows, xp, p.y);
  }
}

// Tokens t to t + kFp8PassTokens - 1 (or to the last) of rows `rows`: one pass.
template <int R, bool kMarked, bool kNext>
void fp8_token_pass(const RowDotParams& p, const int64_t (&rows)[R], const uint8_t* const* xp, int64_t t) {
  static_assert(kFp8PassTokens == 4);
  float* y = p.y + size_t(t) * p.y_row_stride;
  switch (std::min<int64_t>(kFp8PassTokens, p.n_tokens - t)) {
    case 4: fp8_one_token_rows<R, 4, kMarked, kNext>(p, rows, xp + t, y); break;
    case 3: fp8_one_token_rows<R, 3, kMarked, kNext>(p, rows, xp + t, y); break;
    case 2: fp8_one_token_rows<R, 2, kMarked, kNext>(p, rows, xp + t, y); break;
    case 1: fp8_one_token_rows<R, 1, kMarked, kNext>(p, rows, xp + t, y); break;
    default: break;
  }
}

// Rows `rows` for every token, kFp8PassTokens at a time: the first pass
// reads the rows from DRAM, the later ones find them in L1 or L2, and the
// second also prefetches the rows after them (the next call's), so DRAM
// keeps streaming through the later passes. Before, it idled there: at 256
// tokens on a Zen 5 EPYC, alternated by repetition in one process, the
// layer's FP8 bytes per second went up 1.13-1.17x (DeepSeek-V3, 8 tokens an
// expert, two passes) and 1.05x (Qwen3-30B-A3B, 16 tokens, four passes);
// the layer there is compute-bound at 27-35% of the bf16 peak (stop 39).
template <int R, bool kMarked>
void fp8_token_passes(const RowDotParams& p, const int64_t (&rows)[R], const uint8_t* const* xp) {
  for (int64_t t = 0; t < p.n_tokens; t += kFp8PassTokens) {
    if (t == kFp8PassTokens)
      fp8_token_pass<R, kMarked, true>(p, rows, xp, t);
    else
      fp8_token_pass<R, kMarked, false>(p, rows, xp, t);
  }
}

// Three or more tokens: pairs of rows from the range's halves (two streams),
// each pair through every token before the next pair.
template <bool kMarked>
void fp8_token_halves(const RowDotParams& p, const uint8_t* const* xp) {
  const int64_t n = p.row_end - p.row_begin, q = n / 2;
  for (int64_t i = 0; i < 2 && q > 0; ++i) prefetch_row_start(p, p.row_begin + i * q);
  for (int64_t j = 0; j < q; ++j) {
    const int64_t rows[2] = {p.row_begin + j, p.row_begin + q + j};
    fp8_token_passes<2, kMarked>(p, rows, xp);
  }
  if (n % 2) {
    const int64_t rows[1] = {p.row_end - 1};
    fp8_token_passes<1, kMarked>(p, rows, xp);
  }
}

// The tokens' activations permuted into the tables' order, once per call
// instead of once per 4 rows (buf: n_tokens x 2 x cols bytes).
void fp8_permute_tokens(const RowDotParams& p, uint8_t* buf, const uint8_t** xp) {
  const __m512i order_a = _mm512_load_si512(kFp8OrderA), order_b = _mm512_load_si512(kFp8OrderB);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const uint8_t* x = activation_row(p, t);
    uint8_t* o = buf + size_t(t) * 2 * size_t(p.cols);
    for (int64_t c = 0; c < p.cols; c += 64) {
      const __m512i x0 = _mm512_loadu_si512(x + 2 * c), x1 = _mm512_loadu_si512(x + 2 * c + 64);
      _mm512_store_si512(o + 2 * c, _mm512_permutex2var_epi16(x0, order_a, x1));
      _mm512_store_si512(o + 2 * c + 64, _mm512_permutex2var_epi16(x0, order_b, x1));
    }
    xp[t] = o;
  }
}

template <bool kMarked>
void fp8_loop(const RowDotParams& p, const uint8_t* const* xp) {
  if (p.n_tokens == 1)
    fp8_one_token_quarters<1, kMarked>(p, xp);
  else if (p.n_tokens == 2)
    fp8_one_token_quarters<2, kMarked>(p, xp);
  else
    fp8_token_halves<kMarked>(p, xp);
}

// The loop over rowmajor rows, marked or not, for activations permuted as xp.
void fp8_loop_rows(const RowDotParams& p, const uint8_t* const* xp) {
  if (p.fp8_marks)
    fp8_loop<true>(p, xp);
  else
    fp8_loop<false>(p, xp);
}

// p's tokens in chunks whose permuted activations fit buf (2 x
// kFp8LoopMaxValues bytes), each permuted once into buf and xp, then
// run(the chunk's call). A chunk is a pass over the rows (at 8 or more
// tokens a pass is compute-bound, so the weights' second read from DRAM
// costs little).
template <class Run>
void fp8_token_chunks(const RowDotParams& p, uint8_t* buf, const uint8_t** xp, Run&& run) {
  const int64_t chunk = kFp8LoopMaxValues / p.cols;
  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += chunk) {
    RowDotParams c = p;
    c.n_tokens = std::min(chunk, p.n_tokens - t0);
    if (p.a_rows) c.a_rows = p.a_rows + t0;
    else c.a = p.a + size_t(t0) * p.a_row_bytes;
    c.y = p.y + size_t(t0) * p.y_row_stride;
    fp8_permute_tokens(c, buf, xp);
    run(c);
  }
}

}  // namespace

bool try_fp8_loop(const RowDotParams& p) {
  if (p.n_tokens < 1 || p.cols < kFp8ScaleBlock || p.cols % kFp8ScaleBlock != 0 || p.gemm_order ||
      p.cols > kFp8LoopMaxCols || p.layout != WeightLayout::kRowMajor)
    return false;
  alignas(64) uint8_t buf[2 * kFp8LoopMaxValues];
  const uint8_t* xp[kFp8LoopMaxValues / kFp8ScaleBlock];
  fp8_token_chunks(p, buf, xp, [&](const RowDotParams& c) { fp8_loop_rows(c, xp); });
  return true;
}
#else
bool try_fp8_loop(const RowDotParams&) { return false; }
#endif
}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
