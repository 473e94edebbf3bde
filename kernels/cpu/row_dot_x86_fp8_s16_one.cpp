// FP8 E4M3 stored as fp8_s16 (weight_layout.h), one token, marked weights
// (fp8_marks.h), at the avx512bf16 level: the groups one after another,
// each slice by slice and row by row as it is stored, four of a row's
// scale blocks in flight, so a thread reads its range's bytes as one
// stream. The same floats as row_dot_x86_fp8_loop.cpp's
// fp8_one_token_rows and its Fp8Tile: each block's sums in the same lanes
// and order, the blocks into the row's sum in order (a block is summed
// alone, so four of one row side by side are independent chains, as four
// rows' blocks were).
//
// Until stop 42 one token read four groups at once, from the range's
// quarters (fp8_s16_group_pass), each stream prefetched into L1 2 KiB
// ahead. On a Zen 5 EPYC, one thread over a 1 GiB matrix of 7168 columns:
// 0.86-0.88 of a plain read's bytes per second -> 0.93-0.94. The layer
// (tandem-bench-moe, DeepSeek-V3, batch 1, two threads, alternated by
// repetition, reads above 70 GB/s): 0.859 -> 0.890 of the read. Not kept:
// rowmajor rows the same way (Qwen3-30B-A3B's 2048 columns there 0.858 ->
// 0.833: they keep four rows from the range's quarters); one stream
// without prefetches (0.65-0.74 in the one-thread test), 4 KiB ahead
// (0.83 in the layer), eight blocks in flight (docs/cpu-kernels.md, stop 42).
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/row_dot_x86_fp8_block.h"

namespace tandem::kernels::TANDEM_ROW_DOT_NS {

#if defined(__AVX512BF16__) && defined(__AVX512VBMI__) && defined(__GFNI__)
namespace {

// How far ahead the stream is asked for (prefetcht0, a line per 64 weights;
// 6 and 12 KiB did as well).
constexpr size_t kRowAhead = 8192;
// A row's blocks in flight: half a row's slice (8 blocks).
constexpr int kBlocksInFlight = 4;

// Where a row's blocks are and what they need.
struct Fp8RowBlocks {
  const uint8_t* xp;      // the token's activations in the tables' order
  const float* scales;    // the row's scale of block 0
  const uint8_t* marks;   // the row's marks
  bool any_marked;        // whether marks has a bit set in the blocks at hand
};

// B blocks of a row from block b0, their bytes at w (128 each, one after
// another, in fp8_s16's byte order), into sum in block order. kMaskFirst:
// w is the matrix's first byte, which the paired widening's load must not
// read before.
template <int B, bool kMaskFirst = false>
[[gnu::always_inline]] inline void row_blocks(const Fp8RowBlocks& r, const uint8_t* w, int64_t b0, __m512& sum) {
  const Fp8PairWidener pairs;
  __m512 blk[B];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) blk[j] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t c = 0; c != kFp8ScaleBlock; c += 64) {
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) {
      const uint8_t* wj = w + kFp8ScaleBlock * j + c;
      _mm_prefetch(reinterpret_cast<const char*>(wj + kRowAhead), _MM_HINT_T0);
      __m512i wa, wo;
      if (kMaskFirst && j == 0 && c == 0)
        pairs.widen<true>(wj, wa, wo);
      else
        pairs.widen<false>(wj, wa, wo);
      const uint8_t* x = r.xp + 2 * ((b0 + j) * kFp8ScaleBlock + c);
      blk[j] = _mm512_dpbf16_ps(blk[j], (__m512bh)wa, (__m512bh)_mm512_load_si512(x));
      blk[j] = _mm512_dpbf16_ps(blk[j], (__m512bh)wo, (__m512bh)_mm512_load_si512(x + 64));
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) {
    const bool tables = __builtin_expect(r.any_marked, 0) && fp8_block_marked(r.marks, b0 + j);
    const __m512 one[1] = {blk[j]};
    __m512 s[1] = {sum};
    const uint8_t* const xp[1] = {r.xp};
    fp8_block_end<1, true>(tables, one, w + kFp8ScaleBlock * j, xp, (b0 + j) * kFp8ScaleBlock, r.scales[b0 + j], s);
    sum = s[0];
  }
}

}  // namespace

void fp8_s16_one_token(const RowDotParams& p, const uint8_t* xp) {
  static_assert(kFp8S16Cols % (kBlocksInFlight * kFp8ScaleBlock) == 0);
  constexpr int64_t kSliceBlocks = kFp8S16Cols / kFp8ScaleBlock;
  static_assert(kSliceBlocks == 8, "a slice's blocks are one byte of a row's marks (any_marked below)");
  const size_t marks_row = fp8_marks_row_bytes(p.cols);
  const size_t group_bytes = size_t(kFp8S16Rows) * size_t(p.cols);
  for (int64_t g = p.row_begin / kFp8S16Rows; g < p.row_end / kFp8S16Rows; ++g) {
    __m512 run[kFp8S16Rows];  // each row's sum between its slices
    for (__m512& v : run) v = _mm512_setzero_ps();
    for (int64_t s0 = 0; s0 < p.cols; s0 += kFp8S16Cols) {
      const int64_t b0 = s0 / kFp8ScaleBlock;
      for (int k = 0; k < kFp8S16Rows; ++k) {
        const int64_t row = g * kFp8S16Rows + k;
        const uint8_t* w = p.w + size_t(g) * group_bytes + size_t(s0) * kFp8S16Rows + size_t(k) * kFp8S16Cols;
        const uint8_t* marks = p.fp8_marks + size_t(row) * marks_row;
        const Fp8RowBlocks r{xp, p.scales + size_t(row / kFp8ScaleBlock) * p.scale_row_stride, marks,
                             marks[b0 / 8] != 0};
        if (row == 0 && s0 == 0)
          row_blocks<kBlocksInFlight, true>(r, w, b0, run[k]);
        else
          row_blocks<kBlocksInFlight>(r, w, b0, run[k]);
        for (int64_t b = b0 + kBlocksInFlight; b < b0 + kSliceBlocks; b += kBlocksInFlight)
          row_blocks<kBlocksInFlight>(r, w + size_t(b - b0) * kFp8ScaleBlock, b, run[k]);
      }
    }
    for (int k = 0; k < kFp8S16Rows; ++k) p.y[size_t(g * kFp8S16Rows + k)] = vsum(run[k]) * 0x1p-8f;
  }
}
#endif

}  // namespace tandem::kernels::TANDEM_ROW_DOT_NS
