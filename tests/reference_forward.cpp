// The reference's weights and its decoder loop (HF *ForCausalLM.forward):
// embed, per layer x += attn(norm(x)); x += ffn(norm(x)), final norm, head.
#include "tests/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/error.h"
#include "common/model/model_source.h"

namespace tandem::reference {

Vec rms_norm(std::span<const double> x, std::span<const float> w, double eps) {
  double sum_sq = 0;
  for (double v : x) sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * double(w[i]);
  return y;
}

Vec ReferenceModel::Mat::operator*(std::span<const double> x) const {
  if (x.size() != cols)
    fail(ErrorKind::kInternal, "reference: {} x {} matrix times a vector of {}", rows, cols, x.size());
  Vec y(rows);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    double acc = 0;
    for (size_t i = 0; i < cols; ++i) acc += double(row[i]) * x[i];
    y[r] = acc;
  }
  return y;
}

ReferenceModel::ReferenceModel(const ModelSource& src) : c_(src.config()) {
  for (const MappedTensor& t : src.tensors().tensors()) {
    w_[t.name] = read_f32(t);
    shape_[t.name] = t.shape;
  }
}

std::span<const float> ReferenceModel::values(const std::string& name) const {
  auto it = w_.find(name);
  if (it == w_.end()) fail(ErrorKind::kNotFound, "reference: tensor '{}' is not in the model", name);
  return it->second;
}

ReferenceModel::Mat ReferenceModel::mat(const std::string& name, size_t index) const {
  std::span<const float> v = values(name);
  const std::vector<uint64_t>& s = shape_.at(name);
  if (s.size() < 2) fail(ErrorKind::kInternal, "reference: '{}' is not a matrix", name);
  const size_t rows = s[s.size() - 2], cols = s.back();
  if ((index + 1) * rows * cols > v.size())
    fail(ErrorKind::kInternal, "reference: '{}' has no matrix {}", name, index);
  return {v.data() + index * rows * cols, rows, cols};
}

std::string ReferenceModel::blk(uint32_t layer, const char* suffix) {
  return fmt::format("blk.{}.{}", layer, suffix);
}

ForwardResult ReferenceModel::forward(std::span<const uint32_t> tokens) const {
  const size_t n = tokens.size(), H = c_.hidden, V = c_.vocab_size;
  const double eps = c_.rms_eps;
  std::vector<Vec> x(n);
  std::span<const float> emb = values("token_embd.weight");
  for (size_t t = 0; t < n; ++t) {
    if (tokens[t] >= V) fail_invalid("reference: token {} outside the vocabulary", tokens[t]);
    x[t].assign(emb.begin() + ptrdiff_t(tokens[t] * H), emb.begin() + ptrdiff_t((tokens[t] + 1) * H));
  }
  ForwardResult r;
  r.route_margins.assign(n, std::numeric_limits<double>::infinity());
  std::vector<Vec> xn(n);
  for (uint32_t l = 0; l < c_.n_layers; ++l) {
    for (size_t t = 0; t < n; ++t) xn[t] = rms_norm(x[t], values(blk(l, "attn_norm.weight")), eps);
    std::vector<Vec> a = c_.is_mla() ? attention_mla(l, xn) : attention_gqa(l, xn);
    for (size_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < H; ++i) x[t][i] += a[t][i];
      Vec h = rms_norm(x[t], values(blk(l, "ffn_norm.weight")), eps);
      double margin = std::numeric_limits<double>::infinity();
      Vec f = c_.is_moe_layer(l) ? moe_ffn(l, h, margin) : dense_ffn(l, h);
      r.route_margins[t] = std::min(r.route_margins[t], margin);
      for (size_t i = 0; i < H; ++i) x[t][i] += f[i];
    }
  }
  Mat head = mat("output.weight");
  r.logits.reserve(n * V);
  for (size_t t = 0; t < n; ++t) {
    Vec y = head * rms_norm(x[t], values("output_norm.weight"), eps);
    r.logits.insert(r.logits.end(), y.begin(), y.end());
  }
  return r;
}

}  // namespace tandem::reference
