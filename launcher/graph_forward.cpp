#include "launcher/graph_forward.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/process.h"
#include "services/coordinator/remote_stepper.h"

namespace tandem {

using namespace std::chrono;

GraphForward::GraphForward(const std::string& model, const EngineOptions& o, int64_t capacity) {
  ExpertGraphOptions g;
  g.model = model;
  g.expert_workers = o.expert_workers;
  g.hold = o.hold;
  g.command = o.command;
  g.in_process_requester = false;
  g.loader_serves = true;
  g.service_roles = {"gpu"};
  graph_ = std::make_unique<ExpertGraph>(g);
  config_ = ModelSource::open(model)->config();
  server_.emplace(control::ControlServer::bind(context_, graph_->run()));
  stepper_ = std::make_unique<coordinator::RemoteStepper>(*server_, config_);
  // The gpu worker and the loader join the process named here: this one.
  write_pid_file(graph_->run().file("coordinator-0.ready"));
  graph_->add_service(graph_->gpu_worker_spec(), seconds(600), [this] { stepper_->idle(); });
  if (!stepper_->wait_ready(steady_clock::now() + seconds(60)))
    fail(ErrorKind::kTimeout, "the gpu worker did not join the control plane in 60 s");
  params_.capacity = capacity;
}

GraphForward::~GraphForward() = default;

std::vector<float> GraphForward::forward(std::span<const uint32_t> tokens) {
  const size_t V = config_.vocab_size;
  // Rows per step so that a reply stays well inside a control frame (16 MiB).
  const size_t max_rows = std::max<size_t>(1, (size_t{8} << 20) / (V * sizeof(float)));
  std::vector<float> out;
  out.reserve(tokens.size() * V);
  for (size_t at = 0; at < tokens.size();) {
    const size_t n = std::min(max_rows, tokens.size() - at);
    gpu::StepItem it;
    it.sequence = 1;
    it.position = position_;
    it.tokens = tokens.subspan(at, n);
    it.params = position_ == 0 ? &params_ : nullptr;
    it.all_logits = true;
    std::vector<gpu::SampledToken> r = stepper_->step(std::span(&it, 1));
    if (r.size() != 1 || r[0].logits.size() != n * V)
      fail(ErrorKind::kInternal, "the gpu worker returned {} logits for {} tokens of {} ids",
           r.empty() ? 0 : r[0].logits.size(), n, V);
    out.insert(out.end(), r[0].logits.begin(), r[0].logits.end());
    position_ += int64_t(n);
    at += n;
  }
  return out;
}

}  // namespace tandem
