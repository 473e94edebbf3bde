// Weights prepared for the engine: every canonical tensor as a list of 2-D
// matrices (one per expert for stacked experts, one per head for MLA's
// k_b/v_b, one otherwise) or, for 1-D tensors, f32 values.
//
// Matrices are zero-copy views of the model files wherever the tensor map
// allows (GGUF, and HF tensors whose rows are used as stored, including
// per-expert tensors). Row gathers (llama-arch GGUF q/k) are copied in their
// own type, so quantised weights stay bit-identical; transposes (HF kv_b ->
// k_b) and FP8 block scales are materialised as f32.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/model/tensor_map.h"

namespace tandem {

class ModelSource;
namespace arena {
class Arena;
}

struct MatrixView {
  DType dtype;
  const std::byte* data;
  int64_t rows, cols;
  size_t row_stride;  // bytes between consecutive rows
  // Multiply with f32 activations rather than the weight type's own
  // activation format (see kernels::MatmulParams): set for Hugging Face
  // sources, whose reference computes in f32; GGUF weights compute as
  // llama.cpp does.
  bool f32_activations = false;
};

class Weight {
 public:
  const std::string& name() const { return name_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  size_t matrix_count() const { return matrices_.size(); }
  const MatrixView& matrix(size_t i = 0) const { return matrices_.at(i); }
  // f32 values of a 1-D (or [1, n]) tensor: norms, biases, gates.
  std::span<const float> values() const { return values_; }

 private:
  friend class ModelWeights;
  std::string name_;
  std::vector<uint64_t> shape_;
  std::vector<MatrixView> matrices_;
  std::vector<float> values_;
  std::vector<std::byte> owned_;  // backing store when not zero-copy
};

class ModelWeights {
 public:
  // Prepares every tensor of the source's tensor map. The source must
  // outlive the weights (views point into its mappings).
  static ModelWeights prepare(const ModelSource& src);
  // Views of an arena's dense tensors (routed experts live in the expert
  // workers' slices and are left out). The arena must outlive the weights.
  static ModelWeights from_arena(const arena::Arena& a);

  const Weight& at(const std::string& name) const;
  const Weight* find(const std::string& name) const;
  // Bytes held in owned copies (0 for a fully zero-copy model).
  uint64_t owned_bytes() const;

 private:
  std::map<std::string, std::unique_ptr<Weight>, std::less<>> weights_;
};

}  // namespace tandem
