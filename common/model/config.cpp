#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/model/config.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/formats/gguf.h"

namespace tandem {
using nlohmann::json;

namespace {

// Typed access to config.json values with errors naming the file and key.
class JsonConfig {
 public:
  JsonConfig(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  uint32_t u32(const char* key) const {
    if (!has(key)) fail_invalid("{}: required key '{}' is missing", source_, key);
    return u32_of(j_.at(key), key);
  }
  uint32_t u32(const char* key, uint32_t dflt) const { return has(key) ? u32(key) : dflt; }

  float f32(const char* key, float dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_number()) fail_invalid("{}: '{}' must be a number, got {}", source_, key, v.dump());
    return v.get<float>();
  }
  bool boolean(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail_invalid("{}: '{}' must be true or false, got {}", source_, key, v.dump());
    return v.get<bool>();
  }
  std::string str(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_string()) fail_invalid("{}: '{}' must be a string, got {}", source_, key, v.dump());
    return v.get<std::string>();
  }
  uint32_t u32_of(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t(UINT32_MAX))
      fail_invalid("{}: '{}' must be a non-negative integer, got {}", source_, key, v.dump());
    return v.get<uint32_t>();
  }
  const json& at(const char* key) const { return j_.at(key); }

 private:
  const json& j_;
  const std::string& source_;
};

void read_rope_scaling(const json& rs, const std::string& source, RopeConfig& rope) {
  if (rs.is_null()) return;
  if (!rs.is_object()) fail_invalid("{}: rope_scaling must be an object", source);
  JsonConfig r(rs, source);
  std::string type = r.str("type", r.str("rope_type", ""));
  if (type == "yarn") {
    rope.scaling = RopeScaling::kYarn;
    rope.original_max_positions = r.u32("original_max_position_embeddings");
    rope.beta_fast = r.f32("beta_fast", 32.0f);
    rope.beta_slow = r.f32("beta_slow", 1.0f);
    rope.mscale = r.f32("mscale", 1.0f);
    rope.mscale_all_dim = r.f32("mscale_all_dim", 0.0f);
  } else if (type == "linear") {
    rope.scaling = RopeScaling::kLinear;
  } else if (type == "default" || type.empty()) {
    return;
  } else {
    fail(ErrorKind::kUnsupported, "{}: rope_scaling type '{}' is not supported (yarn, linear)",
         source, type);
  }
  rope.factor = r.f32("factor", 1.0f);
}

void read_eos(const json& v, const std::string& source, ModelConfig& c) {
  if (v.is_null()) return;
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      fail_invalid("{}: eos_token_id must be a token id, got {}", source, x.dump());
    c.eos_tokens.push_back(x.get<uint32_t>());
  };
  if (v.is_array())
    for (auto& x : v) one(x);
  else
    one(v);
}

}  // namespace

const char* to_string(Arch a) {
  switch (a) {
    case Arch::kQwen2Moe: return "qwen2_moe";
    case Arch::kQwen3Moe: return "qwen3_moe";
    case Arch::kMixtral: return "mixtral";
    case Arch::kDeepseekV2: return "deepseek_v2";
    case Arch::kDeepseekV3: return "deepseek_v3";
  }
  return "?";
}

std::string supported_architectures() {
  return "qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3 (GGUF: qwen2moe, qwen3moe, "
         "llama with experts, deepseek2)";
}

bool ModelConfig::is_moe_layer(uint32_t layer) const {
  if (moe.n_experts == 0 || layer < moe.first_k_dense) return false;
  if (std::find(moe.dense_layers.begin(), moe.dense_layers.end(), layer) != moe.dense_layers.end())
    return false;
  uint32_t freq = std::max(moe.layer_freq, 1u);
  switch (arch) {
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: return layer % freq == 0;  // HF: layer_idx % moe_layer_freq
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe: return (layer + 1) % freq == 0;  // HF: decoder_sparse_step
    case Arch::kMixtral: return true;
  }
  return true;
}

