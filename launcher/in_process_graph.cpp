#include "launcher/in_process_graph.h"

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/numa.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_layout.h"
#include "launcher/expert_graph.h"
#include "services/gpu_worker/local_experts.h"

namespace tandem {

InProcessGraph::InProcessGraph(const std::string& model, int expert_workers, int64_t tokens_per_chunk)
    : run_(RunDirectory::create()) {
  auto src = ModelSource::open(model);
  const ModelConfig c = src->config();
  if (c.moe.n_experts == 0) fail(ErrorKind::kUnsupported, "{} has no routed experts to split", model);
  const kernels::CpuIsa isa = kernels::choose_isa_from_environment();
  arena::BuildOptions b;
  b.worker_nodes = plan_worker_nodes(expert_workers, numa_node_count());
  b.repack_for = isa;  // as the loader decides
  arena::BuildStats stats;
  arena_ = std::make_unique<arena::Arena>(arena::Arena::open_or_build(run_.file("arena"), *src, b, &stats));
  src.reset();  // the arena holds every weight now
  gpu::LocalExpertsOptions lo;
  lo.tokens_per_chunk = tokens_per_chunk;
  lo.isa = isa;
  lo.threads = int(kernels::allowed_cpus().size());
  experts_ = std::make_unique<gpu::LocalExperts>(*arena_, int(c.moe.n_experts_used), lo);
  model_ = std::make_unique<engine::Model>(c, ModelWeights::from_arena(*arena_), isa);
  model_->set_routed_experts(experts_.get());
  spdlog::info("single process: arena {:.1f} MiB built here, {} expert slice(s) computed here",
               double(arena_->size()) / (1 << 20), experts_->slices());
}

InProcessGraph::~InProcessGraph() = default;

}  // namespace tandem
