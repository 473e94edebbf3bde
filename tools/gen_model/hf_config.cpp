// config.json and generation_config.json of a generated HF directory, with
// the keys and defaults of each architecture's real configs.
#include <nlohmann/json.hpp>

#include "tools/gen_model/internal.h"

namespace tandem::genmodel {

std::string hf_config_json(const ModelConfig& c, DType dtype) {
  using json = nlohmann::ordered_json;
  static const char* kClass[] = {"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                                 "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"};
  const auto& moe = c.moe;
  json j;
  j["architectures"] = {kClass[int(c.arch)]};
  j["model_type"] = to_string(c.arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["rms_norm_eps"] = nice(c.rms_eps);
  j["rope_theta"] = nice(c.rope.theta);
  j["max_position_embeddings"] = c.max_positions;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = dtype == DType::kF32 ? "float32" : "bfloat16";
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = c.eos_tokens.at(0);
  j["hidden_act"] = "silu";
  j["num_key_value_heads"] = c.n_kv_heads;
  switch (c.arch) {
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      j["head_dim"] = c.head_dim;
      j["intermediate_size"] = c.dense_ffn;
      j["num_experts"] = moe.n_experts;
      j["num_experts_per_tok"] = moe.n_experts_used;
      j["moe_intermediate_size"] = moe.expert_ffn;
      j["norm_topk_prob"] = moe.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = json::array();
      if (c.arch == Arch::kQwen2Moe) {
        j["shared_expert_intermediate_size"] = moe.shared_ffn;
        j["use_sliding_window"] = false;
      } else {
        j["attention_bias"] = false;
      }
      break;
    case Arch::kMixtral:
      j["head_dim"] = c.head_dim;
      j["intermediate_size"] = moe.expert_ffn;
      j["num_local_experts"] = moe.n_experts;
      j["num_experts_per_tok"] = moe.n_experts_used;
      break;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: {
      const MlaConfig& m = *c.mla;
      const bool v3 = c.arch == Arch::kDeepseekV3;
      j["q_lora_rank"] = m.q_lora_rank ? json(m.q_lora_rank) : json(nullptr);
      j["kv_lora_rank"] = m.kv_lora_rank;
      j["qk_nope_head_dim"] = m.qk_nope_head_dim;
      j["qk_rope_head_dim"] = m.qk_rope_head_dim;
      j["v_head_dim"] = m.v_head_dim;
      j["n_routed_experts"] = moe.n_experts;
      j["num_experts_per_tok"] = moe.n_experts_used;
      j["n_group"] = moe.n_group;
      j["topk_group"] = moe.topk_group;
      j["moe_intermediate_size"] = moe.expert_ffn;
      j["intermediate_size"] = c.dense_ffn;
      j["n_shared_experts"] = moe.n_shared_experts;
      j["first_k_dense_replace"] = moe.first_k_dense;
      j["routed_scaling_factor"] = nice(moe.routed_scaling_factor);
      j["norm_topk_prob"] = moe.norm_topk_prob;
      j["scoring_func"] = v3 ? "sigmoid" : "softmax";
      j["topk_method"] = v3 ? "noaux_tc" : moe.n_group > 1 ? "group_limited_greedy" : "greedy";
      j["moe_layer_freq"] = 1;
      if (c.rope.scaling == RopeScaling::kYarn)
        j["rope_scaling"] = {{"type", "yarn"},
                             {"factor", nice(c.rope.factor)},
                             {"original_max_position_embeddings", c.rope.original_max_positions},
                             {"beta_fast", nice(c.rope.beta_fast)},
                             {"beta_slow", nice(c.rope.beta_slow)},
                             {"mscale", nice(c.rope.mscale)},
                             {"mscale_all_dim", nice(c.rope.mscale_all_dim)}};
      else
        j["rope_scaling"] = nullptr;
      j["attention_bias"] = false;
      break;
    }
  }
  if (dtype == DType::kF8E4M3)
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {128, 128}}};
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["eos_token_id"] = c.eos_tokens.at(0);
  j["do_sample"] = false;
  return j.dump(2) + "\n";
}

}  // namespace tandem::genmodel
