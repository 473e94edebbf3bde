// One sequence through the process graph, for `tandem logits` and `tandem
// run`: the loader, the expert workers and a tandem-gpu-worker process, with
// this process as their coordinator — it binds the run's control socket and
// sends the steps (with every row's logits asked back). The same processes
// and messages as `tandem serve`, without the HTTP API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/control/server.h"
#include "common/model/config.h"
#include "launcher/expert_graph.h"
#include "services/gpu_worker/step.h"

namespace tandem {
namespace coordinator {
class RemoteStepper;
}

class GraphForward {
 public:
  // Starts the graph; `capacity`: the most tokens the sequence will hold.
  GraphForward(const std::string& model, const EngineOptions& o, int64_t capacity);
  ~GraphForward();
  GraphForward(const GraphForward&) = delete;
  GraphForward& operator=(const GraphForward&) = delete;

  // Appends `tokens` to the sequence; returns one row of vocab logits per
  // token. Throws tandem::Error naming the process that failed.
  std::vector<float> forward(std::span<const uint32_t> tokens);
  const ModelConfig& config() const { return config_; }

 private:
  std::unique_ptr<ExpertGraph> graph_;  // destroyed last: stops the processes
  zmq::context_t context_;
  std::optional<control::ControlServer> server_;
  std::unique_ptr<coordinator::RemoteStepper> stepper_;
  ModelConfig config_;
  gpu::SequenceParams params_;
  int64_t position_ = 0;
};

}  // namespace tandem
