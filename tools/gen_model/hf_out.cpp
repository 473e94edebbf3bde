// Hugging Face output: safetensors with HF tensor names (one file, or shards
// with model.safetensors.index.json), optional FP8 block quantisation as in
// DeepSeek-V3's official checkpoint, config and tokenizer files.
#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kFp8Block = 128;

bool is_deepseek(Arch a) { return a == Arch::kDeepseekV2 || a == Arch::kDeepseekV3; }

// HF name of a canonical layer tensor, without "model.layers.N.".
std::string hf_layer_name(Arch arch, const std::string& sfx) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
  };
  for (auto& [canon, hf] : kNames)
    if (sfx == canon) return hf;
  if (sfx == "ffn_gate_inp.weight")
    return arch == Arch::kMixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
  const std::string shared = is_deepseek(arch) ? "mlp.shared_experts." : "mlp.shared_expert.";
  if (sfx == "ffn_gate_shexp.weight") return shared + "gate_proj.weight";
  if (sfx == "ffn_up_shexp.weight") return shared + "up_proj.weight";
  if (sfx == "ffn_down_shexp.weight") return shared + "down_proj.weight";
  throw Error(ErrorKind::kInternal, fmt::format("gen_model: no HF name for {}", sfx));
}

// Per-expert HF name pattern ({} = expert), "" if not an expert stack.
std::string hf_expert_name(Arch arch, const std::string& sfx) {
  const bool mixtral = arch == Arch::kMixtral;
  if (sfx == "ffn_gate_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w1.weight" : "mlp.experts.{}.gate_proj.weight";
  if (sfx == "ffn_up_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w3.weight" : "mlp.experts.{}.up_proj.weight";
  if (sfx == "ffn_down_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w2.weight" : "mlp.experts.{}.down_proj.weight";
  return "";
}

class Planner {
 public:
  explicit Planner(const GenContext& g) : g_(g) {}

  // One HF tensor made of `rows` rows of `cols` values.
  void add(const std::string& name, std::vector<uint64_t> shape, RowFn fn, bool fp8_ok) {
    const uint64_t cols = shape.back();
    uint64_t rows = 1;
    for (uint64_t d : shape) rows *= d;
    rows /= cols;
    const DType req = g_.opt.dtype;
    if (req != DType::kF8E4M3) {
      entries_.push_back({name, req, shape, bytes_for(req, rows * cols).value(),
                          row_producer(g_, req, rows, cols, std::move(fn))});
      return;
    }
    if (!fp8_ok || shape.size() != 2) {
      // Official FP8 checkpoints keep these in BF16, the router bias in F32.
      const DType dt = name.ends_with("e_score_correction_bias") ? DType::kF32 : DType::kBF16;
      entries_.push_back({name, dt, shape, bytes_for(dt, rows * cols).value(),
                          row_producer(g_, dt, rows, cols, std::move(fn))});
      return;
    }
    const uint64_t sr = (rows + kFp8Block - 1) / kFp8Block, sc = (cols + kFp8Block - 1) / kFp8Block;
    Fp8Producers fp8 = fp8_producers(g_, rows, cols, kFp8Block, std::move(fn));
    entries_.push_back({name, DType::kF8E4M3, shape, rows * cols, std::move(fp8.weight)});
    entries_.push_back({name + "_scale_inv", DType::kF32, {sr, sc}, sr * sc * 4, std::move(fp8.scale)});
  }

  std::vector<PendingTensor>& entries() { return entries_; }

 private:
  const GenContext& g_;
  std::vector<PendingTensor> entries_;
};

void plan_tensors(const GenContext& g, Planner& p) {
  const ModelConfig& c = g.opt.config;
  const uint64_t seed = g.opt.seed;
  const auto specs = ordered_specs(c);
  auto find_spec = [&](const std::string& name) -> const TensorSpec& {
    for (auto& s : specs)
      if (s.name == name) return s;
    throw Error(ErrorKind::kInternal, "gen_model: no spec " + name);
  };
  for (const TensorSpec& spec : specs) {
    auto gen = std::make_shared<WeightGen>(seed, spec);
    RowFn whole = [gen](uint64_t r, float* out) { gen->row(r, out); };
    if (spec.layer < 0) {
      if (spec.name == "token_embd.weight") p.add("model.embed_tokens.weight", spec.shape, whole, false);
      else if (spec.name == "output_norm.weight") p.add("model.norm.weight", spec.shape, whole, false);
      else p.add("lm_head.weight", spec.shape, whole, false);
      continue;
    }
    const std::string sfx = suffix_of(spec);
    const std::string prefix = fmt::format("model.layers.{}.", spec.layer);
    if (sfx == "attn_v_b.weight") continue;  // written with k_b as kv_b_proj
    if (sfx == "attn_k_b.weight") {
      // kv_b_proj [heads * (nope + v), kv_lora]: per head the nope rows (k_b
      // [kv_lora, nope] transposed), then the v rows (v_b [v, kv_lora]).
      const MlaConfig& m = *c.mla;
      auto vgen = std::make_shared<WeightGen>(seed, find_spec(fmt::format("blk.{}.attn_v_b.weight", spec.layer)));
      const uint64_t nope = m.qk_nope_head_dim, v = m.v_head_dim, kv = m.kv_lora_rank;
      RowFn fn = [gen, vgen, nope, v, kv](uint64_t r, float* out) {
        const uint64_t h = r / (nope + v), j = r % (nope + v);
        if (j >= nope) return vgen->row(h * v + (j - nope), out);
        for (uint64_t col = 0; col < kv; ++col) out[col] = gen->at((h * kv + col) * nope + j);
      };
      p.add(prefix + "self_attn.kv_b_proj.weight", {c.n_heads * (nope + v), kv}, fn, true);
      continue;
    }
    if (std::string pattern = hf_expert_name(c.arch, sfx); !pattern.empty()) {
      const uint64_t rows = spec.shape[1];
      for (uint64_t e = 0; e < spec.shape[0]; ++e) {
        RowFn fn = [gen, base = e * rows](uint64_t r, float* out) { gen->row(base + r, out); };
        p.add(prefix + fmt::format(fmt::runtime(pattern), e), {spec.shape[1], spec.shape[2]}, fn, true);
      }
      continue;
    }
    const bool fp8_ok = sfx != "ffn_gate_inp.weight" && sfx != "ffn_gate_inp_shexp.weight";
    p.add(prefix + hf_layer_name(c.arch, sfx), spec.shape, whole, fp8_ok);
  }
}

// Removes outputs of an earlier run that would confuse the reader.
void remove_stale(const fs::path& dir) {
  static const std::regex shard(R"(model-\d+-of-\d+\.safetensors)");
  for (auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n == "model.safetensors" || n == "model.safetensors.index.json" || std::regex_match(n, shard))
      fs::remove(e.path());
  }
}

}  // namespace

std::vector<std::string> write_hf(GenContext& g, const Tokenizer& tok, const std::string& dir,
                                  uint64_t& tensor_bytes) {
  const ModelConfig& c = g.opt.config;
  fs::create_directories(dir);
  remove_stale(dir);
  Planner planner(g);
  plan_tensors(g, planner);
  auto& entries = planner.entries();
  std::sort(entries.begin(), entries.end(), [](const PendingTensor& a, const PendingTensor& b) { return a.name < b.name; });

  // Shards as transformers' save_pretrained cuts them: a new shard when the
  // next tensor would pass the limit.
  std::vector<std::vector<const PendingTensor*>> shards(1);
  uint64_t in_shard = 0;
  tensor_bytes = 0;
  for (const PendingTensor& e : entries) {
    if (g.opt.shard_bytes && in_shard > 0 && in_shard + e.bytes > g.opt.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&e);
    in_shard += e.bytes;
    tensor_bytes += e.bytes;
  }
  const bool sharded = g.opt.shard_bytes > 0;
  std::vector<std::string> files;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  Progress progress(tensor_bytes, g.opt.progress);
  g.progress = &progress;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string fname = sharded ? fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards.size())
                                      : std::string("model.safetensors");
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const PendingTensor* e : shards[s]) {
      w.add_tensor(e->name, e->dtype, e->shape, e->produce);
      weight_map[e->name] = fname;
    }
    const std::string path = (fs::path(dir) / fname).string();
    try {
      w.write(path + ".tmp");
    } catch (...) {
      g.progress = nullptr;
      std::error_code ec;
      fs::remove(path + ".tmp", ec);
      throw;
    }
    fs::rename(path + ".tmp", path);
    files.push_back(path);
  }
  g.progress = nullptr;
  progress.finish();
  if (sharded) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", tensor_bytes}};
    index["weight_map"] = weight_map;
    files.push_back((fs::path(dir) / "model.safetensors.index.json").string());
    write_text_file(files.back(), index.dump(2) + "\n");
  }
  const std::pair<const char*, std::string> texts[] = {
      {"config.json", hf_config_json(c, g.opt.dtype)},
      {"generation_config.json", hf_generation_config_json(c)},
      {"tokenizer.json", hf_tokenizer_json(tok)},
      {"tokenizer_config.json", hf_tokenizer_config_json(tok, c.max_positions)},
  };
  for (auto& [name, text] : texts) {
    files.push_back((fs::path(dir) / name).string());
    write_text_file(files.back(), text);
  }
  return files;
}

}  // namespace tandem::genmodel
