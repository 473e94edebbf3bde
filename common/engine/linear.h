// y = W x for a prepared weight matrix and n_tokens activation rows
// (activations converted to the weight type's dot format once per call).
// At CpuIsa::kGeneric, through kernels/cpu's ggml-faithful matmul (the
// reference); at a vector level, through that level's row-dot kernels where
// it has one for the type (row_dot.h), else the reference. Matrices that keep
// f32 activations (Hugging Face sources) always take the reference. A Q4_K
// matrix with a multiple of 8 rows sums the first n - n % 4 tokens in
// llama.cpp's repacked-GEMM order (as llama.cpp's MUL_MAT does), so the
// engine's prompts reproduce llama.cpp's roundings; callers that pass one
// token at a time (the routed experts, like llama.cpp's MUL_MAT_ID) get the
// per-super-block order. The engine owns the workspace; kernels never
// allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/weights.h"
#include "kernels/cpu/cpu_isa.h"

namespace tandem::engine {

class Linear {
 public:
  explicit Linear(kernels::CpuIsa isa = kernels::CpuIsa::kGeneric) : isa_(isa) {}
  kernels::CpuIsa isa() const { return isa_; }

  // x: n_tokens rows of w.cols floats; y: n_tokens rows of w.rows floats.
  void operator()(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                  bool accumulate = false);

 private:
  kernels::CpuIsa isa_;
  std::vector<std::byte> workspace_;
  std::vector<float> sum_;
};

}  // namespace tandem::engine
