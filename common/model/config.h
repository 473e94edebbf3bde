// The model description: one config type for every supported MoE family,
// filled from a Hugging Face config.json or from GGUF metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem {

class GgufFile;

enum class Arch {
  kQwen2Moe,    // HF qwen2_moe,   GGUF qwen2moe
  kQwen3Moe,    // HF qwen3_moe,   GGUF qwen3moe
  kMixtral,     // HF mixtral,     GGUF llama (with experts)
  kDeepseekV2,  // HF deepseek_v2, GGUF deepseek2
  kDeepseekV3,  // HF deepseek_v3, GGUF deepseek2 (sigmoid scoring + bias)
};

const char* to_string(Arch a);
// "qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3"
std::string supported_architectures();

enum class RouterScoring { kSoftmax, kSigmoid };

enum class RopeScaling { kNone, kLinear, kYarn };

struct RopeConfig {
  float theta = 10000.0f;
  uint32_t dims = 0;  // rotated dims per head (qk_rope_head_dim for MLA)
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;
  uint32_t original_max_positions = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 1.0f;          // HF rope_scaling.mscale
  float mscale_all_dim = 0.0f;  // HF rope_scaling.mscale_all_dim
};

struct MlaConfig {
  uint32_t q_lora_rank = 0;  // 0: no q LoRA (DeepSeek-V2-Lite)
  uint32_t kv_lora_rank = 0;
  uint32_t qk_nope_head_dim = 0;
  uint32_t qk_rope_head_dim = 0;
  uint32_t v_head_dim = 0;
};

struct MoeConfig {
  uint32_t n_experts = 0;
  uint32_t n_experts_used = 0;
  uint32_t expert_ffn = 0;         // moe_intermediate_size
  uint32_t n_shared_experts = 0;   // DeepSeek: count; qwen2: 1 if shared_ffn > 0
  uint32_t shared_ffn = 0;         // total intermediate size of the shared expert(s)
  bool shared_gate = false;        // qwen2_moe: sigmoid-gated shared expert
  RouterScoring scoring = RouterScoring::kSoftmax;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  bool score_correction_bias = false;  // DeepSeek-V3 noaux_tc
  uint32_t n_group = 1;
  uint32_t topk_group = 1;
  uint32_t first_k_dense = 0;      // leading dense layers
  uint32_t layer_freq = 1;         // every N-th layer is MoE (after first_k_dense)
  std::vector<uint32_t> dense_layers;  // qwen mlp_only_layers
};

struct ModelConfig {
  Arch arch = Arch::kQwen3Moe;
  std::string name;
  uint32_t vocab_size = 0;
  uint32_t hidden = 0;
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;      // q/k head dim for GQA (for MLA: nope + rope)
  uint32_t v_head_dim = 0;    // for GQA equal to head_dim
  uint32_t dense_ffn = 0;     // intermediate_size of dense layers
  uint32_t max_positions = 0;
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  bool qkv_bias = false;      // qwen2
  bool qk_norm = false;       // qwen3 per-head q/k RMSNorm
  RopeConfig rope;
  std::optional<MlaConfig> mla;
  MoeConfig moe;
  std::optional<uint32_t> bos_token;
  std::vector<uint32_t> eos_tokens;
  // FP8 block quantisation of a HF checkpoint: {rows, cols} per scale.
  std::optional<std::pair<uint32_t, uint32_t>> fp8_block;

  bool is_moe_layer(uint32_t layer) const;
  bool is_mla() const { return mla.has_value(); }
};

// Throws Error naming the file and the key on a missing/invalid value, and
// listing the supported architectures for an unknown model_type.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source);
ModelConfig config_from_gguf(const GgufFile& f);

// Checks internal consistency (heads divide hidden, top-k <= experts, ...).
void validate(const ModelConfig& c, const std::string& source);

// A readable multi-line summary for `tandem inspect`.
std::string describe(const ModelConfig& c);

}  // namespace tandem
