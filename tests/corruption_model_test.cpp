// Corruption suite, model level: corrupted copies of the fixture models opened
// through ModelSource, the way `tandem inspect` and the loader open them.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/formats/gguf.h"
#include "common/model/model_source.h"
#include "tests/corruption_util.h"

namespace tandem::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

class ModelCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    fixtures_ = fixtures_dir();
    if (fixtures_.empty()) GTEST_SKIP() << "fixtures not found (set TANDEM_FIXTURES)";
    dir_ =
        std::make_unique<TempDir>(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // A writable copy of a fixture's hf/ directory; returns its path.
  std::string hf_copy(const std::string& model) {
    std::string d = *dir_ / model;
    copy_dir(fixtures_ + "/" + model + "/hf", d);
    return d;
  }
  json config(const std::string& d) { return json::parse(read_text(d + "/config.json")); }
  void set_config(const std::string& d, const json& j) {
    write_text(d + "/config.json", j.dump(2));
  }
  // Rewrites d/model.safetensors in place.
  void edit_weights(const std::string& d, const std::function<bool(StEntry&)>& edit,
                    const std::vector<StEntry>& add = {}) {
    std::string tmp = d + "/model.safetensors.tmp";
    rewrite_safetensors(d + "/model.safetensors", tmp, edit, add);
    fs::rename(tmp, d + "/model.safetensors");
  }
  // A rewritten copy of a fixture GGUF.
  std::string gguf_copy(
      const std::string& rel, const std::function<bool(const std::string&, GgufValue&)>& edit_kv,
      const std::function<bool(StEntry&)>& edit_tensor = [](StEntry&) { return true; }) {
    std::string out = *dir_ / "model.gguf";
    rewrite_gguf(fixtures_ + "/" + rel, out, edit_kv, edit_tensor);
    return out;
  }

  std::string fixtures_;
  std::unique_ptr<TempDir> dir_;
};

TEST_F(ModelCorruption, UnmodifiedCopiesOpen) {
  for (const char* m : {"qwen3moe", "deepseek3-fp8"}) {
    std::string d = hf_copy(m);
    EXPECT_NO_THROW(ModelSource::open(d)) << m;
  }
  // The GGUF round trip through the writer keeps the model readable.
  std::string g = gguf_copy("qwen3moe/model-q4_k_m.gguf", [](auto&, auto&) { return true; });
  EXPECT_NO_THROW(ModelSource::open(g));
}

TEST_F(ModelCorruption, ConfigNotJson) {
  std::string d = hf_copy("qwen3moe");
  write_text(d + "/config.json", R"({"model_type": "qwen3_moe", "vocab_size": )");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/config.json", "not valid JSON"});
  write_text(d + "/config.json", "");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/config.json", "not valid JSON"});
  write_text(d + "/config.json", "[\"qwen3_moe\"]");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/config.json", "config must be a JSON object"});
  // A value nested far deeper than any config (error messages print values).
  write_text(d + "/config.json", R"({"model_type": "qwen3_moe", "vocab_size": )" +
                                     std::string(200000, '[') + std::string(200000, ']') + "}");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/config.json", "deeper than"});
  fs::remove(d + "/config.json");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d, "no config.json"}, ErrorKind::kNotFound);
}

TEST_F(ModelCorruption, UnsupportedModelType) {
  std::string d = hf_copy("qwen3moe");
  json j = config(d);
  j["model_type"] = "llama";
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {d + "/config.json", "model_type 'llama' is not supported",
                       "qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3"},
                      ErrorKind::kUnsupported);
  j.erase("model_type");
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"model_type '' is not supported", "qwen3_moe"});
  j["model_type"] = 3;
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {d + "/config.json", "'model_type' must be a string, got 3"});
}

TEST_F(ModelCorruption, MissingRequiredKey) {
  std::string d = hf_copy("qwen3moe");
  json j = config(d);
  j.erase("hidden_size");
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {d + "/config.json", "required key 'hidden_size' is missing"});
  j = config(hf_copy("qwen3moe"));
  j.erase("num_experts");
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"required key 'num_experts' is missing"});
  std::string ds = hf_copy("deepseek3-fp8");
  json k = config(ds);
  k.erase("kv_lora_rank");
  set_config(ds, k);
  EXPECT_TANDEM_ERROR(ModelSource::open(ds), {ds + "/config.json", "'kv_lora_rank' is missing"});
}

