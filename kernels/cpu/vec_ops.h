// Element-wise steps of the expert layer, one variant per CPU level (as
// row_dot.h): SwiGLU between the gate/up and down projections, the
// conversion of f32 activations to bf16 and the router-weighted sum. The generic variants are the
// reference (libm's expf, scalar round-to-nearest-even).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace tandem::kernels {

struct VecOps {
  // g[i] = g[i] / (1 + exp(-g[i])) * u[i] (SiLU(gate) * up). The vector
  // variants' exp is a degree-6 polynomial after range reduction: within
  // 2 ulp of expf, so the result is within 4 ulp of the generic one.
  void (*swiglu)(float* g, const float* u, int64_t n);
  // out[i] = bf16(x[i]), rounded to nearest even, bit-identical to
  // f32_to_bf16 for every finite value and infinity (NaN stays NaN).
  void (*to_bf16)(const float* x, uint16_t* out, int64_t n);
  // n finite values (a whole number of blocks) into Q8_0 / Q8_K activation
  // blocks, byte-identical to quantize_activations() (ggml's x86
  // quantisers). AVX2 uses the generic ones.
  void (*quantize_q8_0)(const float* x, uint8_t* out, int64_t n);
  void (*quantize_q8_k)(const float* x, uint8_t* out, int64_t n);
  // y[i] += a * x[i]: the product rounded, then the sum (no fused
  // multiply-add), so every level gives the generic floats. The expert
  // layer's router-weighted sum.
  void (*add_scaled)(float* y, const float* x, float a, int64_t n);
};

VecOps vec_ops_for(CpuIsa isa);

namespace generic { VecOps vec_ops(); }
namespace avx2 { VecOps vec_ops(); }
namespace avx512 { VecOps vec_ops(); }
namespace avx512bf16 { VecOps vec_ops(); }

}  // namespace tandem::kernels
