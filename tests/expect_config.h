// Field-by-field comparison of two model configs, for tests that load the
// same model from two sources (GGUF and Hugging Face twins).
#pragma once

#include <gtest/gtest.h>

#include "common/model/config.h"

namespace tandem::testing {

inline void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.dense_ffn, b.dense_ffn);
  EXPECT_EQ(a.max_positions, b.max_positions);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.dims, b.rope.dims);
  EXPECT_EQ(a.rope.scaling, b.rope.scaling);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.original_max_positions, b.rope.original_max_positions);
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast);
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow);
  EXPECT_EQ(a.rope.mscale, b.rope.mscale);
  EXPECT_EQ(a.rope.mscale_all_dim, b.rope.mscale_all_dim);
  ASSERT_EQ(a.mla.has_value(), b.mla.has_value());
  if (a.mla) {
    EXPECT_EQ(a.mla->q_lora_rank, b.mla->q_lora_rank);
    EXPECT_EQ(a.mla->kv_lora_rank, b.mla->kv_lora_rank);
    EXPECT_EQ(a.mla->qk_nope_head_dim, b.mla->qk_nope_head_dim);
    EXPECT_EQ(a.mla->qk_rope_head_dim, b.mla->qk_rope_head_dim);
    EXPECT_EQ(a.mla->v_head_dim, b.mla->v_head_dim);
  }
  const MoeConfig &x = a.moe, &y = b.moe;
  EXPECT_EQ(x.n_experts, y.n_experts);
  EXPECT_EQ(x.n_experts_used, y.n_experts_used);
  EXPECT_EQ(x.expert_ffn, y.expert_ffn);
  EXPECT_EQ(x.n_shared_experts, y.n_shared_experts);
  EXPECT_EQ(x.shared_ffn, y.shared_ffn);
  EXPECT_EQ(x.shared_gate, y.shared_gate);
  EXPECT_EQ(x.scoring, y.scoring);
  EXPECT_EQ(x.norm_topk_prob, y.norm_topk_prob);
  EXPECT_EQ(x.routed_scaling_factor, y.routed_scaling_factor);
  EXPECT_EQ(x.score_correction_bias, y.score_correction_bias);
  EXPECT_EQ(x.n_group, y.n_group);
  EXPECT_EQ(x.topk_group, y.topk_group);
  EXPECT_EQ(x.first_k_dense, y.first_k_dense);
  EXPECT_EQ(x.layer_freq, y.layer_freq);
  EXPECT_EQ(x.dense_layers, y.dense_layers);
  EXPECT_EQ(a.bos_token, b.bos_token);
  EXPECT_EQ(a.eos_tokens, b.eos_tokens);
}

}  // namespace tandem::testing
