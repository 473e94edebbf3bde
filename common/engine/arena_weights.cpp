// ModelWeights over a weight arena: the dense tensors, zero-copy. The arena
// stores each tensor in the type ModelWeights::prepare would hold it in
// (arena_plan.h: own type for whole rows, F32 for transposes, FP8 block
// scales and vectors), so both give the engine the same numbers.
#include <cstring>

#include "common/arena/arena.h"
#include "common/engine/weights.h"
#include "common/error.h"

namespace tandem {

ModelWeights ModelWeights::from_arena(const arena::Arena& a) {
  ModelWeights w;
  for (const arena::ArenaTensor& t : a.tensors()) {
    if (t.worker >= 0) continue;
    if (t.layout != "rowmajor")
      fail(ErrorKind::kInternal, "arena {}: dense tensor {} is stored as {}; the engine reads rowmajor only",
           a.path(), t.name, t.layout);
    auto out = std::make_unique<Weight>();
    out->name_ = t.name;
    out->shape_ = t.shape;
    uint64_t elems = 1;
    for (uint64_t d : t.shape) elems *= d;
    if (t.shape.size() == 1) {
      if (t.dtype != DType::kF32)
        fail(ErrorKind::kInternal, "arena {}: vector tensor {} is not F32", a.path(), t.name);
      out->values_.resize(size_t(elems));
      std::memcpy(out->values_.data(), t.bytes.data(), size_t(elems) * sizeof(float));
    } else {
      const int64_t cols = int64_t(t.shape.back());
      const int64_t rows = int64_t(t.shape[t.shape.size() - 2]);
      const size_t row_bytes = *bytes_for(t.dtype, uint64_t(cols));
      const uint64_t n_matrices = elems / uint64_t(rows * cols);
      if (n_matrices * uint64_t(rows) * row_bytes > t.bytes.size())
        fail(ErrorKind::kInternal, "arena {}: tensor {} is shorter than its shape", a.path(), t.name);
      for (uint64_t m = 0; m < n_matrices; ++m) {
        MatrixView v{t.dtype, t.bytes.data() + m * uint64_t(rows) * row_bytes, rows, cols, row_bytes};
        v.f32_activations = a.source_is_hf();
        out->matrices_.push_back(v);
      }
    }
    w.weights_.emplace(t.name, std::move(out));
  }
  return w;
}

}  // namespace tandem