ModelConfig config_from_hf_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail_invalid("{}: config must be a JSON object", source);
  JsonConfig c(j, source);
  std::string type = c.str("model_type", "");
  ModelConfig m;
  if (type == "qwen2_moe") m.arch = Arch::kQwen2Moe;
  else if (type == "qwen3_moe") m.arch = Arch::kQwen3Moe;
  else if (type == "mixtral") m.arch = Arch::kMixtral;
  else if (type == "deepseek_v2") m.arch = Arch::kDeepseekV2;
  else if (type == "deepseek_v3") m.arch = Arch::kDeepseekV3;
  else
    fail(ErrorKind::kUnsupported, "{}: model_type '{}' is not supported; supported: {}", source,
         type, supported_architectures());

  m.name = type;
  m.vocab_size = c.u32("vocab_size");
  m.hidden = c.u32("hidden_size");
  m.n_layers = c.u32("num_hidden_layers");
  m.n_heads = c.u32("num_attention_heads");
  m.n_kv_heads = c.u32("num_key_value_heads", m.n_heads);
  m.dense_ffn = c.u32("intermediate_size", 0);
  m.max_positions = c.u32("max_position_embeddings", 0);
  m.rms_eps = c.f32("rms_norm_eps", 1e-6f);
  m.tie_embeddings = c.boolean("tie_word_embeddings", false);
  m.rope.theta = c.f32("rope_theta", 10000.0f);
  if (c.has("rope_scaling")) read_rope_scaling(c.at("rope_scaling"), source, m.rope);
  if (c.has("bos_token_id")) m.bos_token = c.u32("bos_token_id");
  if (c.has("eos_token_id")) read_eos(c.at("eos_token_id"), source, m);
  if (m.n_heads == 0) fail_invalid("{}: num_attention_heads is 0", source);

  auto& moe = m.moe;
  switch (m.arch) {
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
      m.head_dim = c.u32("head_dim", m.hidden / m.n_heads);
      m.v_head_dim = m.head_dim;
      m.qkv_bias = m.arch == Arch::kQwen2Moe || c.boolean("attention_bias", false);
      m.qk_norm = m.arch == Arch::kQwen3Moe;
      moe.n_experts = c.u32("num_experts");
      moe.n_experts_used = c.u32("num_experts_per_tok");
      moe.expert_ffn = c.u32("moe_intermediate_size");
      moe.norm_topk_prob = c.boolean("norm_topk_prob", false);
      moe.layer_freq = c.u32("decoder_sparse_step", 1);
      if (c.has("mlp_only_layers"))
        for (auto& v : c.at("mlp_only_layers")) moe.dense_layers.push_back(c.u32_of(v, "mlp_only_layers"));
      if (m.arch == Arch::kQwen2Moe) {
        moe.shared_ffn = c.u32("shared_expert_intermediate_size", 0);
        moe.n_shared_experts = moe.shared_ffn ? 1 : 0;
        moe.shared_gate = moe.shared_ffn > 0;
      }
      break;
    case Arch::kMixtral:
      m.head_dim = c.u32("head_dim", m.hidden / m.n_heads);
      m.v_head_dim = m.head_dim;
      moe.n_experts = c.u32("num_local_experts");
      moe.n_experts_used = c.u32("num_experts_per_tok");
      moe.expert_ffn = c.u32("intermediate_size");
      moe.norm_topk_prob = true;  // Mixtral renormalises the top-k softmax weights
      break;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: {
      MlaConfig mla;
      mla.q_lora_rank = c.u32("q_lora_rank", 0);
      mla.kv_lora_rank = c.u32("kv_lora_rank");
      mla.qk_nope_head_dim = c.u32("qk_nope_head_dim");
      mla.qk_rope_head_dim = c.u32("qk_rope_head_dim");
      mla.v_head_dim = c.u32("v_head_dim");
      m.mla = mla;
      m.head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
      m.v_head_dim = mla.v_head_dim;
      m.rope.dims = mla.qk_rope_head_dim;
      m.n_kv_heads = m.n_heads;
      moe.n_experts = c.u32("n_routed_experts");
      moe.n_experts_used = c.u32("num_experts_per_tok");
      moe.expert_ffn = c.u32("moe_intermediate_size");
      moe.n_shared_experts = c.u32("n_shared_experts", 0);
      moe.shared_ffn = moe.n_shared_experts * moe.expert_ffn;
      moe.first_k_dense = c.u32("first_k_dense_replace", 0);
      moe.layer_freq = c.u32("moe_layer_freq", 1);
      moe.routed_scaling_factor = c.f32("routed_scaling_factor", 1.0f);
      moe.norm_topk_prob = c.boolean("norm_topk_prob", false);
      std::string scoring = c.str("scoring_func", "softmax");
      if (scoring == "sigmoid") moe.scoring = RouterScoring::kSigmoid;
      else if (scoring != "softmax")
        fail(ErrorKind::kUnsupported, "{}: scoring_func '{}' is not supported (softmax, sigmoid)",
             source, scoring);
      std::string method = c.str("topk_method", "greedy");
      moe.score_correction_bias = method == "noaux_tc";
      if (method == "noaux_tc" || method == "group_limited_greedy") {
        moe.n_group = c.u32("n_group", 1);
        moe.topk_group = c.u32("topk_group", 1);
      } else if (method != "greedy") {
        fail(ErrorKind::kUnsupported, "{}: topk_method '{}' is not supported", source, method);
      }
      break;
    }
  }
  if (m.rope.dims == 0) m.rope.dims = m.head_dim;

  if (c.has("quantization_config")) {
    const json& q = c.at("quantization_config");
    JsonConfig qc(q, source);
    std::string method = qc.str("quant_method", "");
    if (method != "fp8")
      fail(ErrorKind::kUnsupported,
           "{}: quantization_config.quant_method '{}' is not supported (fp8 with block scales)",
           source, method);
    std::string fmt_name = qc.str("fmt", "e4m3");
    if (fmt_name != "e4m3")
      fail(ErrorKind::kUnsupported, "{}: fp8 format '{}' is not supported (e4m3)", source, fmt_name);
    if (!qc.has("weight_block_size") || !q.at("weight_block_size").is_array() ||
        q.at("weight_block_size").size() != 2)
      fail_invalid("{}: fp8 quantization_config needs weight_block_size [rows, cols]", source);
    m.fp8_block = {qc.u32_of(q.at("weight_block_size")[0], "weight_block_size"),
                   qc.u32_of(q.at("weight_block_size")[1], "weight_block_size")};
  }
  validate(m, source);
  return m;
}

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string& src = f.path();
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name) fail_invalid("{}: general.architecture is missing", src);
  const std::string& a = *arch_name;
  auto key = [&](const std::string& k) { return a + "." + k; };
  auto need_u = [&](const std::string& k) -> uint32_t {
    auto v = f.get_uint(key(k));
    if (!v) fail_invalid("{}: required metadata '{}' is missing", src, key(k));
    if (*v > UINT32_MAX) fail_invalid("{}: metadata '{}' = {} is out of range", src, key(k), *v);
    return uint32_t(*v);
  };
  auto opt_u = [&](const std::string& k, uint32_t dflt) -> uint32_t {
    return f.find(key(k)) ? need_u(k) : dflt;
  };
  auto opt_f = [&](const std::string& k, float dflt) -> float {
    auto v = f.get_float(key(k));
    return v ? float(*v) : dflt;
  };

  ModelConfig m;
  if (a == "qwen2moe") m.arch = Arch::kQwen2Moe;
  else if (a == "qwen3moe") m.arch = Arch::kQwen3Moe;
  else if (a == "llama" && opt_u("expert_count", 0) > 0) m.arch = Arch::kMixtral;
  else if (a == "deepseek2")
    m.arch = opt_u("expert_gating_func", 1) == 2 || f.find_tensor("blk." +
                 std::to_string(opt_u("leading_dense_block_count", 0)) + ".exp_probs_b.bias")
                 ? Arch::kDeepseekV3 : Arch::kDeepseekV2;
  else if (a == "llama")
    fail(ErrorKind::kUnsupported, "{}: a dense llama model (no experts) is not supported; supported: {}",
         src, supported_architectures());
  else
    fail(ErrorKind::kUnsupported, "{}: GGUF architecture '{}' is not supported; supported: {}", src,
         a, supported_architectures());

  m.name = f.get_string("general.name").value_or(a);
  m.hidden = need_u("embedding_length");
  m.n_layers = need_u("block_count");
  m.n_heads = need_u("attention.head_count");
  m.n_kv_heads = opt_u("attention.head_count_kv", m.n_heads);
  m.max_positions = opt_u("context_length", 0);
  m.rms_eps = opt_f("attention.layer_norm_rms_epsilon", 1e-6f);
  m.rope.theta = opt_f("rope.freq_base", 10000.0f);
  m.dense_ffn = opt_u("feed_forward_length", 0);
  if (m.n_heads == 0) fail_invalid("{}: {} is 0", src, key("attention.head_count"));
  if (auto v = f.get_uint(key("vocab_size"))) m.vocab_size = uint32_t(*v);
  else if (auto* toks = f.get_array("tokenizer.ggml.tokens")) m.vocab_size = uint32_t(toks->items.size());
  else if (auto* t = f.find_tensor("token_embd.weight")) m.vocab_size = uint32_t(t->shape[0]);
  m.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  if (auto v = f.get_uint("tokenizer.ggml.bos_token_id")) m.bos_token = uint32_t(*v);
  if (auto v = f.get_uint("tokenizer.ggml.eos_token_id")) m.eos_tokens.push_back(uint32_t(*v));

  if (auto type = f.get_string(key("rope.scaling.type"))) {
    if (*type == "yarn") m.rope.scaling = RopeScaling::kYarn;
    else if (*type == "linear") m.rope.scaling = RopeScaling::kLinear;
    else if (*type != "none")
      fail(ErrorKind::kUnsupported, "{}: rope scaling '{}' is not supported", src, *type);
    m.rope.factor = opt_f("rope.scaling.factor", 1.0f);
    m.rope.original_max_positions = opt_u("rope.scaling.original_context_length", 0);
    m.rope.beta_fast = opt_f("rope.scaling.yarn_beta_fast", 32.0f);
    m.rope.beta_slow = opt_f("rope.scaling.yarn_beta_slow", 1.0f);
    // llama.cpp stores 0.1 * mscale_all_dim as yarn_log_multiplier and assumes
    // mscale == mscale_all_dim (true of every DeepSeek release).
    m.rope.mscale_all_dim = opt_f("rope.scaling.yarn_log_multiplier", 0.0f) / 0.1f;
    m.rope.mscale = m.rope.mscale_all_dim;
  }

  auto& moe = m.moe;
  moe.n_experts = opt_u("expert_count", 0);
  moe.n_experts_used = opt_u("expert_used_count", 0);
  moe.expert_ffn = opt_u("expert_feed_forward_length", 0);
  switch (m.arch) {
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
    case Arch::kMixtral: {
      m.head_dim = opt_u("attention.key_length", m.hidden / m.n_heads);
      m.v_head_dim = opt_u("attention.value_length", m.head_dim);
      m.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
      m.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
      bool dflt_norm = m.arch != Arch::kQwen2Moe;  // llama.cpp's per-arch defaults
      moe.norm_topk_prob = f.get_bool(key("expert_weights_norm")).value_or(dflt_norm);
      if (m.arch == Arch::kMixtral && moe.expert_ffn == 0) moe.expert_ffn = m.dense_ffn;
      if (m.arch == Arch::kQwen2Moe) {
        moe.shared_ffn = opt_u("expert_shared_feed_forward_length", 0);
        moe.n_shared_experts = moe.shared_ffn ? 1 : 0;
        moe.shared_gate = f.find_tensor("blk.0.ffn_gate_inp_shexp.weight") != nullptr;
      }
      break;
    }
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3: {
      MlaConfig mla;
      mla.q_lora_rank = opt_u("attention.q_lora_rank", 0);
      mla.kv_lora_rank = need_u("attention.kv_lora_rank");
      mla.qk_rope_head_dim = need_u("rope.dimension_count");
      // Newer GGUFs carry the MLA head sizes apart from the MQA form's.
      uint32_t k_len = opt_u("attention.key_length_mla", need_u("attention.key_length"));
      if (k_len <= mla.qk_rope_head_dim)
        fail_invalid("{}: key length {} is not larger than the rope dims {}", src, k_len,
                     mla.qk_rope_head_dim);
      mla.qk_nope_head_dim = k_len - mla.qk_rope_head_dim;
      mla.v_head_dim = opt_u("attention.value_length_mla", need_u("attention.value_length"));
      m.mla = mla;
      m.head_dim = k_len;
      m.v_head_dim = mla.v_head_dim;
      m.n_kv_heads = m.n_heads;
      moe.first_k_dense = opt_u("leading_dense_block_count", 0);
      moe.n_shared_experts = opt_u("expert_shared_count", 0);
      moe.shared_ffn = moe.n_shared_experts * moe.expert_ffn;
      moe.routed_scaling_factor = opt_f("expert_weights_scale", 1.0f);
      moe.norm_topk_prob = f.get_bool(key("expert_weights_norm")).value_or(false);
      uint32_t gating = opt_u("expert_gating_func", 1);
      if (gating == 2) moe.scoring = RouterScoring::kSigmoid;
      else if (gating != 1)
        fail(ErrorKind::kUnsupported, "{}: expert_gating_func {} is not supported (1 softmax, 2 sigmoid)",
             src, gating);
      moe.score_correction_bias =
          f.find_tensor("blk." + std::to_string(moe.first_k_dense) + ".exp_probs_b.bias") != nullptr;
      moe.n_group = opt_u("expert_group_count", 1);
      moe.topk_group = opt_u("expert_group_used_count", 1);
      break;
    }
  }
  m.rope.dims = opt_u("rope.dimension_count", m.mla ? m.mla->qk_rope_head_dim : m.head_dim);
  validate(m, src);
  return m;
}

