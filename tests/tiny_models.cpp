#include "tests/tiny_models.h"

#include <cstring>
#include <memory>
#include <random>

#include "common/formats/gguf.h"
#include "common/formats/writers.h"

namespace tandem::testing {
namespace {

std::vector<std::byte> f32_bytes(size_t n, float v = 1.0f) {
  std::vector<float> f(n, v);
  std::vector<std::byte> b(n * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// Random f32 values of a shape.
class Weights {
 public:
  explicit Weights(uint32_t seed) : rng_(seed) {}
  std::vector<std::byte> operator()(const std::vector<uint64_t>& shape) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(n);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : v) x = u(rng_);
    std::vector<std::byte> b(n * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  }

 private:
  std::mt19937 rng_;
};

void set_tokens(GgufWriter& w, uint64_t n) {
  w.set_string("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> toks;
  for (uint64_t i = 0; i < n; ++i) toks.push_back(std::string(1, char('a' + i)));
  w.set_strings("tokenizer.ggml.tokens", toks);
  w.set_u32("tokenizer.ggml.eos_token_id", 1);
}

}  // namespace

std::vector<std::byte> small_gguf() {
  GgufWriter w(64);
  w.set_string("general.architecture", "test");
  w.set_u32("a.u32", 7);
  w.set_bool("a.bool", true);
  w.set("a.i64", {GgufType::kI64, int64_t{-3}});
  w.set_strings("a.strs", {"x", "", "yz"});
  w.set_i32s("a.ints", {1, 2, 3});
  auto inner = std::make_shared<GgufArray>();
  inner->elem_type = GgufType::kU8;
  inner->items = {{GgufType::kU8, uint64_t{1}}, {GgufType::kU8, uint64_t{2}}};
  auto outer = std::make_shared<GgufArray>();
  outer->elem_type = GgufType::kArray;
  outer->items = {{GgufType::kArray, inner}, {GgufType::kArray, inner}};
  w.set("a.nested", {GgufType::kArray, outer});
  w.add_tensor("t.f32", DType::kF32, {2, 4}, f32_bytes(8));
  w.add_tensor("t.q8", DType::kQ8_0, {1, 32}, std::vector<std::byte>(34));
  w.add_tensor("t.q4k", DType::kQ4_K, {1, 256}, std::vector<std::byte>(144));
  return w.to_bytes();
}

std::vector<std::byte> tiny_moe_gguf(const TinyModel& tm) {
  const uint64_t V = 16, H = 8, heads = 2, kv_heads = 1, hd = tm.head_dim, E = 2, F = 4;
  const std::string& a = tm.arch;
  GgufWriter w(tm.alignment);
  w.set_string("general.architecture", a);
  w.set_string("general.name", "tiny");
  w.set_u32(a + ".embedding_length", H);
  w.set_u32(a + ".block_count", 1);
  w.set_u32(a + ".attention.head_count", heads);
  w.set_u32(a + ".attention.head_count_kv", kv_heads);
  w.set_u32(a + ".attention.key_length", uint32_t(hd));
  w.set_u32(a + ".attention.value_length", uint32_t(hd));
  if (tm.rope_dims) w.set_u32(a + ".rope.dimension_count", *tm.rope_dims);
  w.set_u32(a + ".expert_count", E);
  w.set_u32(a + ".expert_used_count", 1);
  w.set_u32(a + ".expert_feed_forward_length", F);
  w.set_u32(a + ".context_length", 64);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32(a + ".rope.freq_base", 10000.0f);
  set_tokens(w, V);
  Weights f32(7);
  auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    w.add_tensor(name, DType::kF32, shape, f32(shape));
  };
  add("token_embd.weight", {V, H});
  add("output_norm.weight", {H});
  add("output.weight", {V, H});
  add("blk.0.attn_norm.weight", {H});
  add("blk.0.ffn_norm.weight", {H});
  add("blk.0.attn_q.weight", {heads * hd, H});
  add("blk.0.attn_k.weight", {kv_heads * hd, H});
  add("blk.0.attn_v.weight", {kv_heads * hd, H});
  add("blk.0.attn_output.weight", {H, heads * hd});
  if (a == "qwen3moe") {
    add("blk.0.attn_q_norm.weight", {hd});
    add("blk.0.attn_k_norm.weight", {hd});
  }
  add("blk.0.ffn_gate_inp.weight", {E, H});
  add("blk.0.ffn_gate_exps.weight", {E, F, H});
  add("blk.0.ffn_up_exps.weight", {E, F, H});
  add("blk.0.ffn_down_exps.weight", {E, H, F});
  return w.to_bytes();
}

std::vector<std::byte> tiny_deepseek2_gguf() {
  const uint64_t V = 16, H = 8, nh = 2, kv_lora = 4, nope = 4, rope = 2, vd = 4, E = 4, F = 4,
                 dense_ffn = 8;
  const std::string a = "deepseek2";
  GgufWriter w;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "tiny-deepseek");
  w.set_u32(a + ".embedding_length", H);
  w.set_u32(a + ".block_count", 2);
  w.set_u32(a + ".attention.head_count", nh);
  w.set_u32(a + ".attention.head_count_kv", nh);
  w.set_u32(a + ".attention.kv_lora_rank", kv_lora);
  w.set_u32(a + ".rope.dimension_count", rope);
  w.set_u32(a + ".attention.key_length", nope + rope);
  w.set_u32(a + ".attention.value_length", vd);
  w.set_u32(a + ".feed_forward_length", dense_ffn);
  w.set_u32(a + ".leading_dense_block_count", 1);
  w.set_u32(a + ".expert_count", E);
  w.set_u32(a + ".expert_used_count", 2);
  w.set_u32(a + ".expert_feed_forward_length", F);
  w.set_u32(a + ".expert_shared_count", 1);
  w.set_u32(a + ".expert_gating_func", 2);
  w.set_u32(a + ".expert_group_count", 2);
  w.set_u32(a + ".expert_group_used_count", 1);
  w.set_f32(a + ".expert_weights_scale", 2.5f);
  w.set_bool(a + ".expert_weights_norm", true);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_string(a + ".rope.scaling.type", "yarn");
  w.set_f32(a + ".rope.scaling.factor", 4.0f);
  w.set_u32(a + ".rope.scaling.original_context_length", 32);
  w.set_f32(a + ".rope.scaling.yarn_log_multiplier", 0.1f);
  set_tokens(w, V);
  Weights f32(11);
  auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    w.add_tensor(name, DType::kF32, shape, f32(shape));
  };
  add("token_embd.weight", {V, H});
  add("output_norm.weight", {H});
  add("output.weight", {V, H});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {H});
    add(p + "ffn_norm.weight", {H});
    add(p + "attn_q.weight", {nh * (nope + rope), H});
    add(p + "attn_kv_a_mqa.weight", {kv_lora + rope, H});
    add(p + "attn_kv_a_norm.weight", {kv_lora});
    if (l == 0) {
      add(p + "attn_kv_b.weight", {nh * (nope + vd), kv_lora});
    } else {
      add(p + "attn_k_b.weight", {nh, kv_lora, nope});
      add(p + "attn_v_b.weight", {nh, vd, kv_lora});
    }
    add(p + "attn_output.weight", {H, nh * vd});
    if (l == 0) {
      add(p + "ffn_gate.weight", {dense_ffn, H});
      add(p + "ffn_up.weight", {dense_ffn, H});
      add(p + "ffn_down.weight", {H, dense_ffn});
    } else {
      add(p + "ffn_gate_inp.weight", {E, H});
      add(p + "exp_probs_b.bias", {E});
      add(p + "ffn_gate_exps.weight", {E, F, H});
      add(p + "ffn_up_exps.weight", {E, F, H});
      add(p + "ffn_down_exps.weight", {E, H, F});
      add(p + "ffn_gate_shexp.weight", {F, H});
      add(p + "ffn_up_shexp.weight", {F, H});
      add(p + "ffn_down_shexp.weight", {H, F});
    }
  }
  return w.to_bytes();
}

std::vector<std::byte> small_safetensors() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  Weights f32(3);
  w.add_tensor("model.norm.weight", DType::kF32, {8}, f32({8}));
  w.add_tensor("model.embed_tokens.weight", DType::kBF16, {4, 8}, std::vector<std::byte>(64));
  // FP8 E4M3 1.0 is 0x38; a 3x5 weight in 2x4 blocks has a 2x2 scale.
  w.add_tensor("model.layers.0.mlp.up_proj.weight", DType::kF8E4M3, {3, 5},
               std::vector<std::byte>(15, std::byte{0x38}));
  w.add_tensor("model.layers.0.mlp.up_proj.weight_scale_inv", DType::kF32, {2, 2}, f32({2, 2}));
  w.add_tensor("model.layers.0.mlp.gate.e_score_correction_bias", DType::kF32, {4}, f32({4}));
  return w.to_bytes();
}

}  // namespace tandem::testing
