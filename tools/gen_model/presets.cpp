// Model configs: presets, derived fields, and per-tensor GGUF types.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "tools/gen_model/internal.h"

namespace tandem::genmodel {
namespace {

struct Preset {
  const char* name;
  std::optional<Arch> arch;  // set for presets copying one real model
  void (*apply)(ModelConfig& c);
};

bool is_deepseek(Arch a) { return a == Arch::kDeepseekV2 || a == Arch::kDeepseekV3; }

void set_gqa(ModelConfig& c, uint32_t hidden, uint32_t layers, uint32_t heads, uint32_t kv,
             uint32_t head_dim) {
  c.hidden = hidden, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv, c.head_dim = head_dim;
}

void set_mla(ModelConfig& c, uint32_t q_lora, uint32_t kv_lora, uint32_t nope, uint32_t rope,
             uint32_t v) {
  c.mla = MlaConfig{q_lora, kv_lora, nope, rope, v};
}

void set_moe(ModelConfig& c, uint32_t experts, uint32_t top_k, uint32_t expert_ffn, uint32_t dense_ffn) {
  c.moe.n_experts = experts, c.moe.n_experts_used = top_k, c.moe.expert_ffn = expert_ffn;
  c.dense_ffn = dense_ffn;
}

void set_yarn(ModelConfig& c, float factor, uint32_t orig_ctx, float mscale) {
  c.rope.scaling = RopeScaling::kYarn;
  c.rope.factor = factor;
  c.rope.original_max_positions = orig_ctx;
  c.rope.beta_fast = 32.0f, c.rope.beta_slow = 1.0f;
  c.rope.mscale = mscale, c.rope.mscale_all_dim = mscale;
}

// DeepSeek's router and layout at toy sizes: V3 sigmoid + bias with groups,
// V2 softmax (V2-Lite-like: no q LoRA, two shared experts).
void deepseek_small(ModelConfig& c, uint32_t scale) {
  const bool v3 = c.arch == Arch::kDeepseekV3;
  c.hidden = 256 * scale, c.n_heads = 4 * scale;
  set_mla(c, v3 ? 128 * scale : 0, 128 * scale, 32 * scale, 32, 32 * scale);
  c.moe.first_k_dense = 1;
  c.moe.n_shared_experts = v3 ? 1 : 2;
  c.moe.n_group = v3 ? 4 : 2;
  c.moe.topk_group = v3 ? 2 : 1;
  c.moe.routed_scaling_factor = v3 ? 2.5f : 1.0f;
  c.moe.norm_topk_prob = v3;
  c.rope.theta = 10000.0f;
  set_yarn(c, 4.0f, c.max_positions / 4, 1.0f);
}

void preset_tiny(ModelConfig& c) {
  set_gqa(c, 256, 2, 4, 2, 64);
  set_moe(c, 4, 2, 128, 256);
  c.moe.shared_ffn = c.arch == Arch::kQwen2Moe ? 256 : 0;
  if (is_deepseek(c.arch)) {
    deepseek_small(c, 1);
    set_moe(c, 8, 2, 128, 256);
  }
}

void preset_default(ModelConfig& c) {  // the fixtures' sizes
  set_gqa(c, 256, 2, 4, 2, 64);
  set_moe(c, 8, 2, 256, 256);
  c.moe.shared_ffn = c.arch == Arch::kQwen2Moe ? 512 : 0;
  if (is_deepseek(c.arch)) {
    deepseek_small(c, 1);
    c.n_layers = 3;
    set_moe(c, 16, 4, 256, 512);
  }
}

void preset_small(ModelConfig& c) {
  set_gqa(c, 512, 4, 8, 4, 64);
  set_moe(c, 16, 4, 256, 1024);
  c.moe.shared_ffn = c.arch == Arch::kQwen2Moe ? 1024 : 0;
  c.max_positions = 4096;
  if (is_deepseek(c.arch)) {
    deepseek_small(c, 2);
    set_moe(c, 32, 4, 256, 1024);
  }
}

void preset_qwen3_30b(ModelConfig& c) {
  set_gqa(c, 2048, 48, 32, 4, 128);
  set_moe(c, 128, 8, 768, 6144);
  c.vocab_size = 151936, c.max_positions = 40960;
}

void preset_qwen15_moe(ModelConfig& c) {
  set_gqa(c, 2048, 24, 16, 16, 128);
  set_moe(c, 60, 4, 1408, 5632);
  c.moe.shared_ffn = 5632;
  c.vocab_size = 151936, c.max_positions = 8192;
}

void preset_mixtral_8x7b(ModelConfig& c) {
  set_gqa(c, 4096, 32, 32, 8, 128);
  set_moe(c, 8, 2, 14336, 14336);
  c.vocab_size = 32000, c.max_positions = 32768, c.rms_eps = 1e-5f;
}

void preset_deepseek_v2_lite(ModelConfig& c) {
  c.hidden = 2048, c.n_layers = 27, c.n_heads = 16;
  set_mla(c, 0, 512, 128, 64, 128);
  set_moe(c, 64, 6, 1408, 10944);
  c.moe.n_shared_experts = 2, c.moe.first_k_dense = 1;
  c.moe.n_group = 1, c.moe.topk_group = 1;
  c.vocab_size = 102400, c.max_positions = 163840, c.rope.theta = 10000.0f;
  set_yarn(c, 40.0f, 4096, 0.707f);
}

void preset_deepseek_v3(ModelConfig& c) {
  c.hidden = 7168, c.n_layers = 61, c.n_heads = 128;
  set_mla(c, 1536, 512, 128, 64, 128);
  set_moe(c, 256, 8, 2048, 18432);
  c.moe.n_shared_experts = 1, c.moe.first_k_dense = 3;
  c.moe.n_group = 8, c.moe.topk_group = 4;
  c.moe.routed_scaling_factor = 2.5f, c.moe.norm_topk_prob = true;
  c.vocab_size = 129280, c.max_positions = 163840, c.rope.theta = 10000.0f;
  set_yarn(c, 40.0f, 4096, 1.0f);
}

const Preset kPresets[] = {
    {"tiny", std::nullopt, preset_tiny},
    {"default", std::nullopt, preset_default},
    {"small", std::nullopt, preset_small},
    {"qwen3-30b-a3b-shapes", Arch::kQwen3Moe, preset_qwen3_30b},
    {"qwen1.5-moe-a2.7b-shapes", Arch::kQwen2Moe, preset_qwen15_moe},
    {"mixtral-8x7b-shapes", Arch::kMixtral, preset_mixtral_8x7b},
    {"deepseek-v2-lite-shapes", Arch::kDeepseekV2, preset_deepseek_v2_lite},
    {"deepseek-v3-shapes", Arch::kDeepseekV3, preset_deepseek_v3},
};

const Preset& find_preset(std::string_view name) {
  for (auto& p : kPresets)
    if (name == p.name) return p;
  fail(ErrorKind::kInvalidInput, "unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

}  // namespace

Arch arch_from_name(std::string_view name) {
  for (Arch a : {Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kMixtral, Arch::kDeepseekV2, Arch::kDeepseekV3})
    if (name == to_string(a)) return a;
  fail(ErrorKind::kInvalidInput, "unknown architecture '{}' (qwen3_moe, qwen2_moe, mixtral, deepseek_v2, deepseek_v3)",
       name);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (auto& p : kPresets) v.push_back(p.name);
  return v;
}

std::optional<Arch> preset_arch(std::string_view preset) { return find_preset(preset).arch; }

ModelConfig preset_config(Arch arch, std::string_view preset) {
  const Preset& p = find_preset(preset);
  if (p.arch && *p.arch != arch)
    fail(ErrorKind::kInvalidInput, "preset '{}' is a {} model, not {}", p.name, to_string(*p.arch),
         to_string(arch));
  ModelConfig c;
  c.arch = arch;
  c.name = fmt::format("tandem-gen-{}-{}", to_string(arch), p.name);
  c.max_positions = 1024;
  c.rms_eps = arch == Arch::kMixtral ? 1e-5f : 1e-6f;
  c.rope.theta = 1000000.0f;
  p.apply(c);
  finalize_config(c);
  return c;
}

void finalize_config(ModelConfig& c) {
  auto& moe = c.moe;
  const bool deepseek = is_deepseek(c.arch);
  c.tie_embeddings = false;
  c.qkv_bias = c.arch == Arch::kQwen2Moe;
  c.qk_norm = c.arch == Arch::kQwen3Moe;
  moe.layer_freq = 1;
  moe.dense_layers.clear();
  moe.scoring = c.arch == Arch::kDeepseekV3 ? RouterScoring::kSigmoid : RouterScoring::kSoftmax;
  moe.score_correction_bias = c.arch == Arch::kDeepseekV3;
  if (deepseek) {
    if (!c.mla) fail(ErrorKind::kInvalidInput, "{} needs MLA sizes", to_string(c.arch));
    c.head_dim = c.mla->qk_nope_head_dim + c.mla->qk_rope_head_dim;
    c.v_head_dim = c.mla->v_head_dim;
    c.rope.dims = c.mla->qk_rope_head_dim;
    c.n_kv_heads = c.n_heads;
    moe.shared_ffn = moe.n_shared_experts * moe.expert_ffn;
    moe.shared_gate = false;
  } else {
    c.mla.reset();
    c.v_head_dim = c.head_dim;
    c.rope.dims = c.head_dim;
    c.rope.scaling = RopeScaling::kNone;
    c.rope.factor = 1.0f;
    moe.first_k_dense = 0;
    moe.n_group = moe.topk_group = 1;
    moe.routed_scaling_factor = 1.0f;
    moe.norm_topk_prob = c.arch != Arch::kQwen2Moe;  // llama.cpp's fixed behaviour per arch
    if (c.arch == Arch::kMixtral) c.dense_ffn = moe.expert_ffn;  // one intermediate_size
    if (c.arch != Arch::kQwen2Moe) moe.shared_ffn = 0;
    moe.n_shared_experts = moe.shared_ffn ? 1 : 0;
    moe.shared_gate = moe.shared_ffn > 0;
  }
  if (c.vocab_size == 0) c.vocab_size = natural_vocab_size();
  c.eos_tokens = {make_tokenizer(c.vocab_size).eos_id};  // throws if the vocab is too small
  c.bos_token.reset();
  if (c.head_dim % 2 || c.rope.dims % 2)
    fail(ErrorKind::kInvalidInput, "head dim {} and rope dims {} must be even", c.head_dim, c.rope.dims);
  validate(c, "generated model");
}

DType gguf_tensor_dtype(const TensorSpec& spec, DType requested) {
  const std::string sfx = suffix_of(spec);
  if (spec.shape.size() < 2 || sfx == "ffn_gate_inp.weight" || sfx == "ffn_gate_inp_shexp.weight")
    return DType::kF32;
  const DTypeInfo& i = info(requested);
  const uint64_t row = spec.shape.back();
  if (i.is_float || row % i.block_elems == 0) return requested;
  // llama-quantize's fallbacks (Q4_K -> Q5_0, Q5_K -> Q5_1 (we use Q8_0), Q6_K -> Q8_0).
  if (i.block_elems == 256 && row % 32 == 0)
    return requested == DType::kQ4_K ? DType::kQ5_0 : DType::kQ8_0;
  return DType::kF32;
}

uint32_t gguf_file_type(DType requested) {
  switch (requested) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ4_K: return 14;  // Q4_K_S: every matrix Q4_K
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default:
      fail(ErrorKind::kInvalidInput, "GGUF output cannot be {} (f32 f16 bf16 q8_0 q4_0 q5_0 q4_k q5_k q6_k)",
           name(requested));
  }
}

}  // namespace tandem::genmodel
