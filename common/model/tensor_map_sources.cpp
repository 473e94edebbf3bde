// TensorMap builders for GGUF files and Hugging Face safetensors directories.
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"
#include "common/model/tensor_map_builder.h"

namespace tandem {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string blk(const TensorSpec& s, const std::string& suffix) {
  return fmt::format("blk.{}.{}", s.layer, suffix);
}

}  // namespace

TensorMap TensorMap::from_gguf(const ModelConfig& c, const GgufFile& f) {
  TensorMapBuilder b(c, f.path());
  auto matrix = [&](const GgufTensor& t) {
    return b.matrix(f.path(), t.name, t.dtype, t.shape, t.data);
  };
  auto need = [&](const std::string& name, const std::string& why) -> const GgufTensor& {
    const GgufTensor* t = f.find_tensor(name);
    if (!t)
      throw Error(ErrorKind::kNotFound,
                  fmt::format("{}: tensor '{}' is missing ({})", f.path(), name, why));
    return *t;
  };
  for (const TensorSpec& spec : expected_tensors(c)) {
    const std::string sfx = layer_suffix(spec);
    const GgufTensor* t = f.find_tensor(spec.name);
    if (!t && spec.name == "output.weight" && c.tie_embeddings) t = f.find_tensor("token_embd.weight");
    if (t && c.arch == Arch::kMixtral && (sfx == "attn_q.weight" || sfx == "attn_k.weight")) {
      uint32_t heads = sfx == "attn_q.weight" ? c.n_heads : c.n_kv_heads;
      SourceMatrix* m = matrix(*t);
      if (t->shape != spec.shape)
        fail_invalid("{}: tensor '{}' has shape [{}], expected [{}]", f.path(), t->name,
                     fmt::join(t->shape, ", "), fmt::join(spec.shape, ", "));
      if (c.head_dim % 2 != 0)  // the permutation swaps halves of each head's rows
        fail_invalid("{}: tensor '{}': head dim {} is odd, so its rotary row permutation "
                     "cannot be undone",
                     f.path(), t->name, c.head_dim);
      b.add(spec, {TensorPiece{m, 0, 0, TensorMapBuilder::unpermute_rows(m->rows, heads), false}});
      continue;
    }
    if (t) {
      b.add_whole(spec, matrix(*t), t->shape);
      continue;
    }
    if (sfx == "attn_k_b.weight" || sfx == "attn_v_b.weight") {
      // Older deepseek2 GGUFs keep the fused kv_b.
      const GgufTensor& kv = need(blk(spec, "attn_kv_b.weight"), "needed for " + spec.name);
      b.add(spec, b.split_kv_b(matrix(kv), sfx == "attn_k_b.weight"));
      continue;
    }
    if (ends_with(sfx, "_exps.weight")) {
      // Older Mixtral GGUFs store experts one by one: blk.N.ffn_gate.E.weight.
      std::string base = sfx.substr(0, sfx.size() - std::string("_exps.weight").size());
      std::vector<TensorPiece> pieces;
      for (uint32_t e = 0; e < c.moe.n_experts; ++e) {
        const GgufTensor& x = need(blk(spec, fmt::format("{}.{}.weight", base, e)),
                                   "neither stacked nor per-expert weights found for " + spec.name);
        SourceMatrix* m = matrix(x);
        pieces.push_back({m, 0, m->rows, {}, false});
      }
      b.add(spec, std::move(pieces));
      continue;
    }
    need(spec.name, "the config implies it");
  }
  std::vector<std::string> all;
  for (auto& t : f.tensors()) all.push_back(t.name);
  return b.finish(all);
}

