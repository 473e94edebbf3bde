// Routers: softmax or sigmoid scores; selection by score (+ DeepSeek-V3's
// correction bias) within the top groups; weights are the unbiased scores of
// the chosen experts, optionally renormalised, scaled by
// routed_scaling_factor.
#include "common/engine/router.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "common/engine/ops.h"
#include "common/error.h"

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

// validate() checks the same for configs read from files; a config built in
// code reaches the router unchecked, and a bad one would index out of range
// (groups that do not tile the experts) or pick masked-out experts (top-k
// larger than the kept groups) silently.
void check(const MoeConfig& m, size_t bias_size) {
  if (m.n_experts == 0) fail_invalid("router: no experts");
  if (m.n_experts_used == 0 || m.n_experts_used > m.n_experts)
    fail_invalid("router: top-k {} must be between 1 and the {} experts", m.n_experts_used,
                 m.n_experts);
  if (m.n_group == 0 || m.n_experts % m.n_group != 0)
    fail_invalid("router: {} experts do not split into {} groups", m.n_experts, m.n_group);
  if (m.topk_group == 0 || m.topk_group > m.n_group)
    fail_invalid("router: topk_group {} must be 1..n_group {}", m.topk_group, m.n_group);
  if (m.n_experts_used > m.topk_group * (m.n_experts / m.n_group))
    fail_invalid("router: top-k {} exceeds the {} experts in {} kept groups", m.n_experts_used,
                 m.topk_group * (m.n_experts / m.n_group), m.topk_group);
  // The flag also picks the group score (top-2 sum vs max), so a bias
  // without it, or it without a bias, would be a half-applied noaux_tc.
  if (m.score_correction_bias && bias_size == 0)
    fail_invalid("router: the config uses a score correction bias but none was given");
  if (!m.score_correction_bias && bias_size != 0)
    fail_invalid("router: a score correction bias was given but the config does not use one");
  if (bias_size != 0 && bias_size != m.n_experts)
    fail_invalid("router: score correction bias has {} values for {} experts", bias_size,
                 m.n_experts);
}

}  // namespace

float route_token(const MoeConfig& m, const float* logits, std::span<const float> correction_bias,
                  std::vector<int>& experts, std::vector<float>& weights) {
  check(m, correction_bias.size());
  float margin = INFINITY;
  const int E = int(m.n_experts);
  std::vector<float> probs(logits, logits + E);
  if (m.scoring == RouterScoring::kSoftmax)
    softmax(probs.data(), E);
  else
    for (float& p : probs) p = sigmoid(p);
  std::vector<float> sel = probs;
  if (!correction_bias.empty())
    for (int e = 0; e < E; ++e) sel[size_t(e)] += correction_bias[size_t(e)];
  if (m.n_group > 1 && m.topk_group < m.n_group) {
    // Score each group: the sum of its two best (V3, noaux_tc) or its best
    // (V2, group_limited_greedy); keep the top groups' experts only.
    const int per = E / int(m.n_group);
    std::vector<float> group_score(m.n_group);
    for (int g = 0; g < int(m.n_group); ++g) {
      std::vector<float> member(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(member.begin(), member.end(), std::greater<>());
      group_score[size_t(g)] =
          m.score_correction_bias ? member[0] + (per > 1 ? member[1] : 0.0f) : member[0];
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
    double sum = 0;  // ggml_sum_rows sums in double
    for (float w : weights) sum += w;
    const float total = static_cast<float>(sum);
    for (float& w : weights) w /= total;
  }
  if (m.routed_scaling_factor != 1.0f)
    for (float& w : weights) w *= m.routed_scaling_factor;
  return margin;
}

}  // namespace tandem::engine
