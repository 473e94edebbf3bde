// The MoE router against plain scalar references written from the Hugging
// Face gates (Qwen2/Qwen3-MoE and Mixtral softmax top-k, DeepSeek-V3
// noaux_tc, DeepSeek-V2 group_limited_greedy), computed in double and sharing
// no code with the router, plus hand-computed cases that pin each formula.
#include "common/engine/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"

namespace tandem::engine {
namespace {

// What a reference gate decides for one token. margin: the smaller of the gap
// between the k-th and (k+1)-th candidate selection score and the gap between
// the last kept and first dropped group score (INFINITY if none is dropped).
struct Decision {
  std::vector<int> experts;
  std::vector<double> weights;  // parallel to experts
  double margin = INFINITY;
};

// Indices in descending order of v (stable, so ties keep index order).
std::vector<int> by_value_desc(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

std::vector<double> softmax_ref(const std::vector<float>& logits) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(double(logits[i]) - mx);
  for (double& v : p) v /= sum;
  return p;
}

// The top-k of `choice` among the allowed experts, weights taken from
// `score`; margin: k-th minus (k+1)-th allowed choice value.
Decision pick(const std::vector<double>& choice, const std::vector<double>& score,
              const std::vector<bool>& allowed, int k) {
  std::vector<int> order;
  for (int e : by_value_desc(choice))
    if (allowed[size_t(e)]) order.push_back(e);
  Decision d;
  d.experts.assign(order.begin(), order.begin() + k);
  for (int e : d.experts) d.weights.push_back(score[size_t(e)]);
  if (order.size() > size_t(k))
    d.margin = choice[size_t(order[size_t(k - 1)])] - choice[size_t(order[size_t(k)])];
  return d;
}

// Keeps the topk_group best groups by group_score; returns the allowed mask
// and the group cut (last kept minus first dropped; INFINITY if none dropped).
double keep_groups(const std::vector<double>& group_score, int topk_group, int per,
                   std::vector<bool>& allowed) {
  const std::vector<int> order = by_value_desc(group_score);
  allowed.assign(group_score.size() * size_t(per), false);
  for (int i = 0; i < topk_group; ++i)
    for (int j = 0; j < per; ++j) allowed[size_t(order[size_t(i)] * per + j)] = true;
  if (size_t(topk_group) == group_score.size()) return INFINITY;
  return group_score[size_t(order[size_t(topk_group - 1)])] -
         group_score[size_t(order[size_t(topk_group)])];
}

// Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock:
//   routing_weights = softmax(router_logits); topk(routing_weights, k);
//   if norm_topk_prob: routing_weights /= routing_weights.sum()
// (Mixtral always renormalises.)
Decision ref_softmax_topk(const MoeConfig& m, const std::vector<float>& logits) {
  const std::vector<double> p = softmax_ref(logits);
  Decision d = pick(p, p, std::vector<bool>(p.size(), true), int(m.n_experts_used));
  if (m.norm_topk_prob) {
    double sum = 0;
    for (double w : d.weights) sum += w;
    for (double& w : d.weights) w /= sum;
  }
  return d;
}

// DeepSeek-V3 MoEGate, topk_method noaux_tc:
//   scores = sigmoid(logits); choice = scores + e_score_correction_bias
//   group_scores = choice.view(n_group, -1).topk(2).sum(); keep topk_group
//   topk_idx = topk(choice within kept groups, k); weights = scores[topk_idx]
//   if norm_topk_prob: weights /= sum; weights *= routed_scaling_factor
Decision ref_noaux_tc(const MoeConfig& m, const std::vector<float>& logits,
                      const std::vector<float>& bias) {
  const size_t E = logits.size();
  const int G = int(m.n_group), per = int(E) / G;
  std::vector<double> score(E), choice(E);
  for (size_t e = 0; e < E; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
    choice[e] = score[e] + double(bias[e]);
  }
  std::vector<double> group_score(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    std::vector<double> member(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(member.rbegin(), member.rend());
    group_score[size_t(g)] = member[0] + member[1];
  }
  std::vector<bool> allowed(E, true);
  const double group_cut =
      G > 1 ? keep_groups(group_score, int(m.topk_group), per, allowed) : INFINITY;
  Decision d = pick(choice, score, allowed, int(m.n_experts_used));
  d.margin = std::min(d.margin, group_cut);
  if (m.norm_topk_prob) {
    double sum = 0;
    for (double w : d.weights) sum += w;
    for (double& w : d.weights) w /= sum;
  }
  for (double& w : d.weights) w *= double(m.routed_scaling_factor);
  return d;
}

// DeepSeek-V2 MoEGate, topk_method group_limited_greedy (greedy when
// n_group == 1):
//   scores = softmax(logits); group_scores = scores.view(n_group, -1).max()
//   keep topk_group groups; topk(scores within them, k)
//   if norm_topk_prob: weights /= sum;  weights *= routed_scaling_factor
// (HF V2 scales only when it does not renormalise; the trials keep
// routed_scaling_factor == 1 whenever norm_topk_prob is set, as every V2
// checkpoint does, so both readings agree.)
Decision ref_group_limited_greedy(const MoeConfig& m, const std::vector<float>& logits) {
  const size_t E = logits.size();
  const int G = int(m.n_group), per = int(E) / G;
  const std::vector<double> score = softmax_ref(logits);
  std::vector<double> group_score(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g)
    group_score[size_t(g)] =
        *std::max_element(score.begin() + g * per, score.begin() + (g + 1) * per);
  std::vector<bool> allowed(E, true);
  const double group_cut =
      G > 1 ? keep_groups(group_score, int(m.topk_group), per, allowed) : INFINITY;
  Decision d = pick(score, score, allowed, int(m.n_experts_used));
  d.margin = std::min(d.margin, group_cut);
  if (m.norm_topk_prob) {
    double sum = 0;
    for (double w : d.weights) sum += w;
    for (double& w : d.weights) w /= sum;
  }
  for (double& w : d.weights) w *= double(m.routed_scaling_factor);
  return d;
}

// run_trials passes every reference the bias; gates without one ignore it.
template <Decision (*F)(const MoeConfig&, const std::vector<float>&)>
Decision without_bias(const MoeConfig& m, const std::vector<float>& logits,
                      const std::vector<float>&) {
  return F(m, logits);
}

MoeConfig softmax_config(uint32_t experts, uint32_t k, bool norm) {
  MoeConfig m;
  m.n_experts = experts, m.n_experts_used = k, m.norm_topk_prob = norm;
  return m;
}

MoeConfig v3_config(uint32_t experts, uint32_t groups, uint32_t topk_group, uint32_t k, bool norm,
                    float scale) {
  MoeConfig m;
  m.n_experts = experts, m.n_experts_used = k;
  m.scoring = RouterScoring::kSigmoid;
  m.score_correction_bias = true;
  m.n_group = groups, m.topk_group = topk_group;
  m.norm_topk_prob = norm, m.routed_scaling_factor = scale;
  return m;
}

MoeConfig v2_config(uint32_t experts, uint32_t groups, uint32_t topk_group, uint32_t k, bool norm,
                    float scale) {
  MoeConfig m;
  m.n_experts = experts, m.n_experts_used = k;
  m.n_group = groups, m.topk_group = topk_group;
  m.norm_topk_prob = norm, m.routed_scaling_factor = scale;
  return m;
}

// Decisions closer than this may legitimately differ between the router's
// f32 and the reference's double arithmetic.
constexpr double kNearTie = 1e-5;
constexpr int kTrials = 2000;         // per config
constexpr double kMaxSkipped = 0.02;  // of all trials of a variant

struct Tally {
  int trials = 0, skipped = 0;
};

// Random tokens for one config: logits ~ N(0, 2), biases ~ N(0, 0.5) (one
// draw per trial, as a checkpoint's bias is fixed per layer but arbitrary).
template <typename Ref>
void run_trials(const MoeConfig& m, uint32_t seed, Ref ref, Tally& tally) {
  SCOPED_TRACE(::testing::Message()
               << "experts " << m.n_experts << " top-k " << m.n_experts_used << " groups "
               << m.topk_group << "/" << m.n_group << " norm " << m.norm_topk_prob << " scale "
               << m.routed_scaling_factor << " seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit_dist(0.0f, 2.0f), bias_dist(0.0f, 0.5f);
  const size_t E = m.n_experts;
  std::vector<float> logits(E), bias;
  std::vector<int> experts;
  std::vector<float> weights;
  int failures = 0;  // reported in full up to a few, then the loop stops
  for (int t = 0; t < kTrials && failures < 5; ++t) {
    for (float& x : logits) x = logit_dist(rng);
    bias.clear();
    if (m.score_correction_bias)
      for (size_t e = 0; e < E; ++e) bias.push_back(bias_dist(rng));
    const Decision want = ref(m, logits, bias);
    const float margin = route_token(m, logits.data(), bias, experts, weights);
    ++tally.trials;
    ASSERT_EQ(experts.size(), size_t(m.n_experts_used));
    ASSERT_EQ(weights.size(), experts.size());
    EXPECT_GE(margin, 0.0f) << "trial " << t;
    if (want.margin < kNearTie) {
      ++tally.skipped;
      continue;
    }
    std::map<int, double> got_w, want_w;  // by expert: the sets compare in order
    for (size_t i = 0; i < experts.size(); ++i) got_w[experts[i]] = weights[i];
    for (size_t i = 0; i < want.experts.size(); ++i) want_w[want.experts[i]] = want.weights[i];
    std::string problem;
    auto keys = [](const std::map<int, double>& w) {
      std::string s;
      for (auto& [e, v] : w) s += std::to_string(e) + " ";
      return s;
    };
    if (keys(got_w) != keys(want_w)) {
      problem = "experts {" + keys(got_w) + "} vs reference {" + keys(want_w) + "}";
    } else {
      for (auto& [e, w] : want_w)
        if (!(std::fabs(got_w[e] - w) <= 1e-6 * std::fabs(w)))
          problem += "expert " + std::to_string(e) + " weight " + std::to_string(got_w[e]) +
                     " vs reference " + std::to_string(w) + "; ";
    }
    const bool margin_ok = std::isinf(want.margin)
                               ? std::isinf(margin)
                               : std::fabs(double(margin) - want.margin) <= 1e-5;
    if (!margin_ok)
      problem +=
          "margin " + std::to_string(margin) + " vs reference " + std::to_string(want.margin);
    if (!problem.empty()) {
      ADD_FAILURE() << "trial " << t << ": " << problem;
      ++failures;
    }
  }
}

void expect_few_skipped(const char* variant, const Tally& tally) {
  std::printf("[ router   ] %s: %d trials, %d near-ties skipped (%.2f%%)\n", variant, tally.trials,
              tally.skipped, 100.0 * tally.skipped / tally.trials);
  EXPECT_LE(tally.skipped, kMaxSkipped * tally.trials) << variant;
}

std::vector<float> logs(std::initializer_list<double> xs) {
  std::vector<float> v;
  for (double x : xs) v.push_back(float(std::log(x)));
  return v;
}

// Logit whose sigmoid is p.
float logit(double p) {
  return float(std::log(p / (1.0 - p)));
}

void expect_route(const MoeConfig& m, const std::vector<float>& logits,
                  const std::vector<float>& bias, const std::vector<int>& want_experts,
                  const std::vector<double>& want_weights, double want_margin) {
  std::vector<int> experts;
  std::vector<float> weights;
  const float margin = route_token(m, logits.data(), bias, experts, weights);
  EXPECT_EQ(experts, want_experts);  // best selection score first
  ASSERT_EQ(weights.size(), want_weights.size());
  for (size_t i = 0; i < weights.size(); ++i)
    EXPECT_NEAR(weights[i], want_weights[i], 1e-6 * want_weights[i]) << "weight " << i;
  if (std::isinf(want_margin))
    EXPECT_TRUE(std::isinf(margin));
  else
    EXPECT_NEAR(margin, want_margin, 1e-6);
}

// ---- softmax top-k, renormalised (qwen3_moe, mixtral) ----

TEST(Router, SoftmaxTopKRenormalisedMatchesReference) {
  Tally tally;
  const struct {
    uint32_t experts, k;
  } cfgs[] = {
      {8, 2},    // mixtral-8x7b
      {128, 8},  // qwen3-30b-a3b
      {16, 4},  {64, 6}, {32, 1},
  };
  uint32_t seed = 100;
  for (auto c : cfgs)
    run_trials(softmax_config(c.experts, c.k, true), seed++, without_bias<ref_softmax_topk>, tally);
  expect_few_skipped("softmax top-k, renormalised", tally);
}

TEST(Router, SoftmaxTopKRenormalisedByHand) {
  // probabilities 0.1, 0.2, 0.3, 0.4: top-2 is {3, 2}, renormalised 4/7, 3/7;
  // margin 0.3 - 0.2.
  const MoeConfig m = softmax_config(4, 2, true);
  expect_route(m, logs({1, 2, 3, 4}), {}, {3, 2}, {4.0 / 7, 3.0 / 7}, 0.1);
  // Shifted logits give the same softmax.
  std::vector<float> shifted = logs({1, 2, 3, 4});
  for (float& x : shifted) x += 5.0f;
  expect_route(m, shifted, {}, {3, 2}, {4.0 / 7, 3.0 / 7}, 0.1);
  // Top-1 renormalised is weight 1 (Mixtral/Qwen3 renormalise for any k).
  expect_route(softmax_config(4, 1, true), logs({1, 2, 3, 4}), {}, {3}, {1.0}, 0.1);
}

// ---- softmax top-k without renormalisation (qwen2_moe) ----

TEST(Router, SoftmaxTopKPlainMatchesReference) {
  Tally tally;
  const struct {
    uint32_t experts, k;
  } cfgs[] = {
      {60, 4},  // qwen1.5-moe-a2.7b
      {64, 8},  // qwen2-57b-a14b
      {8, 2},  {16, 4}, {32, 1},
  };
  uint32_t seed = 200;
  for (auto c : cfgs)
    run_trials(softmax_config(c.experts, c.k, false), seed++, without_bias<ref_softmax_topk>,
               tally);
  expect_few_skipped("softmax top-k, plain", tally);
}

TEST(Router, SoftmaxTopKPlainByHand) {
  const MoeConfig m = softmax_config(4, 2, false);
  expect_route(m, logs({1, 2, 3, 4}), {}, {3, 2}, {0.4, 0.3}, 0.1);
  // probabilities 0.5, 0.125, 0.25, 0.125: ties go to the lower index.
  expect_route(softmax_config(4, 3, false), logs({4, 1, 2, 1}), {}, {0, 2, 1}, {0.5, 0.25, 0.125},
               0.0);
}

// ---- DeepSeek-V3 noaux_tc ----

TEST(Router, NoauxTcMatchesReference) {
  Tally tally;
  const struct {
    uint32_t experts, groups, topk_group, k;
    bool norm;
    float scale;
  } cfgs[] = {
      {256, 8, 4, 8, true, 2.5f},  // deepseek-v3
      {16, 4, 2, 4, true, 2.5f},   // gen_model default preset
      {32, 4, 2, 4, true, 2.5f},   // gen_model small preset
      {64, 8, 3, 6, false, 1.0f}, {48, 4, 1, 3, false, 2.0f},
      {32, 4, 4, 4, true, 1.0f},  // all groups kept: plain biased top-k
      {16, 1, 1, 2, true, 1.5f},  // one group
  };
  uint32_t seed = 300;
  for (auto c : cfgs)
    run_trials(v3_config(c.experts, c.groups, c.topk_group, c.k, c.norm, c.scale), seed++,
               ref_noaux_tc, tally);
  expect_few_skipped("noaux_tc", tally);
}

TEST(Router, NoauxTcByHand) {
  // Scores 0.75 0.5 0.2 | 0.8 0.2 0.2 in two groups; the bias lifts expert 2
  // to 0.7 for selection. Group scores by top-2 sum: 1.45 vs 1.0, so group 0
  // (by max alone it would be group 1: 0.8 > 0.75). Within it experts 0 (0.75)
  // and 2 (0.7, passing expert 1's 0.5 thanks to the bias). Weights use the
  // unbiased scores 0.75 and 0.2: renormalised 15/19 and 4/19, times 2.5.
  // Margin: min(group cut 0.45, expert gap 0.7 - 0.5).
  const std::vector<float> logits = {logit(0.75), logit(0.5), logit(0.2),
                                     logit(0.8),  logit(0.2), logit(0.2)};
  const std::vector<float> bias = {0, 0, 0.5f, 0, 0, 0};
  expect_route(v3_config(6, 2, 1, 2, true, 2.5f), logits, bias, {0, 2},
               {2.5 * 15 / 19, 2.5 * 4 / 19}, 0.2);
  // Without renormalisation: the raw scores times the scale.
  expect_route(v3_config(6, 2, 1, 2, false, 2.5f), logits, bias, {0, 2}, {2.5 * 0.75, 2.5 * 0.2},
               0.2);
  // All groups kept: global biased top-2 is experts 3 (0.8) and 0 (0.75).
  expect_route(v3_config(6, 2, 2, 2, true, 1.0f), logits, bias, {3, 0}, {0.8 / 1.55, 0.75 / 1.55},
               0.05);
}

// ---- DeepSeek-V2 group_limited_greedy ----

TEST(Router, GroupLimitedGreedyMatchesReference) {
  Tally tally;
  const struct {
    uint32_t experts, groups, topk_group, k;
    bool norm;
    float scale;
  } cfgs[] = {
      {160, 8, 3, 6, false, 16.0f},  // deepseek-v2
      {64, 1, 1, 6, false, 1.0f},    // deepseek-v2-lite (greedy)
      {16, 2, 1, 4, false, 1.0f},    // gen_model default preset
      {32, 4, 2, 4, true, 1.0f},    {64, 8, 3, 6, false, 16.0f},
  };
  uint32_t seed = 400;
  for (auto c : cfgs)
    run_trials(v2_config(c.experts, c.groups, c.topk_group, c.k, c.norm, c.scale), seed++,
               without_bias<ref_group_limited_greedy>, tally);
  expect_few_skipped("group_limited_greedy", tally);
}

TEST(Router, GroupLimitedGreedyByHand) {
  // Probabilities 8 6 6 | 10 3 2 (/35). Group scores by max: 8/35 vs 10/35,
  // so group 1 (a top-2 sum would pick group 0: 14 vs 13). Within it experts
  // 3 and 4; a global top-2 would be 3 and 0. Margin: min(group cut 2/35,
  // expert gap 1/35).
  const std::vector<float> logits = logs({8, 6, 6, 10, 3, 2});
  expect_route(v2_config(6, 2, 1, 2, false, 16.0f), logits, {}, {3, 4},
               {16.0 * 10 / 35, 16.0 * 3 / 35}, 1.0 / 35);
  expect_route(v2_config(6, 2, 1, 2, true, 1.0f), logits, {}, {3, 4}, {10.0 / 13, 3.0 / 13},
               1.0 / 35);
}

// ---- configs the router refuses ----

TEST(Router, RejectsLayoutsItCannotRoute) {
  std::vector<float> logits(6, 0.0f), bias(6, 0.0f);
  std::vector<int> experts;
  std::vector<float> weights;
  auto kind_of = [&](const MoeConfig& m, const std::vector<float>& b) {
    try {
      route_token(m, logits.data(), b, experts, weights);
    } catch (const Error& e) {
      return std::string(to_string(e.kind())) + ": " + e.message();
    }
    return std::string("accepted");
  };
  // 6 experts do not split into 4 groups.
  EXPECT_NE(kind_of(v3_config(6, 4, 2, 2, true, 1.0f), bias).find("do not split into 4 groups"),
            std::string::npos);
  EXPECT_NE(kind_of(v2_config(6, 4, 2, 2, false, 1.0f), {}).find("do not split"),
            std::string::npos);
  // Top-3 from one kept group of 2.
  EXPECT_NE(kind_of(v2_config(6, 3, 1, 3, false, 1.0f), {}).find("exceeds"), std::string::npos);
  EXPECT_NE(kind_of(v2_config(6, 3, 4, 2, false, 1.0f), {}).find("topk_group"), std::string::npos);
  EXPECT_NE(kind_of(softmax_config(6, 7, true), {}).find("top-k 7"), std::string::npos);
  EXPECT_NE(kind_of(softmax_config(6, 0, true), {}).find("top-k 0"), std::string::npos);
  // Bias and flag must agree, and the bias must cover every expert.
  EXPECT_NE(kind_of(v3_config(6, 2, 1, 2, true, 1.0f), {}).find("none was given"),
            std::string::npos);
  EXPECT_NE(kind_of(softmax_config(6, 2, true), bias).find("does not use one"), std::string::npos);
  EXPECT_NE(kind_of(v3_config(6, 2, 1, 2, true, 1.0f), std::vector<float>(5, 0.0f))
                .find("5 values for 6 experts"),
            std::string::npos);
  // And it names the kind.
  EXPECT_EQ(
      kind_of(v2_config(6, 4, 2, 2, false, 1.0f), {}).rfind(to_string(ErrorKind::kInvalidInput), 0),
      0u);
  EXPECT_EQ(kind_of(v2_config(6, 2, 1, 2, false, 1.0f), {}), "accepted");
}

}  // namespace
}  // namespace tandem::engine
