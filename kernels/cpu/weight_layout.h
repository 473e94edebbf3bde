// How a weight matrix's bytes are arranged for the CPU kernels. The arena
// stores every tensor in the layout its kernels read fastest and names it in
// the manifest; "rowmajor" is the source format's own rows.
//
// "q4_k_x4" (Q4_K, rows a multiple of 4): every 4 rows form a group, and a
// group's super-block b (576 bytes, the 4 rows' blocks b) is stored as
//   meta[64]: row r at 16r: two little-endian 64-bit words, word h with the
//             6-bit scales sc[4h..4h+3] at bits 0, 6, 12, 18, the mins
//             m[4h..4h+3] at bits 24, 30, 36, 42, and d (h = 0) or dmin
//             (h = 1, fp16) at bits 48..63: ggml's 12 scale bytes
//             re-cut so that each word holds the values its half of the
//             row's 128-bit lane needs (one vpmultishiftqb per vector);
//   qs[512]:  byte 64s + 16r + 4c + k = row r's qs[32c + 4s + k]
//             (s = 0..7, c = 0..3 the 64-value chunk, k = 0..3),
// so one 64-byte load gives each row's 4 bytes of every chunk at step s, one
// 128-bit lane per row. A group is 4 row lengths, so rows 4g..4g+3 keep
// their byte range: row slices at multiples of 4 stay valid. The kernels
// read it with activations whose Q8_K blocks are permuted to match
// (q4_k_x4_permute_activations): qs'[32s + 16h + 4c + k] = qs[64c + 32h + 4s + k],
// where h = 0 is the low nibbles' sub-block 2c and h = 1 the high ones' 2c+1.
//
// "q5_k_x4" (Q5_K, rows a multiple of 4; from avx2 up): q4_k_x4's
// meta and qs lines (ggml's d, dmin and scale bytes being the same) with
// the values' fifth bits, 704 bytes a group block, in the order a kernel
// reads them: meta[64], then for p = 0, 1 the fifth bits of steps
// 4p..4p+3 and those steps' 4 qs lines (q5_k_x4_qh_at, q5_k_x4_qs_at):
//   qh:  byte 16r + 4c + k of part p holds, at bit 2i + h, row r's value
//        4s + k of sub-block 2c + h (s = 4p + i; ggml: bit 2c + h of
//        qh[4s + k]),
// so the 64 bytes of steps 4p..4p+3 lie byte for byte under those steps'
// qs bytes: each step's fifth bits are one bit of every byte (a GFNI bit
// matrix or a shift brings them to bit 4). The kernels read the same
// permuted activations as q4_k_x4's, and sum as q4_k_x4 does (one exact
// sum per super-block for the scales and one for the mins, each with an
// fma): floats of their own, within Q5_K's bound of the rowmajor rows
// (ggml_vec_dot's 8 lanes). expert_matrix_layout stores Q5_K this way from
// avx512 up since stop 60, from avx2 up since stop 61 (whose 256-bit tile
// makes the same sums: the same floats).
//
// "q6_k_x4" (Q6_K, rows a multiple of 4; from avx2 up): a group's
// super-block (840 bytes) holds, in the order a kernel reads them,
//   sc[64]:   row r's 16 int8 sub-block scales at 16r;
//   4 parts p of 192 bytes (q6_k_x4_qh_at, q6_k_x4_qs_at): the top two bits
//             of steps 2p and 2p + 1, then those steps' qs lines. Step s's
//             qs line holds at byte 16r + 4c + k row r's low 4 bits of value
//             64c + 4s + k (low nibble) and of 64c + 32 + 4s + k (high), as
//             q4_k_x4's (and its activations, permuted alike); the part's
//             top-bits line holds at byte 16r + 4c + k, bits 4i..4i+1 and
//             4i+2..4i+3, the top bits of those two values at step 2p + i;
//   d[8]:     the 4 rows' fp16 d.
// The kernels put each value's 6 bits together with a GFNI bit matrix (or a
// shift and a mask) and one vpternlogd, take the -32 off each 16-value
// sub-block's sums through Q8_K's bsums, and add each half super-block's
// exact sum with one fma: floats of their own, within Q6_K's bound of the
// rowmajor rows (ggml_vec_dot's 8 lanes). expert_matrix_layout stores Q6_K
// this way from avx512 up since stop 60, from avx2 up since stop 61 (the
// same floats).
//
// "q8_0_x4" (Q8_0, rows a multiple of 4): a group's block b (136 bytes) is
//   d[4]:    the 4 rows' fp16 scales;
//   qs[128]: row r's 32 values at 8 + 32r, each as the unsigned byte
//            w + 128 (vpdpbusd multiplies unsigned by signed bytes),
// so one 64-byte load holds two rows' blocks and one load the 4 scales. The
// activations are plain Q8_0.
//
// "q8_0_x16" (Q8_0, rows a multiple of 16): every 16 rows form a group, and
// a group's block b (the 16 rows' blocks b, 544 bytes) is
//   d[16]:    the 16 rows' fp16 scales;
//   qs[512]:  in chunk j (64 bytes from 32 + 64j) row r's values 4j..4j+3
//             at 4r, each as the unsigned byte w + 128 (q8_0_x16_offset),
// so one vpdpbusd against a token's 4 broadcast values adds 16 rows' exact
// partial sums at once (an outer product, as bf16_x16's), and each block
// ends in one fma per 16 rows and token with the 16 scales in a vector.
// The floats are its own (one fma per block, as the amx level's Q8_0
// tiles), within Q8_0's bound of the reference. expert_matrix_layout
// stores Q8_0 this way for the avx512bf16 level (VNNI; since stop 49).
//
// "bf16_x16" (BF16, rows a multiple of 16, columns of 64): every 16 rows
// form a group, and a group's block b (the 16 rows' values 32b..32b+31,
// 1024 bytes) stores at 64k + 4r row r's pair k (values 32b + 2k and
// 32b + 2k + 1), so one 64-byte load holds one pair of 16 rows: vdpbf16ps
// against a broadcast activation pair adds 16 rows' products at once, with
// no horizontal sums (an outer product: a prefill reuses each load across
// the tokens in registers). The pairs meet the same activation pairs in the
// same instruction as the rowmajor kernels', and the one-token kernel keeps
// ggml's vec_dot lanes (per row, pair k of every 64 values in lane k % 32).
//
// "fp8_x16" (FP8 E4M3, rows a multiple of 16, columns a multiple of 128):
// every 16 rows form a group, and a group's block b (the 16 rows' scale
// block of columns 128b..128b+127, 2048 bytes) stores in its 64-byte chunk
// j the columns 128b + 4j..4j+3 of the 16 rows, byte 16L + 8h + 2q + e
// holding row 4L + q's column 128b + 4j + 2h + e (fp8_x16_offset). The FP8
// byte tables' widening (fp8_tables.h: low and high bytes interleaved in
// each 128-bit lane) turns one chunk into two vectors of 16 rows' column
// pairs, (4j, 4j + 1) and (4j + 2, 4j + 3), in row order, as bf16_x16 holds
// them: vdpbf16ps against a broadcast activation pair adds 16 rows at once,
// and a prefill reuses each widened chunk across the tokens in registers.
// One scale per group and block (16 divides 128), applied once per block.
// expert_matrix_layout stores FP8 this way for the avx512bf16 level (since
// stop 49, where "fp8_s16" stored DeepSeek-V3's long gate and up rows 16 at
// a time in slices of 1024 columns for its one-token loop from stop 35;
// rowmajor elsewhere, where the amx level's tiles read rows): in
// its layer against stop 48's layouts, 256 tokens 1.8-2.2x, 32 tokens
// 1.2-1.7x, one token within the noise (docs/cpu-kernels.md, stop 49).
//
// "bf16_x16z" (BF16, rows a multiple of 16, columns a multiple of 128):
// bf16_x16 with each value's high byte coded in 4 bits, losslessly, in the
// same 4096 bytes per 16 rows by 128 columns (bf16_x16z.h), of which a
// kernel reads 3136: 0.77 of the bytes. A matrix is coded as one (its
// spares follow all its cores). Not every matrix codes (random bits do
// not); layout_holds says which, try_repack_rows codes or refuses in one
// pass, and the loader stores a tensor with one that does not as bf16_x16
// (layout_fallback). expert_matrix_layout stores
// BF16 this way for the avx512bf16 level (since stop 50: one token 1.2-1.3
// times the values per GB/s read; docs/cpu-kernels.md); the amx level's
// tiles read bf16_x16.
//
// Same values, same products: the x4 layouts (but q5_k_x4, q6_k_x4) and one-token
// bf16_x16 give the rowmajor results bit for bit.
#pragma once

