// tandem-gen-model: writes a test model of any supported architecture and size.
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "tools/gen_model/gen_model.h"

namespace {

using namespace tandem;
using namespace tandem::genmodel;

const char* kUsage = R"(usage: tandem-gen-model --arch ARCH --format gguf|hf --out PATH [options]

Writes a deterministic random-weight MoE model. Weights depend only on
(seed, tensor, element) and are rounded to bf16, so every format of one seed
holds the same numbers.

  --arch A            qwen3_moe, qwen2_moe, mixtral, deepseek_v2, deepseek_v3
                      (optional with a preset that names a model)
  --format F          gguf (a .gguf file, as llama.cpp's converter writes it) or
                      hf (a directory: config.json, safetensors, tokenizer)
  --out PATH          the .gguf file or the HF directory
  --dtype T           gguf: f32 (default) f16 bf16 q8_0 q4_0 q5_0 q4_k q5_k q6_k
                      hf: bf16 (default) f32 fp8 (e4m3 with 128x128 block scales)
  --seed N            weight seed (default 0)
  --preset P          sizes: tiny (default), default, small, qwen3-30b-a3b-shapes,
                      qwen1.5-moe-a2.7b-shapes, mixtral-8x7b-shapes,
                      deepseek-v2-lite-shapes, deepseek-v3-shapes
  --shard-bytes N     hf: shards of at most N bytes (suffix K, M, G) with an index
  --threads N         encoding threads (default: all)
  --quiet             no progress output
size overrides (after the preset):
  --hidden --layers --experts --top-k --expert-ffn --dense-ffn --heads
  --kv-heads --head-dim --vocab --context --shared-ffn (qwen2_moe)
  --shared-experts --q-lora-rank --kv-lora-rank --qk-nope-dim --qk-rope-dim
  --v-head-dim --first-dense --groups --topk-group (deepseek)
  --rope-theta F --routed-scale F --name S
)";

uint64_t parse_uint(const std::string& key, const std::string& v) {
  size_t pos = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  uint64_t mult = 1;
  std::string rest = v.substr(pos);
  if (rest == "K" || rest == "k") mult = 1ull << 10;
  else if (rest == "M" || rest == "m") mult = 1ull << 20;
  else if (rest == "G" || rest == "g") mult = 1ull << 30;
  else if (!rest.empty() || pos == 0)
    fail(ErrorKind::kInvalidInput, "{} needs a non-negative integer, got '{}'", key, v);
  return x * mult;
}

uint32_t parse_u32(const std::string& key, const std::string& v) {
  uint64_t x = parse_uint(key, v);
  if (x > UINT32_MAX) fail(ErrorKind::kInvalidInput, "{} = {} is too large", key, v);
  return uint32_t(x);
}

float parse_float(const std::string& key, const std::string& v) {
  try {
    size_t pos = 0;
    float f = std::stof(v, &pos);
    if (pos == v.size()) return f;
  } catch (const std::exception&) {
  }
  fail(ErrorKind::kInvalidInput, "{} needs a number, got '{}'", key, v);
}

int run(const std::vector<std::string>& args) {
  std::map<std::string, std::string> kv;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--quiet") {
      quiet = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) fail(ErrorKind::kInvalidInput, "unexpected argument '{}'", a);
    std::string value;
    if (auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      fail(ErrorKind::kInvalidInput, "{} needs a value", a);
    }
    kv[a] = value;
  }
  auto take = [&](const std::string& k) -> std::optional<std::string> {
    auto it = kv.find(k);
    if (it == kv.end()) return std::nullopt;
    std::string v = it->second;
    kv.erase(it);
    return v;
  };

  const std::string preset = take("--preset").value_or("tiny");
  std::optional<Arch> arch = preset_arch(preset);
  if (auto a = take("--arch")) arch = arch_from_name(*a);
  if (!arch) fail(ErrorKind::kInvalidInput, "--arch is required");
  const auto format = take("--format");
  if (!format || (*format != "gguf" && *format != "hf"))
    fail(ErrorKind::kInvalidInput, "--format gguf or --format hf is required");
  const auto out = take("--out");
  if (!out) fail(ErrorKind::kInvalidInput, "--out PATH is required");

  GenOptions o;
  o.format = *format == "gguf" ? OutFormat::kGguf : OutFormat::kHf;
  o.config = preset_config(*arch, preset);
  o.progress = !quiet;
  std::string dtype = take("--dtype").value_or(o.format == OutFormat::kGguf ? "f32" : "bf16");
  if (dtype == "fp8" || dtype == "f8_e4m3") o.dtype = DType::kF8E4M3;
  else if (auto d = dtype_from_name(dtype)) o.dtype = *d;
  else fail(ErrorKind::kInvalidInput, "unknown --dtype '{}'", dtype);
  if (auto v = take("--seed")) o.seed = parse_uint("--seed", *v);
  if (auto v = take("--shard-bytes")) o.shard_bytes = parse_uint("--shard-bytes", *v);
  if (auto v = take("--threads")) o.threads = parse_u32("--threads", *v);

  ModelConfig& c = o.config;
  auto mla = [&]() -> MlaConfig& {
    if (!c.mla) fail(ErrorKind::kInvalidInput, "MLA sizes apply to deepseek_v2/v3 only");
    return *c.mla;
  };
  const std::map<std::string, std::function<void(uint32_t)>> sizes = {
      {"--hidden", [&](uint32_t v) { c.hidden = v; }},
      {"--layers", [&](uint32_t v) { c.n_layers = v; }},
      {"--experts", [&](uint32_t v) { c.moe.n_experts = v; }},
      {"--top-k", [&](uint32_t v) { c.moe.n_experts_used = v; }},
      {"--expert-ffn", [&](uint32_t v) { c.moe.expert_ffn = v; }},
      {"--dense-ffn", [&](uint32_t v) { c.dense_ffn = v; }},
      {"--heads", [&](uint32_t v) { c.n_heads = v; }},
      {"--kv-heads", [&](uint32_t v) { c.n_kv_heads = v; }},
      {"--head-dim", [&](uint32_t v) { c.head_dim = v; }},
      {"--vocab", [&](uint32_t v) { c.vocab_size = v; }},
      {"--context", [&](uint32_t v) { c.max_positions = v; }},
      {"--shared-ffn", [&](uint32_t v) { c.moe.shared_ffn = v; }},
      {"--shared-experts", [&](uint32_t v) { c.moe.n_shared_experts = v; }},
      {"--q-lora-rank", [&](uint32_t v) { mla().q_lora_rank = v; }},
      {"--kv-lora-rank", [&](uint32_t v) { mla().kv_lora_rank = v; }},
      {"--qk-nope-dim", [&](uint32_t v) { mla().qk_nope_head_dim = v; }},
      {"--qk-rope-dim", [&](uint32_t v) { mla().qk_rope_head_dim = v; }},
      {"--v-head-dim", [&](uint32_t v) { mla().v_head_dim = v; }},
      {"--first-dense", [&](uint32_t v) { c.moe.first_k_dense = v; }},
      {"--groups", [&](uint32_t v) { c.moe.n_group = v; }},
      {"--topk-group", [&](uint32_t v) { c.moe.topk_group = v; }},
  };
  for (auto& [key, set] : sizes)
    if (auto v = take(key)) set(parse_u32(key, *v));
  if (auto v = take("--rope-theta")) c.rope.theta = parse_float("--rope-theta", *v);
  if (auto v = take("--routed-scale")) c.moe.routed_scaling_factor = parse_float("--routed-scale", *v);
  if (auto v = take("--name")) c.name = *v;
  if (!kv.empty()) fail(ErrorKind::kInvalidInput, "unknown option '{}'", kv.begin()->first);

  GenResult r = generate(o, *out);
  double mib = double(r.bytes) / (1 << 20);
  std::cout << fmt::format("wrote {} ({} {} {}, {} files, {:.2f} MiB) in {:.2f} s\n", *out,
                           to_string(c.arch), *format, dtype, r.files.size(), mib, r.seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "tandem-gen-model: " << e.what() << "\n";
    return 1;
  }
}
