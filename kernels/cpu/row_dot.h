// The weight-row dot products of the expert kernels, in one variant per
// instruction-set level (cpu_isa.h): y[t][r] = dot(W[r], a[t]) for a range of
// weight rows and a few tokens whose activations were converted once with
// convert_row_dot_activations(). The fused MoE layer (moe.h) and the engine
// call these; they are the hot loop of the expert workers.
//
// Activation formats (what the weight type multiplies with):
//   F32 -> f32; BF16 and F8_E4M3 -> bf16; F16 -> f16;
//   Q8_0, Q4_0, Q5_0 -> Q8_0 blocks; Q4_K, Q5_K, Q6_K, Q8_K -> Q8_K blocks.
// FP8 E4M3 weights come with 128x128 block scales (DeepSeek-V3's
// weight_scale_inv): each 128-column block's dot is taken in f32 and
// multiplied by its block's scale once ("post-scaling").
//
// The generic variant is the reference: it is kernels/cpu/matmul.h's
// ggml-faithful matmul (plus FP8); the vector variants sum in other orders
// and are tested against it with per-type error bounds (row_dot_test.cpp),
// except the k-quants (Q4_K, Q5_K, Q6_K), which every level sums in
// llama.cpp's x86 order, bit for bit the generic result (but Q5_K and Q6_K
// stored as q5_k_x4 and q6_k_x4, whose tiles add each super-block's, or
// half's, exact sums with one fma: the same floats at every level from
// avx2 up, within a bound of the generic ones; weight_layout.h).
// Kernels never allocate and never throw; row_dot_check() validates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/dtype.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/weight_layout.h"

