#include "common/model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tandem {
namespace {
using nlohmann::json;

json deepseek_v3() {
  return json::parse(R"({
    "model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "q_lora_rank": 128, "kv_lora_rank": 128, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32,
    "v_head_dim": 32, "n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
    "moe_intermediate_size": 256, "intermediate_size": 512, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1, "eos_token_id": [1, 2],
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707}})");
}

TEST(Config, DeepseekV3FromHf) {
  ModelConfig c = config_from_hf_json(deepseek_v3(), "config.json");
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->kv_lora_rank, 128u);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.rope.dims, 32u);
  EXPECT_EQ(c.rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(c.rope.mscale_all_dim, 0.707f);
  EXPECT_EQ(c.moe.scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.moe.score_correction_bias);
  EXPECT_EQ(c.moe.n_group, 4u);
  EXPECT_EQ(c.moe.topk_group, 2u);
  EXPECT_FLOAT_EQ(c.moe.routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.moe.shared_ffn, 256u);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_EQ(c.eos_tokens, (std::vector<uint32_t>{1, 2}));
}

TEST(Config, UnsupportedArchitectureListsSupportedOnes) {
  json j = deepseek_v3();
  j["model_type"] = "llama";
  try {
    config_from_hf_json(j, "x/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    std::string m = e.what();
    EXPECT_NE(m.find("'llama'"), std::string::npos);
    EXPECT_NE(m.find("qwen3_moe"), std::string::npos);
    EXPECT_NE(m.find("deepseek_v3"), std::string::npos);
  }
}

TEST(Config, InconsistentValuesAreNamed) {
  json j = deepseek_v3();
  j["topk_group"] = 5;
  EXPECT_THROW(config_from_hf_json(j, "c.json"), Error);
  j = deepseek_v3();
  j["num_experts_per_tok"] = 17;
  EXPECT_THROW(config_from_hf_json(j, "c.json"), Error);
  j = deepseek_v3();
  j["hidden_size"] = "256";
  try {
    config_from_hf_json(j, "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'hidden_size' must be a non-negative integer"),
              std::string::npos) << e.what();
  }
  j = deepseek_v3();
  j.erase("kv_lora_rank");
  EXPECT_THROW(config_from_hf_json(j, "c.json"), Error);
}

TEST(Config, QwenSparseStepAndMlpOnlyLayers) {
  json j = json::parse(R"({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 8,
    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
    "intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
    "decoder_sparse_step": 2, "mlp_only_layers": [3]})");
  ModelConfig c = config_from_hf_json(j, "c.json");
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_FALSE(c.is_moe_layer(3));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.moe.norm_topk_prob);
}

}  // namespace
}  // namespace tandem
