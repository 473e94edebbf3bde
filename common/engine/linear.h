// y = W x for a prepared weight matrix and n_tokens activation rows, through
// kernels/cpu's matmul (activations converted to the weight type's dot
// format once per call). The engine owns the workspace; kernels never allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/weights.h"

namespace tandem::engine {

class Linear {
 public:
  // x: n_tokens rows of w.cols floats; y: n_tokens rows of w.rows floats.
  void operator()(const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                  bool accumulate = false);

 private:
  std::vector<std::byte> workspace_;
};

}  // namespace tandem::engine