void validate(const ModelConfig& m, const std::string& src) {
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) fail_invalid("{}: inconsistent config: {}", src, what);
  };
  require(m.vocab_size > 0, "vocab size is 0");
  require(m.hidden > 0, "hidden size is 0");
  require(m.n_layers > 0, "no layers");
  // Tables are sized from the layer count; refuse absurd counts before that.
  constexpr uint32_t kMaxLayers = 4096;
  require(m.n_layers <= kMaxLayers,
          fmt::format("{} layers is more than the limit of {}", m.n_layers, kMaxLayers));
  require(m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads == 0, fmt::format("{} attention heads are not a multiple of {} kv heads", m.n_heads, m.n_kv_heads));
  require(m.head_dim > 0, "head dim is 0");
  require(m.rope.dims <= m.head_dim && m.rope.dims % 2 == 0, fmt::format("rope dims {} vs head dim {}",
          m.rope.dims, m.head_dim));
  require(m.rms_eps > 0 && std::isfinite(m.rms_eps), fmt::format("rms_norm_eps {} must be positive", m.rms_eps));
  const auto& e = m.moe;
  require(e.n_experts > 0, "no routed experts (dense models are not MoE)");
  require(e.n_experts_used > 0 && e.n_experts_used <= e.n_experts, fmt::format("top-k {} must be between 1 and the {} experts", e.n_experts_used, e.n_experts));
  require(e.expert_ffn > 0, "expert intermediate size is 0");
  require(e.n_group > 0 && e.n_experts % e.n_group == 0, fmt::format("{} experts do not split into {} groups",
          e.n_experts, e.n_group));
  require(e.topk_group > 0 && e.topk_group <= e.n_group, fmt::format("topk_group {} must be 1..n_group {}",
          e.topk_group, e.n_group));
  require(e.n_experts_used <= e.topk_group * (e.n_experts / e.n_group), fmt::format("top-k {} exceeds the experts in {} chosen groups", e.n_experts_used, e.topk_group));
  require(e.first_k_dense <= m.n_layers, fmt::format("first_k_dense_replace {} > {} layers", e.first_k_dense,
          m.n_layers));
  bool any_dense = false;
  for (uint32_t l = 0; l < m.n_layers; ++l) any_dense |= !m.is_moe_layer(l);
  require(!any_dense || m.dense_ffn > 0, "dense layers need intermediate_size > 0");
  if (m.mla) {
    require(m.mla->kv_lora_rank > 0, "kv_lora_rank is 0");
    require(m.mla->qk_nope_head_dim > 0 && m.mla->v_head_dim > 0, "MLA head dims are 0");
  }
  if (m.rope.scaling == RopeScaling::kYarn)
    require(m.rope.factor >= 1.0f && m.rope.original_max_positions > 0, "yarn needs factor >= 1 and original_max_position_embeddings");
  if (m.fp8_block)
    require(m.fp8_block->first > 0 && m.fp8_block->second > 0, "fp8 block size is 0");
}