#include <cstdint>
#include <numeric>
#include <optional>
#include <string_view>

#include "common/dtype.h"
#include "kernels/cpu/cpu_isa.h"

namespace tandem::kernels {

enum class WeightLayout : uint8_t { kRowMajor, kQ4KX4, kQ8_0X4, kBf16X16, kFp8X16, kQ8_0X16, kBf16X16Z, kQ5KX4, kQ6KX4 };

std::string_view layout_name(WeightLayout l);
std::optional<WeightLayout> layout_from_name(std::string_view name);

// The repacked layout of a type (rowmajor where there is none).
WeightLayout repacked_layout(DType type);
// The layout to store routed experts of `type` in for kernels of level
// `isa`: the repacked one where that level has kernels for it (q8_0_x4 from
// avx512 up, where it reads about twice as fast as rowmajor; q4_k_x4,
// q5_k_x4 and q6_k_x4 from avx2 up, whose tiles read them about 2x as fast
// hot; bf16_x16 with avx512bf16, where a prefill runs about 1.7 times as
// fast), else rowmajor (lower levels would read them through the generic
// kernel).
WeightLayout expert_layout(DType type, CpuIsa isa);

// The layout to store one routed-expert matrix of `type` (rows x cols, a
// worker's slice) in for kernels of level `isa`: at avx512bf16 fp8_x16 for
// FP8 and q8_0_x16 for Q8_0 where they fit, otherwise expert_layout's where
// it fits, else rowmajor.
WeightLayout expert_matrix_layout(DType type, CpuIsa isa, int64_t rows, int64_t cols);

// Whether `l` can hold a rows x cols matrix of `type` (rowmajor: always).
bool layout_fits(WeightLayout l, DType type, int64_t rows, int64_t cols);
// Whether `l` can hold these rows' values (`rows` contiguous rowmajor rows
// that fit it): true for every layout but bf16_x16z, which codes only
// values whose exponents lie close together (bf16_x16z.h).
bool layout_holds(WeightLayout l, DType type, const uint8_t* w, int64_t rows, int64_t cols);
// The layout to store a matrix in where `l` does not hold it: bf16_x16 for
// bf16_x16z (which fits wherever bf16_x16z does), else l.
WeightLayout layout_fallback(WeightLayout l);

// Rewrites `rows` contiguous row-major rows of `type` into layout `l`, in
// place (bf16_x16z: as one matrix). Throws kInvalidInput when the layout does not fit or hold them
// (the rows are then as they were).
void repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols);
// As repack_rows, but where `l` does not hold the values (layout_holds)
// returns false with the rows as they were; still throws where it does not
// fit. One pass over the rows where layout_holds and repack_rows take two.
bool try_repack_rows(WeightLayout l, DType type, uint8_t* w, int64_t rows, int64_t cols);

