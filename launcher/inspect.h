// `tandem inspect`: what a model file holds, as the loader will see it.
#pragma once

#include <iosfwd>
#include <string>

namespace tandem {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool canonical = true;  // also list the canonical tensor map
  bool checksums = false; // dequantise every tensor and print sum/absmax
};

// Prints to out; throws Error on a model that cannot be read.
void run_inspect(const InspectOptions& o, std::ostream& out);

}  // namespace tandem