std::string describe(const ModelConfig& m) {
  std::string s;
  auto line = [&](std::string_view k, const std::string& v) { s += fmt::format("  {:<22} {}\n", k, v); };
  line("architecture", to_string(m.arch));
  line("name", m.name);
  line("vocab", std::to_string(m.vocab_size));
  line("hidden", std::to_string(m.hidden));
  line("layers", fmt::format("{} ({} leading dense)", m.n_layers, m.moe.first_k_dense));
  line("heads", fmt::format("{} q / {} kv, head dim {} (v {})", m.n_heads, m.n_kv_heads,
                            m.head_dim, m.v_head_dim));
  if (m.mla)
    line("MLA", fmt::format("q_lora {} kv_lora {} nope {} rope {} v {}", m.mla->q_lora_rank,
                            m.mla->kv_lora_rank, m.mla->qk_nope_head_dim, m.mla->qk_rope_head_dim,
                            m.mla->v_head_dim));
  line("attention extras", fmt::format("qkv bias {}, q/k norm {}", m.qkv_bias, m.qk_norm));
  std::string rope = fmt::format("theta {} dims {}", m.rope.theta, m.rope.dims);
  if (m.rope.scaling == RopeScaling::kYarn)
    rope += fmt::format(", yarn factor {} orig ctx {} beta {}/{} mscale {} mscale_all_dim {}",
                        m.rope.factor, m.rope.original_max_positions, m.rope.beta_fast,
                        m.rope.beta_slow, m.rope.mscale, m.rope.mscale_all_dim);
  else if (m.rope.scaling == RopeScaling::kLinear)
    rope += fmt::format(", linear factor {}", m.rope.factor);
  line("rope", rope);
  line("context", std::to_string(m.max_positions));
  line("rms eps", fmt::format("{}", m.rms_eps));
  line("experts", fmt::format("{} routed, top-{}, ffn {}", m.moe.n_experts, m.moe.n_experts_used,
                              m.moe.expert_ffn));
  line("router", fmt::format("{}{}, norm_topk_prob {}, groups {}/{}, scale {}",
                             m.moe.scoring == RouterScoring::kSigmoid ? "sigmoid" : "softmax",
                             m.moe.score_correction_bias ? " + correction bias" : "",
                             m.moe.norm_topk_prob, m.moe.topk_group, m.moe.n_group,
                             m.moe.routed_scaling_factor));
  if (m.moe.n_shared_experts)
    line("shared experts", fmt::format("{} (ffn {}){}", m.moe.n_shared_experts, m.moe.shared_ffn,
                                       m.moe.shared_gate ? ", sigmoid-gated" : ""));
  if (m.dense_ffn) line("dense ffn", std::to_string(m.dense_ffn));
  line("tied embeddings", m.tie_embeddings ? "yes" : "no");
  if (m.fp8_block)
    line("fp8 blocks", fmt::format("{}x{} e4m3 + f32 scales", m.fp8_block->first, m.fp8_block->second));
  return s;
}

}  // namespace tandem
