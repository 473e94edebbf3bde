// `tandem scale expert-workers=N`: asks a running `tandem serve` for a new
// expert split. The request is a file in the run directory (private to the
// user, like everything there): the command writes <run>/scale.request, the
// launcher's serve loop picks it up, runs ExpertGraph::scale and answers in
// <run>/scale.result, which the command waits for and prints.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace tandem {

class ExpertGraph;

struct ScaleOptions {
  std::string base;  // run base (default_run_base())
  std::string run;   // a run directory name; empty: the only serving graph
  int expert_workers = 0;
  std::chrono::seconds timeout{600};
};
// Returns 0 when the graph reports the new split, 1 otherwise (printed).
int run_scale(const ScaleOptions& o, std::ostream& out);

// The launcher's side: serves a pending request, if any (never throws; the
// outcome goes to the result file and the log).
void serve_scale_request(ExpertGraph& graph);

}  // namespace tandem
