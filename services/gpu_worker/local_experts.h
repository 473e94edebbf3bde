// Routed experts of every slice of a weight arena computed in this process:
// the expert workers' arithmetic (ExpertCompute, one per slice) with the
// requester's order of additions (RemoteExperts: per chunk of tokens, worker
// 0's partial sum, then worker 1's added, ...). `--single-process
// --expert-workers N` runs every role in one process through this, so it
// computes exactly what the process graph with N workers computes and a
// difference between the two can only come from the processes.
#pragma once

#include <memory>
#include <vector>

#include "common/engine/routed_experts.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::arena {
class Arena;
}
namespace tandem::expert {
class ExpertCompute;
}

namespace tandem::gpu {

struct LocalExpertsOptions {
  int64_t tokens_per_chunk = 64;  // the rings' tokens per message in the graph
  kernels::CpuIsa isa = kernels::CpuIsa::kGeneric;
  int threads = 1;
};

class LocalExperts final : public engine::RoutedExperts {
 public:
  // One ExpertCompute per slice of `a` (its worker_nodes()); `a` must outlive this.
  LocalExperts(const arena::Arena& a, int top_k, const LocalExpertsOptions& o);
  ~LocalExperts() override;

  void start(const engine::RoutedWork& work) override;  // computes it all here
  void finish() override {}
  int slices() const { return int(computes_.size()); }

 private:
  LocalExpertsOptions options_;
  kernels::ThreadPool pool_;
  std::vector<std::unique_ptr<expert::ExpertCompute>> computes_;
  std::vector<float> partial_;
};

}  // namespace tandem::gpu
