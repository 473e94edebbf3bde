// Where a MoE layer's routed experts are computed. The model routes each
// token itself (router.cpp) and hands the batch — normalised hidden states,
// chosen expert ids and their weights — to a RoutedExperts; without one it
// computes them in-process from its own weights. The process graph plugs in
// an implementation that sends the batch to the expert workers over
// shared-memory rings (services/gpu_worker/remote_experts.h).
//
// start() then finish(): the model computes the shared experts between the
// two calls, so a remote implementation overlaps them with the workers.
#pragma once

#include <cstdint>

namespace tandem::engine {

struct RoutedWork {
  int64_t layer = 0;
  int64_t n_tokens = 0;
  int top_k = 0;
  int64_t hidden = 0;
  const float* x = nullptr;               // n_tokens x hidden
  const int32_t* expert_ids = nullptr;    // n_tokens x top_k
  const float* expert_weights = nullptr;  // n_tokens x top_k
  float* y = nullptr;                     // n_tokens x hidden: the weighted sum, overwritten
};

class RoutedExperts {
 public:
  virtual ~RoutedExperts() = default;
  // Begins the work; the pointers stay valid until finish() returns.
  virtual void start(const RoutedWork& work) = 0;
  // Waits until work.y holds the result; throws tandem::Error on failure.
  virtual void finish() = 0;
};

}  // namespace tandem::engine
