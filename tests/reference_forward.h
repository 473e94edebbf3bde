// A plain scalar reference forward pass for every supported MoE family,
// written from the Hugging Face modeling code, NOT from the engine: it shares
// no code with common/engine or the kernels' matmuls, so an error in the
// optimised path cannot cancel out against the same error here.
//
// What "plain" means:
//   - weights are read once as canonical F32 (read_f32: the tensor map's
//     dequantisation), so a quantised file is computed with exactly the
//     weights it holds;
//   - activations stay in double everywhere (never quantised, never rounded
//     to fp16/bf16), and every sum accumulates in double;
//   - no KV cache: each call attends causally over the whole prompt with an
//     ordinary softmax.
// The engine instead reproduces llama.cpp's arithmetic (activations in each
// weight type's dot format, fp16 attention), so the two agree to within that
// rounding only; the tests bound the difference per weight type.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/model/config.h"

namespace tandem {
class ModelSource;
}

namespace tandem::reference {

using Vec = std::vector<double>;

struct ForwardResult {
  std::vector<double> logits;  // n_tokens x vocab
  // Per token, the smallest routing decision margin over its MoE layers: the
  // gap between the last chosen and the first unchosen expert's selection
  // score, or between the last kept and the first dropped group's score.
  // +infinity for a model without MoE layers. A tiny margin means a routing
  // near-tie that the engine's different rounding may legitimately flip.
  std::vector<double> route_margins;
};

class ReferenceModel {
 public:
  // Reads every canonical tensor of src as F32; src is not needed afterwards.
  explicit ReferenceModel(const ModelSource& src);

  const ModelConfig& config() const { return c_; }
  // Logits of every position of `tokens`, which start at position 0.
  ForwardResult forward(std::span<const uint32_t> tokens) const;

 private:
  // A row-major matrix of a canonical tensor (one matrix of a stacked one).
  struct Mat {
    const float* w;
    size_t rows, cols;
    Vec operator*(std::span<const double> x) const;  // W x
  };

  bool has(const std::string& name) const { return w_.count(name) != 0; }
  std::span<const float> values(const std::string& name) const;
  // Matrix `index` of a [..., rows, cols] tensor (experts, MLA heads).
  Mat mat(const std::string& name, size_t index = 0) const;
  static std::string blk(uint32_t layer, const char* suffix);

  // reference_attention.cpp: one layer's attention output for every token.
  std::vector<Vec> attention_gqa(uint32_t layer, const std::vector<Vec>& xn) const;
  std::vector<Vec> attention_mla(uint32_t layer, const std::vector<Vec>& xn) const;

  // reference_moe.cpp
  Vec swiglu(const std::string& gate, const std::string& up, const std::string& down,
             const Vec& x, size_t index = 0) const;
  Vec dense_ffn(uint32_t layer, const Vec& xn) const;
  Vec moe_ffn(uint32_t layer, const Vec& xn, double& margin) const;
  struct Routing {
    std::vector<size_t> experts;
    Vec weights;
    double margin;
  };
  Routing route(uint32_t layer, const Vec& logits) const;

  ModelConfig c_;
  std::map<std::string, std::vector<float>> w_;
  std::map<std::string, std::vector<uint64_t>> shape_;
};

// y = x / sqrt(mean(x^2) + eps) * w
Vec rms_norm(std::span<const double> x, std::span<const float> w, double eps);

}  // namespace tandem::reference
