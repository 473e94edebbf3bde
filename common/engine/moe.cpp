// Routed and shared experts: each token's experts (chosen by router.cpp) run
// as SwiGLU FFNs and add up by their weights; shared experts run for all.
// Routed experts run here, or wherever set_routed_experts() sends them.
#include <algorithm>
#include <span>

#include "common/engine/model_layer.h"
#include "common/engine/router.h"
#include "common/error.h"

namespace tandem::engine {

void Model::moe_ffn(const Layer& L, int64_t layer, const float* xn, int64_t n, float* out) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden, E = c.moe.n_experts;
  const int K = int(c.moe.n_experts_used);
  std::vector<float> logits(size_t(n * E));
  linear_(L.router->matrix(), xn, n, logits.data());
  std::vector<int32_t> ids(size_t(n * K), -1);
  std::vector<float> wts(size_t(n * K), 0.0f);
  std::vector<int> experts;
  std::vector<float> weights;
  const std::span<const float> bias =
      L.router_bias ? L.router_bias->values() : std::span<const float>();
  for (int64_t t = 0; t < n; ++t) {
    float margin = route_token(c.moe, logits.data() + t * E, bias, experts, weights);
    route_margins_[size_t(t)] = std::min(route_margins_[size_t(t)], margin);
    for (size_t k = 0; k < experts.size() && k < size_t(K); ++k) {
      ids[size_t(t * K) + k] = experts[k];
      wts[size_t(t * K) + k] = weights[k];
    }
  }
  RoutedWork work{layer, n, K, H, xn, ids.data(), wts.data(), out};
  if (!routed_) {
    local_routed_experts(L, work);
    if (L.gate_sh) shared_experts(L, xn, n, out);
    return;
  }
  routed_->start(work);
  std::vector<float> shared;
  if (L.gate_sh) {
    shared.assign(size_t(n * H), 0.0f);
    shared_experts(L, xn, n, shared.data());
  }
  routed_->finish();
  // The same order of additions as in-process: routed sum, then shared.
  for (size_t i = 0; i < shared.size(); ++i) out[i] += shared[i];
}

void Model::local_routed_experts(const Layer& L, const RoutedWork& w) {
  if (!L.gate_exps)
    fail(ErrorKind::kInternal,
         "layer {}: the routed experts are not in this process's weights and no expert workers "
         "were given", w.layer);
  const int64_t H = w.hidden, F = config_.moe.expert_ffn;
  std::vector<float> g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), y(static_cast<size_t>(H));
  std::fill(w.y, w.y + w.n_tokens * H, 0.0f);
  for (int64_t t = 0; t < w.n_tokens; ++t) {
    const float* xt = w.x + t * H;
    for (int k = 0; k < w.top_k; ++k) {
      const int32_t e = w.expert_ids[t * w.top_k + k];
      if (e < 0) continue;
      const float wk = w.expert_weights[t * w.top_k + k];
      linear_(L.gate_exps->matrix(size_t(e)), xt, 1, g.data());
      linear_(L.up_exps->matrix(size_t(e)), xt, 1, u.data());
      swiglu(g.data(), u.data(), F);
      linear_(L.down_exps->matrix(size_t(e)), g.data(), 1, y.data());
      for (int64_t i = 0; i < H; ++i) w.y[t * H + i] += wk * y[size_t(i)];
    }
  }
}

void Model::shared_experts(const Layer& L, const float* xn, int64_t n, float* out) {
  const int64_t H = config_.hidden, S = L.gate_sh->matrix().rows;
  std::vector<float> g(size_t(n * S)), u(size_t(n * S)), y(size_t(n * H));
  linear_(L.gate_sh->matrix(), xn, n, g.data());
  linear_(L.up_sh->matrix(), xn, n, u.data());
  for (int64_t t = 0; t < n; ++t) swiglu(g.data() + t * S, u.data() + t * S, S);
  linear_(L.down_sh->matrix(), g.data(), n, y.data());
  std::vector<float> gate(size_t(n), 1.0f);
  if (L.gate_inp_sh) {  // qwen2_moe: a sigmoid gate per token
    linear_(L.gate_inp_sh->matrix(), xn, n, gate.data());
    for (float& v : gate) v = sigmoid(v);
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < H; ++i) out[t * H + i] += gate[size_t(t)] * y[size_t(t * H + i)];
}

}  // namespace tandem::engine
