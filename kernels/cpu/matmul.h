// Reference (plain scalar) weight matrix multiplies: y = W x for every weight
// type the engine keeps, computing what llama.cpp's CPU backend (ggml-cpu)
// computes, so that our logits can be checked against llama.cpp's.
//
// ggml's mul_mat first converts the f32 activations to the weight type's
// "vec_dot_type" and then takes one dot product per (weight row, token):
//
//   weight          activations     per-row dot (as ggml's *_generic)
//   F32             f32             f32 products
//   F16             fp16 (RNE)      fp16 x fp16 products (exact in f32)
//   BF16            bf16 (RNE)      bf16 x bf16 products (exact in f32)
//   Q8_0/Q4_0/Q5_0  Q8_0 per 32     per block: int sum(q_w*q_x) * d_w * d_x
//   Q4_K/Q5_K       Q8_K per 256    per super-block: d_w*d_x*sum_j sc_j*isum_j
//                                     - dmin_w*d_x*sum_j m_j*bsums_j
//   Q6_K            Q8_K per 256    d_w*d_x * sum_j scale_j*isum_j (16-blocks)
//   Q8_K            Q8_K per 256    d_w*d_x * int sum(q_w*q_x)
//
// The integer parts and the per-block float products (including the order
// of the f32 multiplications) are ggml's. The sums over a row follow ggml's
// x86 SIMD order where that is reproduced (f32/f16: vec_dot_f32's 4x16 lanes;
// bf16: vec_dot_bf16's dpbf16 pairs; Q8_0, Q4_0, Q5_0, Q5_K, Q6_K: 8 fma
// lanes of 4-byte integer groups, Q5_K's mins in a scalar fma chain; Q4_K:
// the repacked GEMV's one fma per super-block for the scales and one for
// the mins; see f32_dot.h), so results are llama.cpp's bit for bit there;
// Q8_K accumulates in double, within f32 summation rounding of llama.cpp.
// The same order serves every token count. One more order is on request
// (gemm_order): llama.cpp repacks Q4_K matrices whose row count is a
// multiple of 8 and multiplies the first n - n % 4 of a MUL_MAT's n tokens
// with a GEMM that adds each 64-value chunk with its own fused multiply-add
// (the rest, and every MUL_MAT_ID row, with the GEMV, the default here);
// and it multiplies a BF16 MUL_MAT of n >= 2 tokens whose row length is a
// multiple of 32 with tinyBLAS, one 16-lane vdpbf16ps accumulator per dot
// (one token, and MUL_MAT_ID, with ggml_vec_dot_bf16's two, the default).
// Which tokens those are is the caller's choice (engine/linear.h).
//
// The activation conversion is quantize_activations(): byte for byte what
// ggml-cpu's x86 build feeds its dot products (Q8_0: the AVX quantiser,
// which rounds half to even with 127/amax; Q8_K: quantize_row_q8_K_ref).
// Activations fed to a quantised-weight matmul must be finite.
//
// Usage (several threads): size and provide a workspace with
// matmul_workspace_bytes(), call convert_activations() once, then
// matmul_rows_generic() from each thread with its own [row_begin, row_end);
// they only read the workspace. Nothing here allocates. Weight and
// workspace pointers may have any alignment (GGUF data is read through
// byte pointers, as in dequant.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace tandem::kernels {

// The activation format a weight type multiplies with (ggml's vec_dot_type):
// F32->F32, F16->F16, BF16->BF16, Q8_0/Q4_0/Q5_0->Q8_0,
// Q4_K/Q5_K/Q6_K/Q8_K->Q8_K. Throws tandem::Error(kUnsupported) for types
// without a matmul (F8_E4M3, which the engine converts at load, and the
// integer types), kInvalidInput for an out-of-range enum value.
DType activation_type(DType weight_type);

// Bytes of workspace to convert n_tokens activation rows of `cols` values
// (rows are packed: n_tokens * bytes_for(activation_type, cols)). 0 for F32
// weights and with f32_activations, whose activations are read in place. Throws kInvalidInput if
// cols is not a whole number of blocks of the weight type or the size
// overflows, and as activation_type() for the type.
size_t matmul_workspace_bytes(DType weight_type, int64_t cols, int64_t n_tokens,
                              bool f32_activations = false);

struct MatmulParams {
  DType wtype = DType::kF32;
  const void* w = nullptr;  // rows x cols weights of type wtype
  int64_t rows = 0, cols = 0;
  size_t w_row_stride = 0;   // bytes between weight rows (>= bytes_for(wtype, cols))
  const float* x = nullptr;  // n_tokens x cols activations
  int64_t n_tokens = 0;
  size_t x_row_stride = 0;  // floats between activation rows (>= cols)
  float* y = nullptr;       // output: y[t * y_row_stride + r]
  size_t y_row_stride = 0;  // floats between output rows (>= rows)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t row_begin = 0, row_end = -1;  // weight rows to compute; -1 = rows
  bool accumulate = false;              // y += instead of y =
  // Keep the activations in f32 whatever the weight type: each weight row is
  // decoded and multiplied like an F32 row (f32 products, summed in double),
  // so the result is the dequantised F32 matrix's. For sources whose
  // reference computes in f32 (Hugging Face checkpoints); needs no workspace.
  bool f32_activations = false;
  // Sum as llama.cpp's GEMM for batches does (above): Q4_K (its repacked
  // GEMM) and BF16 (tinyBLAS); no effect on other types.
  bool gemm_order = false;
};

// Errors, all thrown before anything is read or written:
//  - kUnsupported: wtype has no matmul (see activation_type);
//  - kInvalidInput: cols not a whole number of blocks of wtype (something a
//    model file can cause), or a negative size;
//  - kInternal (caller bugs): strides smaller than a packed row (checked
//    only where there is more than one row), a too-small workspace, a
//    row range outside [0, rows], a null pointer that would be used.

// Step 1, once per activation matrix: converts the n_tokens rows of x into
// the workspace. A no-op for F32 weights. Ignores y, row_begin, row_end and
// accumulate.
void convert_activations(const MatmulParams& p);

// Step 2: y[t][r] = dot(W[r], x[t]) (or += with accumulate) for r in
// [row_begin, row_end) and every t, reading the activations converted by
// convert_activations() (F32: x itself). Writes no other element of y.
void matmul_rows_generic(const MatmulParams& p);

// Both steps, over [row_begin, row_end) (the whole matrix by default).
void matmul_generic(const MatmulParams& p);

}  // namespace tandem::kernels
