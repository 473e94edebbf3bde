// Reference feed-forward blocks and routers, from the HF modeling code:
//   Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock:
//     softmax over all experts, top-k, renormalised when norm_topk_prob
//     (Mixtral's softmax over the top-k logits is the same thing);
//     qwen2's shared expert is scaled by sigmoid(shared_expert_gate . x).
//   DeepseekV2MoE (MoEGate softmax; group_limited_greedy: a group scores its
//     best expert) and DeepseekV3MoE (sigmoid + e_score_correction_bias for
//     selection only; noaux_tc: a group scores the sum of its best two),
//     weights times routed_scaling_factor, shared experts always on.
// SwiGLU everywhere: down(silu(gate x) * up x).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "tests/reference_forward.h"

namespace tandem::reference {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Indices of v by decreasing value; ties keep the lower index first.
std::vector<size_t> ranked(const Vec& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  return idx;
}

}  // namespace

Vec ReferenceModel::swiglu(const std::string& gate, const std::string& up, const std::string& down,
                           const Vec& x, size_t index) const {
  Vec g = mat(gate, index) * x, u = mat(up, index) * x;
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] * sigmoid(g[i]) * u[i];
  return mat(down, index) * g;
}

Vec ReferenceModel::dense_ffn(uint32_t l, const Vec& xn) const {
  return swiglu(blk(l, "ffn_gate.weight"), blk(l, "ffn_up.weight"), blk(l, "ffn_down.weight"), xn);
}

ReferenceModel::Routing ReferenceModel::route(uint32_t l, const Vec& logits) const {
  const MoeConfig& m = c_.moe;
  const size_t E = m.n_experts, k = m.n_experts_used;
  Vec scores(E);
  if (m.scoring == RouterScoring::kSigmoid) {
    for (size_t e = 0; e < E; ++e) scores[e] = sigmoid(logits[e]);
  } else {
    const double mx = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (size_t e = 0; e < E; ++e) z += (scores[e] = std::exp(logits[e] - mx));
    for (double& s : scores) s /= z;
  }
  // Selection scores: DeepSeek-V3's correction bias steers the choice only.
  Vec choice = scores;
  if (has(blk(l, "exp_probs_b.bias"))) {
    std::span<const float> b = values(blk(l, "exp_probs_b.bias"));
    for (size_t e = 0; e < E; ++e) choice[e] += b[e];
  }
  Routing r;
  r.margin = INFINITY;
  if (m.n_group > 1 && m.topk_group < m.n_group) {
    const size_t per = E / m.n_group;
    const bool top2_sum = c_.arch == Arch::kDeepseekV3;  // noaux_tc; V2: group max
    Vec group(m.n_group);
    for (size_t g = 0; g < m.n_group; ++g) {
      Vec member(choice.begin() + ptrdiff_t(g * per), choice.begin() + ptrdiff_t((g + 1) * per));
      std::sort(member.rbegin(), member.rend());
      group[g] = member[0] + (top2_sum && per > 1 ? member[1] : 0.0);
    }
    std::vector<size_t> order = ranked(group);
    r.margin = group[order[m.topk_group - 1]] - group[order[m.topk_group]];
    for (size_t i = m.topk_group; i < m.n_group; ++i)
      for (size_t e = order[i] * per; e < (order[i] + 1) * per; ++e) choice[e] = -INFINITY;
  }
  std::vector<size_t> order = ranked(choice);
  if (k < E && std::isfinite(choice[order[k]]))
    r.margin = std::min(r.margin, choice[order[k - 1]] - choice[order[k]]);
  r.experts.assign(order.begin(), order.begin() + ptrdiff_t(k));
  for (size_t e : r.experts) r.weights.push_back(scores[e]);
  const bool normalise = m.norm_topk_prob && k > 1;
  if (normalise) {
    const double sum = std::accumulate(r.weights.begin(), r.weights.end(), 0.0);
    for (double& w : r.weights) w /= sum;
  }
  // DeepseekV3MoE always scales; DeepseekV2MoE only scales weights it did
  // not renormalise; the other families have no scaling factor.
  const bool scale = c_.arch == Arch::kDeepseekV3 || (c_.arch == Arch::kDeepseekV2 && !normalise);
  if (scale)
    for (double& w : r.weights) w *= m.routed_scaling_factor;
  return r;
}

Vec ReferenceModel::moe_ffn(uint32_t l, const Vec& xn, double& margin) const {
  Routing r = route(l, mat(blk(l, "ffn_gate_inp.weight")) * xn);
  margin = r.margin;
  Vec out(xn.size(), 0.0);
  for (size_t i = 0; i < r.experts.size(); ++i) {
    Vec y = swiglu(blk(l, "ffn_gate_exps.weight"), blk(l, "ffn_up_exps.weight"),
                   blk(l, "ffn_down_exps.weight"), xn, r.experts[i]);
    for (size_t j = 0; j < out.size(); ++j) out[j] += r.weights[i] * y[j];
  }
  if (has(blk(l, "ffn_gate_shexp.weight"))) {
    Vec y = swiglu(blk(l, "ffn_gate_shexp.weight"), blk(l, "ffn_up_shexp.weight"),
                   blk(l, "ffn_down_shexp.weight"), xn);
    double gate = 1.0;  // DeepSeek: shared experts always on
    if (has(blk(l, "ffn_gate_inp_shexp.weight")))  // qwen2_moe: sigmoid-gated
      gate = sigmoid((mat(blk(l, "ffn_gate_inp_shexp.weight")) * xn)[0]);
    for (size_t j = 0; j < out.size(); ++j) out[j] += gate * y[j];
  }
  return out;
}

}  // namespace tandem::reference
