#include "common/engine/weights.h"

#include <cstring>

#include "common/error.h"
#include "common/model/model_source.h"

namespace tandem {
namespace {

bool plain_rows(const TensorPiece& p) {
  return p.gather.empty() && !p.transpose && p.src->scale.empty();
}

// Splits the canonical rows of a [.., rows, cols] tensor into matrices of
// `rows_per_matrix` rows, each a view into the piece that holds it.
std::vector<MatrixView> views(const MappedTensor& t, int64_t rows_per_matrix) {
  std::vector<MatrixView> out;
  for (const TensorPiece& p : t.pieces) {
    const SourceMatrix& s = *p.src;
    if (int64_t(p.n_rows) % rows_per_matrix != 0)
      throw Error(ErrorKind::kInternal,
                  fmt::format("{}: a piece of {} rows does not hold whole matrices of {} rows",
                              t.name, p.n_rows, rows_per_matrix));
    for (uint64_t r = 0; r < p.n_rows; r += uint64_t(rows_per_matrix))
      out.push_back({s.dtype, s.row(p.first_row + r).data(), rows_per_matrix, int64_t(s.cols),
                     s.row_bytes()});
  }
  return out;
}

}  // namespace

ModelWeights ModelWeights::prepare(const ModelSource& src) {
  ModelWeights w;
  for (const MappedTensor& t : src.tensors().tensors()) {
    auto out = std::make_unique<Weight>();
    out->name_ = t.name;
    out->shape_ = t.shape;
    const auto& shape = t.shape;
    bool vector = shape.size() == 1;
    if (vector) {
      out->values_ = read_f32(t);
    } else {
      const int64_t cols = int64_t(shape.back());
      const int64_t rows_per_matrix = int64_t(shape[shape.size() - 2]);
      const size_t n_matrices = t.n_elems() / uint64_t(cols * rows_per_matrix);
      bool all_plain = true;
      for (auto& p : t.pieces) all_plain &= plain_rows(p);
      if (all_plain) {
        out->matrices_ = views(t, rows_per_matrix);
      } else {
        bool only_gathers = true;
        for (auto& p : t.pieces) only_gathers &= !p.transpose && p.src->scale.empty();
        DType dt = only_gathers ? t.dtype : DType::kF32;
        const size_t row_bytes = *bytes_for(dt, uint64_t(cols));
        const int64_t total_rows = int64_t(t.n_elems()) / cols;
        out->owned_.resize(size_t(total_rows) * row_bytes);
        if (only_gathers) {
          // Copy whole rows in their stored type: quantised blocks stay intact.
          std::byte* dst = out->owned_.data();
          for (auto& p : t.pieces)
            for (uint64_t i = 0; i < (p.gather.empty() ? p.n_rows : p.gather.size()); ++i) {
              uint64_t r = p.gather.empty() ? p.first_row + i : p.gather[i];
              std::memcpy(dst, p.src->row(r).data(), row_bytes);
              dst += row_bytes;
            }
        } else {
          read_f32(t, std::span<float>(reinterpret_cast<float*>(out->owned_.data()),
                                       size_t(total_rows * cols)));
        }
        for (size_t m = 0; m < n_matrices; ++m)
          out->matrices_.push_back({dt, out->owned_.data() + m * size_t(rows_per_matrix) * row_bytes,
                                    rows_per_matrix, cols, row_bytes});
      }
      for (MatrixView& m : out->matrices_)
        m.f32_activations = src.format() == SourceFormat::kHuggingFace;
      if (out->matrices_.size() != n_matrices)
        throw Error(ErrorKind::kInternal, fmt::format("{}: {} matrices, expected {}", t.name,
                                                      out->matrices_.size(), n_matrices));
    }
    w.weights_.emplace(t.name, std::move(out));
  }
  return w;
}

const Weight& ModelWeights::at(const std::string& name) const {
  if (auto* w = find(name)) return *w;
  throw Error(ErrorKind::kNotFound, fmt::format("weight '{}' is not in the model", name));
}

const Weight* ModelWeights::find(const std::string& name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : it->second.get();
}

uint64_t ModelWeights::owned_bytes() const {
  uint64_t n = 0;
  for (auto& [k, v] : weights_) n += v->owned_.size() + v->values_.size() * sizeof(float);
  return n;
}

}  // namespace tandem