TEST_F(ModelCorruption, WrongValueTypes) {
  std::string d = hf_copy("qwen3moe");
  json j = config(d);
  j["num_hidden_layers"] = "2";
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"'num_hidden_layers' must be a non-negative integer, got \"2\""});
  j["num_hidden_layers"] = -2;
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"'num_hidden_layers' must be a non-negative integer, got -2"});
  j["num_hidden_layers"] = 2.5;
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"got 2.5"});
  j["num_hidden_layers"] = 2;
  j["rms_norm_eps"] = "small";
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"'rms_norm_eps' must be a number"});
  j["rms_norm_eps"] = 1e-6;
  j["mlp_only_layers"] = {"a"};
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"'mlp_only_layers' must be a non-negative integer"});
}

TEST_F(ModelCorruption, InconsistentValues) {
  std::string d = hf_copy("qwen3moe");
  json j = config(d);
  j["num_experts_per_tok"] = 9;  // 8 experts
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/config.json", "inconsistent config",
                                             "top-k 9 must be between 1 and the 8 experts"});
  j["num_experts_per_tok"] = 2;
  j["num_key_value_heads"] = 3;  // 4 heads
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"inconsistent config",
                                             "4 attention heads are not a multiple of 3 kv heads"});
  std::string ds = hf_copy("deepseek3-fp8");
  json k = config(ds);
  k["n_group"] = 3;  // 16 experts
  set_config(ds, k);
  EXPECT_TANDEM_ERROR(ModelSource::open(ds), {"16 experts do not split into 3 groups"});
  k["n_group"] = 4;
  k["first_k_dense_replace"] = 9;
  set_config(ds, k);
  EXPECT_TANDEM_ERROR(ModelSource::open(ds), {"first_k_dense_replace 9 > 3 layers"});
}

TEST_F(ModelCorruption, RequiredTensorMissing) {
  std::string d = hf_copy("qwen3moe");
  edit_weights(d, [](StEntry& e) { return e.name != "model.layers.1.self_attn.q_proj.weight"; });
  EXPECT_TANDEM_ERROR(
      ModelSource::open(d),
      {"tensor 'model.layers.1.self_attn.q_proj.weight' is missing", "blk.1.attn_q.weight"},
      ErrorKind::kNotFound);
  d = hf_copy("qwen3moe");
  edit_weights(
      d, [](StEntry& e) { return e.name != "model.layers.0.mlp.experts.5.down_proj.weight"; });
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"tensor 'model.layers.0.mlp.experts.5.down_proj.weight' is missing",
                       "expert of blk.0.ffn_down_exps.weight"});
  d = hf_copy("qwen3moe");
  edit_weights(d, [](StEntry& e) { return e.name != "lm_head.weight"; });
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"tensor 'lm_head.weight' is missing", "output.weight"});
}

TEST_F(ModelCorruption, TensorWithWrongShape) {
  std::string d = hf_copy("qwen3moe");
  edit_weights(d, [](StEntry& e) {
    if (e.name == "model.layers.0.self_attn.k_proj.weight") std::swap(e.shape[0], e.shape[1]);
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"tensor 'model.layers.0.self_attn.k_proj.weight' has shape [256, 128]",
                       "config implies [128, 256] for blk.0.attn_k.weight"});
  d = hf_copy("qwen3moe");
  edit_weights(d, [](StEntry& e) {
    if (e.name == "model.layers.1.mlp.experts.2.gate_proj.weight") e.shape = {128, 512};
    return true;
  });
  EXPECT_TANDEM_ERROR(
      ModelSource::open(d),
      {"tensor 'model.layers.1.mlp.experts.2.gate_proj.weight' has shape [128, 512]",
       "expected [256, 256]"});
  d = hf_copy("qwen3moe");
  edit_weights(d, [](StEntry& e) {
    if (e.name == "model.norm.weight") e.shape = {2, 128};
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"'model.norm.weight' has shape [2, 128]", "[256]"});
}