inline constexpr int kX4Rows = 4;  // rows per group of the x4 layouts
inline constexpr size_t kQ4KX4GroupBlock = 4 * 144;  // one super-block of a group
inline constexpr size_t kQ5KX4GroupBlock = 4 * 176;
// Where a q5_k_x4 group block keeps step s's qs line and part p's fifth bits.
constexpr size_t q5_k_x4_qh_at(int p) { return 64 + 320 * size_t(p); }
constexpr size_t q5_k_x4_qs_at(int s) { return q5_k_x4_qh_at(s / 4) + 64 + 64 * size_t(s % 4); }
inline constexpr size_t kQ6KX4GroupBlock = 4 * 210;
// Where a q6_k_x4 group block keeps part p's top bits, step s's qs line and the rows' d.
constexpr size_t q6_k_x4_qh_at(int p) { return 64 + 192 * size_t(p); }
constexpr size_t q6_k_x4_qs_at(int s) { return q6_k_x4_qh_at(s / 2) + 64 + 64 * size_t(s % 2); }
inline constexpr size_t kQ6KX4D = 832;
inline constexpr size_t kQ8_0X4GroupBlock = 4 * 34;
inline constexpr int kX16Rows = 16;  // rows per group of bf16_x16 and q8_0_x16
inline constexpr size_t kQ8_0X16GroupBlock = 16 * 34;
// Where row r (0..15) keeps its value k (0..31) of a q8_0_x16 group block.
constexpr size_t q8_0_x16_offset(int r, int k) { return 32 + 64 * size_t(k / 4) + 4 * size_t(r) + size_t(k % 4); }
inline constexpr size_t kBf16X16GroupBlock = 16 * 64;
inline constexpr int kFp8X16Rows = 16;  // rows per group of fp8_x16
inline constexpr int64_t kFp8X16Cols = 128;  // columns per block: a scale block
inline constexpr size_t kFp8X16GroupBlock = size_t(kFp8X16Rows) * size_t(kFp8X16Cols);
// Where row r (0..15) of a group keeps its column c (0..127) of a block in
// the block's 2048 bytes.
constexpr size_t fp8_x16_offset(int r, int c) {
  return 64 * size_t(c / 4) + 16 * size_t(r / 4) + 8 * size_t(c % 4 / 2) + 2 * size_t(r % 4) + size_t(c % 2);
}
inline constexpr int kMaxGroupRows = kX16Rows;  // the largest group of any layout