namespace {

// Hugging Face names of a canonical layer tensor (without "model.layers.N.").
std::string hf_layer_name(Arch arch, const std::string& sfx) {
  const bool mixtral = arch == Arch::kMixtral;
  const bool deepseek = arch == Arch::kDeepseekV2 || arch == Arch::kDeepseekV3;
  static const std::pair<const char*, const char*> kCommon[] = {
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
  for (auto& [canon, hf] : kCommon)
    if (sfx == canon) return hf;
  if (sfx == "ffn_gate_inp.weight") return mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
  const std::string shared = deepseek ? "mlp.shared_experts." : "mlp.shared_expert.";
  if (sfx == "ffn_gate_shexp.weight") return shared + "gate_proj.weight";
  if (sfx == "ffn_up_shexp.weight") return shared + "up_proj.weight";
  if (sfx == "ffn_down_shexp.weight") return shared + "down_proj.weight";
  return "";
}

// Per-expert HF name, with {} for the expert index.
std::string hf_expert_name(Arch arch, const std::string& sfx) {
  const bool mixtral = arch == Arch::kMixtral;
  if (sfx == "ffn_gate_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w1.weight" : "mlp.experts.{}.gate_proj.weight";
  if (sfx == "ffn_up_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w3.weight" : "mlp.experts.{}.up_proj.weight";
  if (sfx == "ffn_down_exps.weight") return mixtral ? "block_sparse_moe.experts.{}.w2.weight" : "mlp.experts.{}.down_proj.weight";
  return "";
}

}  // namespace

TensorMap TensorMap::from_hf(const ModelConfig& c, const SafetensorsModel& model) {
  TensorMapBuilder b(c, model.dir());
  auto need = [&](const std::string& name, const std::string& why) -> const SafetensorsTensor& {
    const SafetensorsTensor* t = model.find(name);
    if (!t)
      throw Error(ErrorKind::kNotFound,
                  fmt::format("{}: tensor '{}' is missing ({})", model.dir(), name, why));
    return *t;
  };
  auto matrix = [&](const SafetensorsTensor& t) {
    SourceMatrix* m = b.matrix(t.file, t.name, t.dtype, t.shape, t.data);
    const SafetensorsTensor* s = model.find(t.name + "_scale_inv");
    if (t.dtype == DType::kF8E4M3 && !s)
      fail_invalid("{}: FP8 tensor '{}' has no '{}_scale_inv'", t.file, t.name, t.name);
    if (!s) return m;
    if (!c.fp8_block)
      fail_invalid("{}: '{}_scale_inv' found but config.json has no fp8 quantization_config",
                   t.file, t.name);
    auto [br, bc] = *c.fp8_block;
    uint64_t want_r = (m->rows + br - 1) / br, want_c = (m->cols + bc - 1) / bc;
    uint64_t got_r = s->shape.size() == 2 ? s->shape[0] : 0, got_c = s->shape.size() == 2 ? s->shape[1] : 0;
    if (got_r != want_r || got_c != want_c || (s->dtype != DType::kF32 && s->dtype != DType::kBF16))
      fail_invalid("{}: scale '{}' is {} [{}] but weight [{}, {}] with {}x{} blocks needs f32 [{}, {}]",
                   s->file, s->name, name(s->dtype), fmt::join(s->shape, ", "), m->rows, m->cols, br,
                   bc, want_r, want_c);
    b.mark_used(s->name);
    m->scale = s->data;
    m->scale_dtype = s->dtype;
    m->block_rows = br;
    m->block_cols = bc;
    return m;
  };
  for (const TensorSpec& spec : expected_tensors(c)) {
    std::string hf;
    if (spec.layer < 0) {
      if (spec.name == "token_embd.weight") hf = "model.embed_tokens.weight";
      else if (spec.name == "output_norm.weight") hf = "model.norm.weight";
      else hf = c.tie_embeddings && !model.find("lm_head.weight") ? "model.embed_tokens.weight" : "lm_head.weight";
      const SafetensorsTensor& t = need(hf, "the config implies " + spec.name);
      b.add_whole(spec, matrix(t), t.shape);
      continue;
    }
    const std::string sfx = layer_suffix(spec);
    const std::string prefix = fmt::format("model.layers.{}.", spec.layer);
    if (sfx == "attn_k_b.weight" || sfx == "attn_v_b.weight") {
      const SafetensorsTensor& kv = need(prefix + "self_attn.kv_b_proj.weight", "for " + spec.name);
      b.add(spec, b.split_kv_b(matrix(kv), sfx == "attn_k_b.weight"));
      continue;
    }
    if (std::string pattern = hf_expert_name(c.arch, sfx); !pattern.empty()) {
      std::vector<TensorPiece> pieces;
      for (uint32_t e = 0; e < c.moe.n_experts; ++e) {
        const SafetensorsTensor& t =
            need(prefix + fmt::format(fmt::runtime(pattern), e), "expert of " + spec.name);
        std::vector<uint64_t> one(spec.shape.begin() + 1, spec.shape.end());
        if (t.shape != one)
          fail_invalid("{}: tensor '{}' has shape [{}], expected [{}]", t.file, t.name,
                       fmt::join(t.shape, ", "), fmt::join(one, ", "));
        SourceMatrix* m = matrix(t);
        pieces.push_back({m, 0, m->rows, {}, false});
      }
      b.add(spec, std::move(pieces));
      continue;
    }
    hf = hf_layer_name(c.arch, sfx);
    if (hf.empty())
      throw Error(ErrorKind::kInternal, fmt::format("no Hugging Face name for {}", spec.name));
    const SafetensorsTensor& t = need(prefix + hf, "the config implies " + spec.name);
    b.add_whole(spec, matrix(t), t.shape);
  }
  std::vector<std::string> all;
  for (auto* t : model.tensors()) all.push_back(t->name);
  return b.finish(all);
}

}  // namespace tandem
