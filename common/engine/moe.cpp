// Routed and shared experts. Routers: softmax or sigmoid scores; selection by
// score (+ DeepSeek-V3's correction bias) within the top groups; weights are
// the unbiased scores of the chosen experts, optionally renormalised, scaled
// by routed_scaling_factor.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/engine/model_layer.h"

namespace tandem::engine {
namespace {

// Indices of the k largest values, largest first; ties go to the lower index.
std::vector<int> top_k(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b);
  });
  idx.resize(size_t(k));
  return idx;
}

}  // namespace

float Model::route(const Layer& L, const float* logits, std::vector<int>& experts,
                   std::vector<float>& weights) const {
  float margin = INFINITY;
  const MoeConfig& m = config_.moe;
  const int E = int(m.n_experts);
  std::vector<float> probs(logits, logits + E);
  if (m.scoring == RouterScoring::kSoftmax) softmax(probs.data(), E);
  else
    for (float& p : probs) p = sigmoid(p);
  std::vector<float> sel = probs;
  if (L.router_bias) {
    auto b = L.router_bias->values();
    for (int e = 0; e < E; ++e) sel[size_t(e)] += b[size_t(e)];
  }
  if (m.n_group > 1 && m.topk_group < m.n_group) {
    // Score each group: the sum of its two best (V3, noaux_tc) or its best
    // (V2, group_limited_greedy); keep the top groups' experts only.
    const int per = E / int(m.n_group);
    std::vector<float> group_score(m.n_group);
    for (int g = 0; g < int(m.n_group); ++g) {
      std::vector<float> member(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(member.begin(), member.end(), std::greater<>());
      group_score[size_t(g)] = m.score_correction_bias ? member[0] + (per > 1 ? member[1] : 0.0f) : member[0];
    }
    std::vector<int> keep = top_k(group_score, int(m.topk_group));
    std::vector<float> gs = group_score;
    std::nth_element(gs.begin(), gs.begin() + m.topk_group, gs.end(), std::greater<>());
    margin = group_score[size_t(keep.back())] - gs[m.topk_group];
    std::vector<bool> kept(m.n_group, false);
    for (int g : keep) kept[size_t(g)] = true;
    for (int e = 0; e < E; ++e)
      if (!kept[size_t(e / per)]) sel[size_t(e)] = -INFINITY;
  }
  // One expert past top-k, to measure how close the choice was.
  const int k = int(m.n_experts_used), k1 = std::min(k + 1, E);
  experts = top_k(sel, k1);
  if (k1 > k) {
    if (sel[size_t(experts.back())] != -INFINITY)
      margin = std::min(margin, sel[size_t(experts[size_t(k - 1)])] - sel[size_t(experts.back())]);
    experts.pop_back();
  }
  weights.clear();
  for (int e : experts) weights.push_back(probs[size_t(e)]);
  if (m.norm_topk_prob) {
    float sum = 0;
    for (float w : weights) sum += w;
    for (float& w : weights) w /= sum;
  }
  if (m.routed_scaling_factor != 1.0f)
    for (float& w : weights) w *= m.routed_scaling_factor;
  return margin;
}

void Model::moe_ffn(const Layer& L, const float* xn, int64_t n, float* out) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden, E = c.moe.n_experts, F = c.moe.expert_ffn;
  std::vector<float> logits(size_t(n * E));
  linear_(L.router->matrix(), xn, n, logits.data());
  std::fill(out, out + n * H, 0.0f);
  std::vector<int> experts;
  std::vector<float> weights, g(static_cast<size_t>(F)), u(static_cast<size_t>(F)), y(static_cast<size_t>(H));
  for (int64_t t = 0; t < n; ++t) {
    float margin = route(L, logits.data() + t * E, experts, weights);
    route_margins_[size_t(t)] = std::min(route_margins_[size_t(t)], margin);
    const float* xt = xn + t * H;
    for (size_t k = 0; k < experts.size(); ++k) {
      const size_t e = size_t(experts[k]);
      linear_(L.gate_exps->matrix(e), xt, 1, g.data());
      linear_(L.up_exps->matrix(e), xt, 1, u.data());
      for (int64_t i = 0; i < F; ++i) g[size_t(i)] = silu(g[size_t(i)]) * u[size_t(i)];
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
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
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
