// generate(): checks the options and runs the GGUF or HF writer.
#include "tools/gen_model/gen_model.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace fs = std::filesystem;

std::vector<TensorSpec> ordered_specs(const ModelConfig& c) {
  // expected_tensors() already follows the conversion order except for
  // DeepSeek-V3's exp_probs_b, which convert_hf_to_gguf emits last in a layer.
  std::vector<TensorSpec> all = expected_tensors(c), out, bias;
  int layer = -2;
  auto flush = [&] {
    out.insert(out.end(), bias.begin(), bias.end());
    bias.clear();
  };
  for (auto& s : all) {
    if (s.layer != layer) flush();
    layer = s.layer;
    (suffix_of(s) == "exp_probs_b.bias" ? bias : out).push_back(s);
  }
  flush();
  return out;
}

double nice(float f) { return std::stod(fmt::format("{}", f)); }

void write_text_file(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail(ErrorKind::kSystem, "cannot create {}", tmp);
    f.write(data.data(), std::streamsize(data.size()));
    if (!f) fail(ErrorKind::kSystem, "cannot write {}", tmp);
  }
  fs::rename(tmp, path);
}

GenResult generate(const GenOptions& opt, const std::string& out) {
  const auto start = std::chrono::steady_clock::now();
  GenOptions o = opt;
  ModelConfig& c = o.config;
  finalize_config(c);
  if (o.format == OutFormat::kGguf) {
    gguf_file_type(o.dtype);  // throws for types GGUF output does not offer
    if (o.shard_bytes) fail(ErrorKind::kInvalidInput, "--shard-bytes applies to HF output only");
    c.fp8_block.reset();
  } else {
    if (o.dtype != DType::kF32 && o.dtype != DType::kBF16 && o.dtype != DType::kF8E4M3)
      fail(ErrorKind::kInvalidInput, "HF output cannot be {} (bf16, f32 or fp8)", name(o.dtype));
    if (o.dtype == DType::kF8E4M3) c.fp8_block = std::pair<uint32_t, uint32_t>{128, 128};
    else c.fp8_block.reset();
  }
  const Tokenizer tok = make_tokenizer(c.vocab_size);
  unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  GenContext g{o, threads};

  GenResult r;
  if (o.format == OutFormat::kGguf) {
    fs::path p(out);
    if (p.has_parent_path()) fs::create_directories(p.parent_path());
    r.files = write_gguf(g, tok, out, r.tensor_bytes);
  } else {
    r.files = write_hf(g, tok, out, r.tensor_bytes);
  }
  for (auto& f : r.files) r.bytes += fs::file_size(f);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace tandem::genmodel
