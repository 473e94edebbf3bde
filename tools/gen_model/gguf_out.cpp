// GGUF output, laid out as llama.cpp's convert_hf_to_gguf.py writes it:
// metadata in its order, tensors in conversion order with ggml shapes, q/k
// rows permuted for llama-arch (Mixtral), MLA's kv_b split into k_b / v_b.
#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace {

const char* gguf_arch(Arch a) {
  switch (a) {
    case Arch::kQwen2Moe: return "qwen2moe";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kMixtral: return "llama";
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: return "deepseek2";
  }
  return "?";
}

void add_metadata(GgufWriter& w, const ModelConfig& c, const Tokenizer& tok, DType requested) {
  const std::string a = gguf_arch(c.arch);
  auto u32 = [&](const std::string& k, uint32_t v) { w.set_u32(a + "." + k, v); };
  auto f32 = [&](const std::string& k, float v) { w.set_f32(a + "." + k, v); };
  w.set_string("general.architecture", a);
  w.set_string("general.name", c.name);
  u32("context_length", c.max_positions);
  u32("embedding_length", c.hidden);
  u32("block_count", c.n_layers);
  u32("attention.head_count", c.n_heads);
  f32("attention.layer_norm_rms_epsilon", c.rms_eps);
  f32("rope.freq_base", c.rope.theta);
  u32("expert_count", c.moe.n_experts);
  u32("expert_used_count", c.moe.n_experts_used);
  w.set_u32("general.file_type", gguf_file_type(requested));
  if (!c.mla) {
    u32("attention.head_count_kv", c.n_kv_heads);
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.v_head_dim);
    u32("rope.dimension_count", c.rope.dims);
    u32("feed_forward_length", c.dense_ffn);
    if (c.arch != Arch::kMixtral) u32("expert_feed_forward_length", c.moe.expert_ffn);
    if (c.moe.shared_ffn) u32("expert_shared_feed_forward_length", c.moe.shared_ffn);
  } else {
    const MlaConfig& m = *c.mla;
    u32("attention.head_count_kv", 1);  // the MQA form of MLA
    u32("feed_forward_length", c.dense_ffn);
    u32("leading_dense_block_count", c.moe.first_k_dense);
    u32("vocab_size", c.vocab_size);
    if (m.q_lora_rank) u32("attention.q_lora_rank", m.q_lora_rank);
    u32("attention.kv_lora_rank", m.kv_lora_rank);
    u32("attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim);
    u32("attention.value_length", m.kv_lora_rank);
    u32("attention.key_length_mla", m.qk_nope_head_dim + m.qk_rope_head_dim);
    u32("attention.value_length_mla", m.v_head_dim);
    u32("expert_feed_forward_length", c.moe.expert_ffn);
    u32("expert_shared_count", c.moe.n_shared_experts);
    f32("expert_weights_scale", c.moe.routed_scaling_factor);
    w.set_bool(a + ".expert_weights_norm", c.moe.norm_topk_prob);
    u32("expert_gating_func", c.moe.scoring == RouterScoring::kSigmoid ? 2 : 1);
    if (c.moe.n_group > 1) {
      u32("expert_group_count", c.moe.n_group);
      u32("expert_group_used_count", c.moe.topk_group);
    }
    u32("rope.dimension_count", m.qk_rope_head_dim);
    if (c.rope.scaling == RopeScaling::kYarn) {
      w.set_string(a + ".rope.scaling.type", "yarn");
      f32("rope.scaling.factor", c.rope.factor);
      u32("rope.scaling.original_context_length", c.rope.original_max_positions);
      f32("rope.scaling.yarn_log_multiplier", 0.1f * c.rope.mscale_all_dim);
    }
  }
  add_gguf_tokenizer(w, tok, c.vocab_size);
  if (!info(requested).is_float) w.set_u32("general.quantization_version", 2);
}

}  // namespace

std::vector<std::string> write_gguf(GenContext& g, const Tokenizer& tok, const std::string& path,
                                    uint64_t& tensor_bytes) {
  const ModelConfig& c = g.opt.config;
  GgufWriter w;
  add_metadata(w, c, tok, g.opt.dtype);
  tensor_bytes = 0;
  for (const TensorSpec& spec : ordered_specs(c)) {
    const std::string sfx = suffix_of(spec);
    const DType dt = gguf_tensor_dtype(spec, g.opt.dtype);
    std::vector<uint64_t> shape = spec.shape;
    if (sfx == "ffn_gate_inp_shexp.weight") shape = {c.hidden};  // llama.cpp squeezes [1, H]
    const uint64_t cols = shape.back();
    uint64_t rows = 1;
    for (uint64_t d : shape) rows *= d;
    rows /= cols;
    auto gen = std::make_shared<WeightGen>(g.opt.seed, spec);
    RowFn fn = [gen](uint64_t r, float* out) { gen->row(r, out); };
    if (c.arch == Arch::kMixtral && (sfx == "attn_q.weight" || sfx == "attn_k.weight")) {
      // convert_hf_to_gguf permute(): w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2), so
      // GGUF row h*hd + 2*i + j holds HF (canonical) row h*hd + j*hd/2 + i.
      const uint64_t hd = c.head_dim, half = hd / 2;
      fn = [gen, hd, half](uint64_t r, float* out) {
        const uint64_t h = r / hd, within = r % hd, i = within / 2, j = within % 2;
        gen->row(h * hd + j * half + i, out);
      };
    }
    tensor_bytes += bytes_for(dt, rows * cols).value();
    w.add_tensor(spec.name, dt, shape, row_producer(g, dt, rows, cols, std::move(fn)));
  }
  Progress progress(tensor_bytes, g.opt.progress);
  g.progress = &progress;
  const std::string tmp = path + ".tmp";
  try {
    w.write(tmp);
  } catch (...) {
    g.progress = nullptr;
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  g.progress = nullptr;
  progress.finish();
  std::filesystem::rename(tmp, path);
  return {path};
}

}  // namespace tandem::genmodel
