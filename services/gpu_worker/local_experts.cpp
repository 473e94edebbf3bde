#include "services/gpu_worker/local_experts.h"

#include <algorithm>
#include <cstring>

#include "common/arena/arena.h"
#include "common/error.h"
#include "services/expert_worker/expert_compute.h"

namespace tandem::gpu {

LocalExperts::LocalExperts(const arena::Arena& a, int top_k, const LocalExpertsOptions& o)
    : options_(o), pool_(kernels::ThreadPool::create({std::max(1, o.threads), {}, false, 200})) {
  if (options_.tokens_per_chunk < 1) fail_invalid("tokens_per_chunk must be at least 1");
  const int workers = int(a.worker_nodes().size());
  for (int w = 0; w < workers; ++w) {
    expert::ComputeOptions co;
    co.worker = w;
    co.isa = o.isa;
    co.top_k = top_k;
    co.max_tokens = options_.tokens_per_chunk;
    computes_.push_back(std::make_unique<expert::ExpertCompute>(a, co, pool_));
  }
}

LocalExperts::~LocalExperts() = default;

void LocalExperts::start(const engine::RoutedWork& work) {
  const int64_t H = work.hidden, T = options_.tokens_per_chunk;
  partial_.resize(size_t(T * H));
  for (int64_t t0 = 0; t0 < work.n_tokens; t0 += T) {
    const int64_t n = std::min(T, work.n_tokens - t0);
    float* y = work.y + t0 * H;
    for (size_t w = 0; w < computes_.size(); ++w) {
      computes_[w]->run(work.layer, n, work.top_k, work.x + t0 * H, work.expert_ids + t0 * work.top_k,
                        work.expert_weights + t0 * work.top_k, partial_.data());
      const size_t count = size_t(n * H);
      if (w == 0) {
        std::memcpy(y, partial_.data(), count * sizeof(float));
      } else {
        for (size_t i = 0; i < count; ++i) y[i] += partial_[i];
      }
    }
  }
}

}  // namespace tandem::gpu