namespace tandem::kernels {

inline constexpr int kFp8ScaleBlock = 128;
// FP8 calls whose columns are whole scale blocks, at most kFp8LoopMaxCols of
// them, take the avx512bf16 level's own loop (row_dot_x86_fp8_loop.cpp), in
// chunks of tokens of at most kFp8LoopMaxValues tokens x columns (its
// permuted activations live on the stack, 256 KiB); other calls, and those
// with gemm_order (which FP8 otherwise ignores), take that level's tiles,
// with the same floats.
inline constexpr int64_t kFp8LoopMaxCols = 16384;
inline constexpr int64_t kFp8LoopMaxValues = 131072;

struct RowDotParams {
  DType wtype = DType::kF32;
  const uint8_t* w = nullptr;  // rows x cols weights
  size_t w_row_stride = 0;     // bytes between weight rows
  int64_t rows = 0, cols = 0;
  // F8_E4M3 only: scale of block (r / 128, c / 128) at
  // scales[(r / 128) * scale_row_stride + c / 128].
  const float* scales = nullptr;
  size_t scale_row_stride = 0;
  // F8_E4M3, optional: the matrix's marks (fp8_marks.h; row r's at
  // fp8_marks + r * fp8_marks_row_bytes(cols)), which spare the one-token
  // kernel its search for the bytes its bit maps cannot widen.
  const uint8_t* fp8_marks = nullptr;
  const uint8_t* a = nullptr;  // n_tokens converted activation rows
  size_t a_row_bytes = 0;      // bytes between them (>= row_dot_activation_bytes)
  // If set, token t's activation row is a_rows[t] instead (a gather: the
  // tokens routed to one expert, from the layer's converted activations).
  const uint8_t* const* a_rows = nullptr;
  int64_t n_tokens = 0;
  float* y = nullptr;  // y[t * y_row_stride + r]
  size_t y_row_stride = 0;
  int64_t row_begin = 0, row_end = 0;  // rows computed: [row_begin, row_end)
  // Optional: the rows the caller multiplies next (same type and stride),
  // which the last rows' prefetches run on into (the up projection after
  // the gate one), so that call does not start cold. A hint only.
  const uint8_t* then_rows = nullptr;
  // Optional, x4 layouts only (layout_takes_pairs): a second matrix of the
  // same type, layout, shape and stride whose rows row_begin..row_end the
  // call computes too, into pair_y (y_row_stride apart): the MoE's up
  // projection beside its gate. Kernels whose tiles take two groups read
  // the two side by side as two streams; the others one after the other.
  // The same floats either way.
  const uint8_t* pair_w = nullptr;
  float* pair_y = nullptr;
  // Sum as llama.cpp's GEMM for batches (matmul.h's gemm_order): Q4_K,
  // each 64-value chunk with its own fma (the same result at every level);
  // BF16, tinyBLAS's one vdpbf16ps accumulator (the generic and avx512bf16
  // levels). FP8 (whose sums are the same either way elsewhere): the
  // tiles, which the avx512bf16 loop and the avx2 prefill GEMM leave it to
  // (the GEMM's floats are its own). No effect on other types.
  bool gemm_order = false;
  // How w is stored (weight_layout.h). q4_k_x4: row_begin and row_end are
  // multiples of 4, w_row_stride is the row length, and the activations
  // were converted for that layout (convert_row_dot_activations).
  WeightLayout layout = WeightLayout::kRowMajor;
  // Who prefetches a one-token stream (cpu_isa.h); unset: cpu_prefetch().
  // The same floats either way (tests run both).
  std::optional<CpuPrefetch> prefetch;
};

using RowDotFn = void (*)(const RowDotParams&);

// The call's prefetch profile: its own (tests, benchmarks) or the CPU's.
inline CpuPrefetch prefetch_profile(const RowDotParams& p) { return p.prefetch.value_or(cpu_prefetch()); }

// Whether a kernel asks for its weight stream's lines itself: where the
// CPU's prefetchers do not keep DRAM busy alone (cpu_prefetch()), and for
// more than `hardware_tokens` tokens everywhere (the tiles of many tokens
// were tuned with their requests; on a Zen 4 without them some rows gained
// and some lost, stop 59). The x16 layouts' tiles (bf16_x16z, fp8_x16,
// q8_0_x16) leave up to 4 tokens to a Zen 4's prefetchers (stop 64: the
// layer at 32 tokens, the two alternated by repetition in one process, both
// orders: Qwen3-30B-A3B BF16 1.03-1.11x, Q8_0 1.00-1.16x, FP8 1.02-1.03x,
// DeepSeek-V3 0.99-1.12x; at 8 tokens 0.96-1.09x; tiles of 8 tokens lost
// without them, so more than 4 still ask); the x4 layouts' tiles keep
// asking from 2 (Q4_K at 32 tokens 0.98-1.02x without). The rowmajor tiles
// (row_dot_x86_tile.h's driver) follow the profile at every token count.
inline constexpr int64_t kX16HardwareStreamTokens = 4;
inline bool asks_for_stream(const RowDotParams& p, int64_t hardware_tokens) {
  return p.n_tokens > hardware_tokens || prefetch_profile(p) == CpuPrefetch::kSoftware;
}

// Runs `rows` on p's matrix and then on its pair (RowDotParams::pair_w),
// for kernels that read the two one after the other: the first call's
// prefetches run on into the pair's rows, the second's into the caller's
// next (then_rows).
template <class Rows>
void rows_then_pair(Rows&& rows, const RowDotParams& p) {
  RowDotParams q = p;
  q.pair_w = nullptr;
  q.pair_y = nullptr;
  if (p.pair_w) q.then_rows = p.pair_w + size_t(p.row_begin) * p.w_row_stride;
  rows(q);
  if (!p.pair_w) return;
  q.w = p.pair_w;
  q.y = p.pair_y;
  q.then_rows = p.then_rows;
  rows(q);
}

// The layouts whose row dots take a pair (RowDotParams::pair_w), at every
// level: the x4 ones.
inline bool layout_takes_pairs(WeightLayout l) {
  return l == WeightLayout::kQ4KX4 || l == WeightLayout::kQ8_0X4 || l == WeightLayout::kQ5KX4 ||
         l == WeightLayout::kQ6KX4;
}

inline const uint8_t* activation_row(const RowDotParams& p, int64_t t) {
  return p.a_rows ? p.a_rows[t] : p.a + size_t(t) * p.a_row_bytes;
}

// Activation format of a weight type (above). Throws kUnsupported for types
// with no kernel (I8, U8, I32).
DType row_dot_activation_type(DType wtype);
// Bytes of one converted row of `cols` values, rounded up to 64 so rows are
// cache-line aligned when the buffer is. Throws kInvalidInput when cols is not
// a whole number of the weight type's (and its activation type's) blocks.
size_t row_dot_activation_bytes(DType wtype, int64_t cols);

// Converts n_tokens rows of f32 activations (x_row_stride floats apart) into
// out (out_row_bytes apart). Quantised formats are ggml's x86 quantisers
// (quantize.h), so the generic variant reproduces llama.cpp; bf16 uses the
// level's vec_ops.h conversion (bit-identical at every level). `out` needs
// no alignment (bf16 rows are written as uint16_t). Activations fed to
// quantised weights must be finite. `layout`: the weights' (q4_k_x4 and
// q5_k_x4 permute each Q8_K block to match).
void convert_row_dot_activations(DType wtype, const float* x, size_t x_row_stride,
                                 int64_t n_tokens, int64_t cols, uint8_t* out,
                                 size_t out_row_bytes, CpuIsa isa = CpuIsa::kGeneric,
                                 WeightLayout layout = WeightLayout::kRowMajor);

// For weights whose activations are bf16 (BF16, F8_E4M3): each f32 row as two
// bf16 rows, hi = bf16(x) at out row 2t and lo = bf16(x - hi) at row 2t+1.
// The two dots add up to the dot with x to about 2^-17 of |x| per value
// (bf16 alone: 2^-9), which is what a Hugging Face model's f32 reference
// needs; a kernel given 2n rows does twice the multiplies on the same weight
// bytes. Infinities keep lo = 0. Throws kInternal for other weight types.
void convert_row_dot_activations_split(DType wtype, const float* x, size_t x_row_stride,
                                       int64_t n_tokens, int64_t cols, uint8_t* out,
                                       size_t out_row_bytes, CpuIsa isa = CpuIsa::kGeneric);

// The kernel of `isa` for `wtype`: the variant's own, or the best lower
// level's where that variant has none for the type (every type has a generic
// one). Throws kUnsupported for types without any kernel.
RowDotFn row_dot_for(CpuIsa isa, DType wtype);
// The level whose code row_dot_for(isa, wtype) runs.
CpuIsa row_dot_level(CpuIsa isa, DType wtype);

// Throws tandem::Error (kInvalidInput for shapes a model file can cause,
// kInternal for caller bugs) if p is not something the kernels accept.
void row_dot_check(const RowDotParams& p);

// Each variant's table: nullptr where it has no kernel for the type.
namespace generic { RowDotFn find(DType wtype); }
namespace avx2 { RowDotFn find(DType wtype); }
namespace avx512 { RowDotFn find(DType wtype); }
namespace avx512bf16 { RowDotFn find(DType wtype); }
// BF16, FP8 and Q8_0 (q8_0_x4) prefill in tiles; the rest is avx512bf16's.
namespace amx { RowDotFn find(DType wtype); }

}  // namespace tandem::kernels
