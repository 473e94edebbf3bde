#include "common/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>
#include <vector>

#include "common/error.h"

namespace tandem::engine {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    fail_invalid("temperature must be >= 0, got {}", p.temperature);
  if (p.top_k < 0) fail_invalid("top_k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail_invalid("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail_invalid("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    fail_invalid("repetition_penalty must be > 0, got {}", p.repetition_penalty);
}

uint32_t argmax(std::span<const float> logits) {
  return uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplingParams& p) : p_(p) { validate(p); }

uint32_t Sampler::sample(std::span<const float> logits, std::span<const uint32_t> history) {
  std::vector<float> l(logits.begin(), logits.end());
  if (p_.repetition_penalty != 1.0f) {
    size_t from = p_.repeat_last_n < 0 || size_t(p_.repeat_last_n) >= history.size()
                      ? 0 : history.size() - size_t(p_.repeat_last_n);
    std::unordered_set<uint32_t> seen(history.begin() + long(from), history.end());
    for (uint32_t t : seen)
      if (t < l.size()) l[t] = l[t] > 0 ? l[t] / p_.repetition_penalty : l[t] * p_.repetition_penalty;
  }
  if (p_.temperature <= 0.0f) return argmax(l);

  std::vector<uint32_t> idx(l.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return l[a] > l[b]; });
  size_t keep = idx.size();
  if (p_.top_k > 0) keep = std::min(keep, size_t(p_.top_k));
  // Probabilities of the kept candidates at this temperature.
  std::vector<double> prob(keep);
  const double mx = l[idx[0]] / p_.temperature;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(l[idx[i]] / p_.temperature - mx);
  for (auto& v : prob) v /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep && (n == 0 || cum < p_.top_p)) cum += prob[n++];
    keep = n;
  }
  if (p_.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && prob[n] >= p_.min_p * prob[0]) ++n;
    keep = n;
  }
  // The draw depends on the seed and the position only (not on earlier
  // draws), so a sequence replayed after a worker restart draws the same.
  std::mt19937_64 rng(p_.seed ^ (uint64_t(history.size() + 1) * 0x9E3779B97F4A7C15ull));
  std::discrete_distribution<size_t> draw(prob.begin(), prob.begin() + long(keep));
  return idx[draw(rng)];
}

}  // namespace tandem::engine
