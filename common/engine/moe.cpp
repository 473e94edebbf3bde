// Routed and shared experts: each token's experts (chosen by router.cpp) run
// as SwiGLU FFNs and add up by their weights; shared experts run for all.
#include <algorithm>
#include <span>

#include "common/engine/model_layer.h"
#include "common/engine/router.h"

namespace tandem::engine {

void Model::moe_ffn(const Layer& L, const float* xn, int64_t n, float* out) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden, E = c.moe.n_experts, F = c.moe.expert_ffn;
  std::vector<float> logits(size_t(n * E));
  linear_(L.router->matrix(), xn, n, logits.data());
  std::fill(out, out + n * H, 0.0f);
  std::vector<int> experts;
  std::vector<float> weights, g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), y(static_cast<size_t>(H));
  const std::span<const float> bias =
      L.router_bias ? L.router_bias->values() : std::span<const float>();
  for (int64_t t = 0; t < n; ++t) {
    float margin = route_token(c.moe, logits.data() + t * E, bias, experts, weights);
    route_margins_[size_t(t)] = std::min(route_margins_[size_t(t)], margin);
    const float* xt = xn + t * H;
    for (size_t k = 0; k < experts.size(); ++k) {
      const size_t e = size_t(experts[k]);
      linear_(L.gate_exps->matrix(e), xt, 1, g.data());
      linear_(L.up_exps->matrix(e), xt, 1, u.data());
      swiglu(g.data(), u.data(), F);
      linear_(L.down_exps->matrix(e), g.data(), 1, y.data());
      for (int64_t i = 0; i < H; ++i) out[t * H + i] += weights[k] * y[size_t(i)];
    }
  }
  if (L.gate_sh) shared_experts(L, xn, n, out);
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
