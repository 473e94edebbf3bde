// `tandem serve`: the OpenAI-compatible HTTP API on a model, with its routed
// experts in expert-worker processes (or --single-process). For now the
// coordinator's API and the requester (the gpu worker's host backend) share
// the tandem process; they become separate processes next.
#pragma once

#include <atomic>
#include <string>

#include "launcher/expert_graph.h"

namespace tandem {

struct ServeOptions {
  std::string model;
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;     // empty: none (TANDEM_API_KEY also sets it)
  std::string model_name;  // what /v1/models says; default: the file or folder name
  bool split_roles = false;  // gpu:1 prefills, gpu:0 decodes (else gpu:0 does both)
};

// Serves until `stop` is set; returns the exit code.
int run_serve(const ServeOptions& o, const std::atomic<bool>& stop);

}  // namespace tandem
