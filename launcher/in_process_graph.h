// `--single-process --expert-workers N`: every role of the graph in this one
// process, for debugging — the loader's arena build (in a private run
// directory), the N expert slices computed by gpu::LocalExperts in the
// requester's order of additions, and the dense part over the arena. It
// computes exactly what the process graph with N expert workers computes.
#pragma once

#include <memory>
#include <string>

#include "common/arena/arena.h"
#include "common/engine/model.h"
#include "common/shm/run_dir.h"

namespace tandem {

class ModelSource;
namespace gpu {
class LocalExperts;
}

class InProcessGraph {
 public:
  // tokens_per_chunk: the graph's ring slot capacity (ExpertGraphOptions).
  InProcessGraph(const std::string& model, int expert_workers, int64_t tokens_per_chunk = 64);
  ~InProcessGraph();
  engine::Model& model() { return *model_; }

 private:
  RunDirectory run_;
  std::unique_ptr<arena::Arena> arena_;
  std::unique_ptr<gpu::LocalExperts> experts_;
  std::unique_ptr<engine::Model> model_;
};

}  // namespace tandem
