// Reference quantisation: f32 to any stored DType. quantize_generic() writes
// test models (GGUF files) and serves tests; quantize_activations() converts
// matmul activations as llama.cpp's CPU backend does.
//
// Q8_0, Q4_0, Q5_0 and Q8_K follow ggml's quantize_row_*_ref exactly (scale
// from the largest-magnitude value), and Q4_K, Q5_K and Q6_K follow ggml's
// reference k-quant search (weighted least-squares scale/min per sub-block,
// 6/8-bit quantised sub-block scales), so files we write look like files
// llama.cpp writes. Whatever the type, the output decodes with
// dequantize_generic().
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace tandem::kernels {

// Encodes n_elems floats from src as type t into dst (bytes_for(t, n_elems)
// bytes; no alignment needed). Plain float types round to nearest even (FP8
// saturates to +-448); integer types round to nearest even, saturate, and
// map NaN to 0. Inputs to the block types should be finite. Throws
// tandem::Error(kInvalidInput) if n_elems is not a whole number of blocks.
// Does not allocate.
void quantize_generic(DType t, const float* src, void* dst, size_t n_elems);

// The conversion of f32 activations into a matmul's activation format
// (ggml's from_float of the vec_dot_type), as ggml-cpu does it on x86. Equal
// to quantize_generic() except for Q8_0, where ggml's SIMD quantiser differs
// from its reference in rounding (see quantize.cpp): its quants are the
// reference's or one unit away. Same errors and contract as quantize_generic.
void quantize_activations(DType t, const float* src, void* dst, size_t n_elems);

}  // namespace tandem::kernels