TEST_F(ModelCorruption, Fp8ScaleMissingOrWrong) {
  const std::string w = "model.layers.1.self_attn.q_a_proj.weight";
  std::string d = hf_copy("deepseek3-fp8");
  edit_weights(d, [&](StEntry& e) { return e.name != w + "_scale_inv"; });
  EXPECT_TANDEM_ERROR(
      ModelSource::open(d),
      {d + "/model.safetensors", "FP8 tensor '" + w + "' has no '" + w + "_scale_inv'"});
  d = hf_copy("deepseek3-fp8");
  edit_weights(d, [&](StEntry& e) {
    if (e.name == w + "_scale_inv") {
      e.shape = {1, 1};
      e.data.resize(4);
    }
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"scale '" + w + "_scale_inv' is f32 [1, 1]",
                                             "with 128x128 blocks needs f32 [1, 2]"});
  d = hf_copy("deepseek3-fp8");
  edit_weights(d, [&](StEntry& e) {
    if (e.name == w + "_scale_inv") {
      e.dtype = DType::kI32;
    }
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"scale '" + w + "_scale_inv' is i32"});
  // Scales without a quantization_config.
  d = hf_copy("deepseek3-fp8");
  json j = config(d);
  j.erase("quantization_config");
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d),
                      {"_scale_inv' found but config.json has no fp8 quantization_config"});
  // A quantization_config Tandem cannot read.
  j = config(hf_copy("deepseek3-fp8"));
  j["quantization_config"]["fmt"] = "e5m2";
  set_config(d, j);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"fp8 format 'e5m2' is not supported"});
}

TEST_F(ModelCorruption, GgufUnsupportedArchitecture) {
  std::string g = gguf_copy("qwen3moe/model-q4_k_m.gguf", [](const std::string& k, GgufValue& v) {
    if (k == "general.architecture") v.value = std::string("gpt2");
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(g),
                      {g, "GGUF architecture 'gpt2' is not supported",
                       "qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3"},
                      ErrorKind::kUnsupported);
  g = gguf_copy("qwen3moe/model-q4_k_m.gguf", [](const std::string& k, GgufValue& v) {
    if (k == "general.architecture") v.value = std::string("llama");
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(g),
                      {g, "a dense llama model (no experts) is not supported"});
  g = gguf_copy("qwen3moe/model-q4_k_m.gguf",
                [](const std::string& k, GgufValue&) { return k != "general.architecture"; });
  EXPECT_TANDEM_ERROR(ModelSource::open(g), {g, "general.architecture is missing"});
}

TEST_F(ModelCorruption, GgufTensorMissingOrMisshapen) {
  auto all = [](const std::string&, GgufValue&) { return true; };
  std::string g = gguf_copy("qwen3moe/model-q4_k_m.gguf", all,
                            [](StEntry& e) { return e.name != "blk.1.ffn_up_exps.weight"; });
  EXPECT_TANDEM_ERROR(ModelSource::open(g), {g, "blk.1.ffn_up_exps.weight", "missing"},
                      ErrorKind::kNotFound);
  g = gguf_copy("qwen3moe/model-q4_k_m.gguf", all, [](StEntry& e) {
    if (e.name == "blk.0.attn_norm.weight") e.shape = {2, 128};
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(g),
                      {g, "tensor 'blk.0.attn_norm.weight' has shape [2, 128]", "implies [256]"});
  g = gguf_copy("qwen3moe/model-q4_k_m.gguf", [](const std::string& k, GgufValue& v) {
    if (k == "qwen3moe.expert_count") v.value = uint64_t{4};
    return true;
  });
  EXPECT_TANDEM_ERROR(ModelSource::open(g),
                      {g, "blk.0.ffn_gate_inp.weight", "[8, 256]", "[4, 256]"});
}

TEST_F(ModelCorruption, ModelFileTruncated) {
  std::string d = hf_copy("qwen3moe");
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") - 1);
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {d + "/model.safetensors", "past the end of the file"});
  fs::remove(d + "/model.safetensors");
  EXPECT_TANDEM_ERROR(ModelSource::open(d), {"no model.safetensors"}, ErrorKind::kNotFound);
  EXPECT_TANDEM_ERROR(ModelSource::open(*dir_ / "absent.gguf"), {"absent.gguf", "no such file"},
                      ErrorKind::kNotFound);
}

}  // namespace
}  // namespace tandem::testing
