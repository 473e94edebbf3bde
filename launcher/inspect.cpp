#include "launcher/inspect.h"

#include <cmath>
#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/formats/gguf.h"
#include "common/model/model_source.h"

namespace tandem {
namespace {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

struct Stats {
  double sum = 0, absmax = 0;
};

Stats stats_of(const MappedTensor& t) {
  Stats s;
  for (float x : read_f32(t)) {
    s.sum += x;
    s.absmax = std::max(s.absmax, double(std::fabs(x)));
  }
  return s;
}

}  // namespace

void run_inspect(const InspectOptions& o, std::ostream& out) {
  auto src = ModelSource::open(o.model);
  const ModelConfig& c = src->config();
  auto stored = src->stored_tensors();
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // dtype -> (count, bytes)
  uint64_t weight_bytes = 0, params = 0;
  for (auto& t : stored) {
    auto& e = by_type[std::string(name(t.dtype))];
    e.first++;
    e.second += t.bytes;
    weight_bytes += t.bytes;
  }
  for (auto& t : src->tensors().tensors()) params += t.n_elems();

  if (o.json) {
    nlohmann::json j;
    j["path"] = src->path();
    j["format"] = src->format() == SourceFormat::kGguf ? "gguf" : "safetensors";
    j["architecture"] = to_string(c.arch);
    j["parameters"] = params;
    j["file_bytes"] = src->total_file_bytes();
    j["weight_bytes"] = weight_bytes;
    for (auto& t : stored)
      j["stored"].push_back({{"file", t.file}, {"name", t.name}, {"dtype", name(t.dtype)},
                             {"shape", t.shape}, {"offset", t.offset}, {"bytes", t.bytes}});
    if (o.canonical)
      for (auto& t : src->tensors().tensors()) {
        nlohmann::json e = {{"name", t.name}, {"dtype", name(t.dtype)}, {"shape", t.shape},
                            {"origin", t.origin()}, {"zero_copy", t.zero_copy()}};
        if (o.checksums) {
          Stats s = stats_of(t);
          e["sum"] = s.sum;
          e["absmax"] = s.absmax;
        }
        j["tensors"].push_back(e);
      }
    j["unused"] = src->tensors().unused();
    out << j.dump(2) << "\n";
    return;
  }

  out << fmt::format("model: {}\nformat: {}\n", src->path(),
                     src->format() == SourceFormat::kGguf
                         ? fmt::format("GGUF v{}", src->gguf()->version())
                         : "Hugging Face safetensors");
  for (auto& f : src->files()) out << "  file: " << f << "\n";
  out << fmt::format("size: {} in files, {} of weights, {:.3f} M parameters\n",
                     human_bytes(src->total_file_bytes()), human_bytes(weight_bytes), params / 1e6);
  out << "config:\n" << describe(c);
  out << "dtypes:\n";
  for (auto& [dt, e] : by_type)
    out << fmt::format("  {:<8} {:>5} tensors  {:>12}\n", dt, e.first, human_bytes(e.second));
  out << fmt::format("stored tensors ({}):\n", stored.size());
  out << fmt::format("  {:<48} {:<8} {:<18} {:>12} {:>10}\n", "name", "dtype", "shape", "offset",
                     "bytes");
  for (auto& t : stored)
    out << fmt::format("  {:<48} {:<8} {:<18} {:>12} {:>10}\n", t.name, name(t.dtype),
                       fmt::format("[{}]", fmt::join(t.shape, ",")), t.offset, t.bytes);
  if (o.canonical) {
    out << fmt::format("canonical tensors ({}):\n", src->tensors().tensors().size());
    for (auto& t : src->tensors().tensors()) {
      std::string extra;
      if (o.checksums) {
        Stats s = stats_of(t);
        extra = fmt::format("  sum={:.6g} absmax={:.6g}", s.sum, s.absmax);
      }
      out << fmt::format("  {:<34} {:<8} {:<16} {}{}{}\n", t.name, name(t.dtype),
                         fmt::format("[{}]", fmt::join(t.shape, ",")),
                         t.zero_copy() ? "" : "<- ", t.zero_copy() ? "zero-copy" : t.origin(), extra);
    }
  }
  if (!src->tensors().unused().empty()) {
    out << fmt::format("unused source tensors ({}):\n", src->tensors().unused().size());
    for (auto& n : src->tensors().unused()) out << "  " << n << "\n";
  }
}

}  // namespace tandem