// The groups of a layout: rows per group, values per row block, bytes of
// one row's block, bytes of a group's block (rowmajor: single rows).
struct LayoutBlocks {
  int rows;
  size_t block_elems, row_block, group_block;
};
LayoutBlocks layout_blocks(WeightLayout l);
inline int layout_group_rows(WeightLayout l) { return layout_blocks(l).rows; }
// Groups the widest tile of a layout's kernels reads at once (rowmajor:
// rows; taken from the range's halves, thirds or quarters, so a task of
// whole tiles keeps them whole): bf16_x16's and bf16_x16z's prefill tiles take three, fp8_x16's one-token tile
// four, the x4 tiles and q8_0_x16's two (avx2's q4_k_x4 tile one). A caller
// that cuts a matrix into tasks cuts it into multiples of these rows.
inline constexpr int kX16TileGroups = 3;
inline constexpr int kFp8X16TileGroups = 4;  // fp8_x16's one- and two-token tile
inline int layout_tile_rows(WeightLayout l) {
  const bool bf16 = l == WeightLayout::kBf16X16 || l == WeightLayout::kBf16X16Z;
  const int groups = bf16 ? kX16TileGroups : l == WeightLayout::kFp8X16 ? kFp8X16TileGroups : 2;
  return groups * layout_group_rows(l);
}
// The rows a task of a `type` matrix stored as `l` should be a multiple of:
// the layout's tile rows, and the amx level's 16-row tiles for FP8, which
// take only ranges that start at a multiple of 16 (row_dot_amx_fp8.cpp; so
// a matrix cut into tasks sums as one call over it), and for q8_0_x4, which
// go in 16s from a range's start and leave the rest to the slower x4 kernel
// (row_dot_amx_q8.cpp; the same floats either way).
inline int task_rows(WeightLayout l, DType type) {
  const bool amx_tiles = type == DType::kF8E4M3 || l == WeightLayout::kQ8_0X4;
  return std::lcm(layout_tile_rows(l), amx_tiles ? 16 : 1);
}

// Rewrites a rows x cols matrix of `type` stored as `from` into `to`, in
// place (through rowmajor rows). Throws as repack_rows.
void relayout_rows(WeightLayout from, WeightLayout to, DType type, uint8_t* w, int64_t rows, int64_t cols);

// Row group g (layout_group_rows(l) contiguous rowmajor rows of `cols`
// values) of a matrix of `matrix_rows` rows stored as l at `matrix`, to the
// layout's bytes and back, for the repacked layouts: the group's blocks one
// by one, or for bf16_x16z its units' cores and spares (bf16_x16z.h: the
// spares follow every core of the matrix). pack_group returns false, with
// the group undefined, where the layout cannot hold the values (bf16_x16z:
// layout_holds).
bool pack_group(WeightLayout l, const uint8_t* rows, int64_t matrix_rows, int64_t cols, int64_t g, uint8_t* matrix);
void unpack_group(WeightLayout l, const uint8_t* matrix, int64_t matrix_rows, int64_t cols, int64_t g,
                  uint8_t* rows);
// One group's block to and from its rows' plain blocks (layout_blocks(l).rows
// pointers), for the repacked layouts but bf16_x16z, whose units are not
// contiguous.
void pack_group_block(WeightLayout l, const uint8_t* const* rows, uint8_t* group_block);
void unpack_group_block(WeightLayout l, const uint8_t* group_block, uint8_t* const* rows);
// The Q8_K blocks of one activation row (cols values), permuted in place for
// q4_k_x4, q5_k_x4 and q6_k_x4, and back.
inline bool permutes_activations(WeightLayout l) {
  return l == WeightLayout::kQ4KX4 || l == WeightLayout::kQ5KX4 || l == WeightLayout::kQ6KX4;
}
void q4_k_x4_permute_activations(uint8_t* q8_k, int64_t cols);
void q4_k_x4_unpermute_activations(uint8_t* q8_k, int64_t cols);

}  // namespace tandem::kernels
