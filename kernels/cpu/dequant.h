// Reference dequantisation: any stored DType to f32, one element at a time
// with ggml's exact formulas (dequantize_row_* in ggml-quants.c). Slow and
// obviously correct; optimised CPU and GPU kernels are tested against it.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace tandem::kernels {

// Decodes n_elems values of type t from src into dst (n_elems floats).
// Integer types become their value as float. src may have any alignment
// (data mapped from a file often has none to speak of).
// Throws tandem::Error(kInvalidInput) if n_elems is not a whole number of
// blocks of t. Does not allocate.
void dequantize_generic(DType t, const void* src, float* dst, size_t n_elems);

}  // namespace tandem::kernels
