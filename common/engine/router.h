// The MoE router on its own: one token's router logits in, its routed experts
// and their weights out, by the config's scoring (softmax or sigmoid), with
// DeepSeek-V3's correction bias and group-limited top-k where configured.
// Kept apart from Model so it can be checked against a plain reference.
#pragma once

#include <span>
#include <vector>

#include "common/model/config.h"

namespace tandem::engine {

// Chooses m.n_experts_used of m.n_experts experts for one token.
// correction_bias: DeepSeek-V3's e_score_correction_bias (n_experts values,
// added to the scores for selection only); empty when the model has none.
// experts: the chosen, best selection score first; weights: theirs, from the
// unbiased scores (renormalised if norm_topk_prob, times
// routed_scaling_factor). Returns the decision margin: the smaller of the gap
// between the last chosen and the first unchosen expert's selection score and
// the gap between the last kept and the first dropped group's score; INFINITY
// when nothing was left out. Throws Error (kInvalidInput) if the config does
// not describe a routable layout or the bias has the wrong size.
float route_token(const MoeConfig& m, const float* logits, std::span<const float> correction_bias,
                  std::vector<int>& experts, std::vector<float>& weights);

}  // namespace tandem::engine
