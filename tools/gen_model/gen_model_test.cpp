#include "tools/gen_model/gen_model.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/expect_config.h"
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"
#include "common/model/model_source.h"

namespace tandem {
// Test names and failure messages show the architecture, not its bytes.
void PrintTo(Arch a, std::ostream* os) { *os << to_string(a); }
}  // namespace tandem

namespace tandem::genmodel {
namespace {
namespace fs = std::filesystem;

const Arch kArchs[] = {Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kMixtral, Arch::kDeepseekV2,
                       Arch::kDeepseekV3};

class TempDir {
 public:
  TempDir() {
    static int n = 0;
    path_ = fs::temp_directory_path() / ("tandem_gen_model_test_" + std::to_string(getpid()) + "_" +
                                         std::to_string(n++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

GenResult gen(Arch arch, OutFormat format, DType dtype, const std::string& out, uint64_t seed = 7,
              uint64_t shard_bytes = 0, const std::string& preset = "tiny") {
  GenOptions o;
  o.config = preset_config(arch, preset);
  o.format = format;
  o.dtype = dtype;
  o.seed = seed;
  o.shard_bytes = shard_bytes;
  o.progress = false;
  return generate(o, out);
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}


// sqrt(sum (a-b)^2 / sum b^2)
double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class PerArch : public ::testing::TestWithParam<Arch> {};

std::string arch_name(const ::testing::TestParamInfo<Arch>& p) { return to_string(p.param); }

// GGUF f32 and HF bf16 of one seed hold the same canonical weights, bit for
// bit: exercises Mixtral's q/k un-permutation and DeepSeek's k_b/v_b split.
TEST_P(PerArch, GgufAndHfTwinsAreBitIdentical) {
  TempDir dir;
  const Arch arch = GetParam();
  gen(arch, OutFormat::kGguf, DType::kF32, dir / "m.gguf");
  gen(arch, OutFormat::kHf, DType::kBF16, dir / "hf");
  auto g = ModelSource::open(dir / "m.gguf");
  auto h = ModelSource::open(dir / "hf");
  ASSERT_EQ(g->format(), SourceFormat::kGguf);
  ASSERT_EQ(h->format(), SourceFormat::kHuggingFace);
  testing::expect_same_config(g->config(), h->config());
  const ModelConfig want = preset_config(arch, "tiny");
  testing::expect_same_config(g->config(), want);
  EXPECT_TRUE(g->tensors().unused().empty());
  EXPECT_TRUE(h->tensors().unused().empty());
  const auto specs = expected_tensors(want);
  EXPECT_EQ(g->tensors().tensors().size(), specs.size());
  EXPECT_EQ(h->tensors().tensors().size(), specs.size());
  for (const TensorSpec& s : specs) {
    const MappedTensor* a = g->tensors().find(s.name);
    const MappedTensor* b = h->tensors().find(s.name);
    ASSERT_TRUE(a && b) << s.name;
    EXPECT_EQ(a->shape, s.shape) << s.name;
    EXPECT_EQ(a->dtype, DType::kF32) << s.name;
    EXPECT_EQ(b->dtype, DType::kBF16) << s.name;
    std::vector<float> va = read_f32(*a), vb = read_f32(*b), want_v(va.size());
    canonical_fill(7, s, 0, want_v);
    ASSERT_EQ(va.size(), vb.size());
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << s.name;
    EXPECT_EQ(std::memcmp(va.data(), want_v.data(), va.size() * 4), 0) << s.name;
  }
}

// Quantised GGUFs decode close to the f32 twin; norms and routers stay exact.
TEST_P(PerArch, QuantisedGgufIsCloseToF32) {
  TempDir dir;
  const Arch arch = GetParam();
  gen(arch, OutFormat::kGguf, DType::kF32, dir / "f32.gguf");
  auto ref = ModelSource::open(dir / "f32.gguf");
  for (auto [dt, bound] : {std::pair{DType::kQ8_0, 0.015}, std::pair{DType::kQ4_K, 0.10}}) {
    const std::string path = dir / (std::string(name(dt)) + ".gguf");
    gen(arch, OutFormat::kGguf, dt, path);
    auto q = ModelSource::open(path);
    testing::expect_same_config(q->config(), ref->config());
    EXPECT_EQ(q->gguf()->get_uint("general.file_type"), gguf_file_type(dt));
    int quantised = 0;
    for (const MappedTensor& t : ref->tensors().tensors()) {
      const MappedTensor& u = q->tensors().at(t.name);
      std::vector<float> a = read_f32(u), b = read_f32(t);
      if (info(u.dtype).is_float) {
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << t.name;
        continue;
      }
      ++quantised;
      EXPECT_LT(rel_rms(a, b), bound) << t.name << " as " << name(u.dtype);
    }
    EXPECT_GT(quantised, 0);
  }
}

// FP8 with block scales is within e4m3 rounding of the bf16 twin; the
// tensors FP8 checkpoints keep in BF16/F32 are exact.
TEST_P(PerArch, HfFp8IsWithinE4m3Rounding) {
  TempDir dir;
  const Arch arch = GetParam();
  gen(arch, OutFormat::kHf, DType::kBF16, dir / "bf16");
  gen(arch, OutFormat::kHf, DType::kF8E4M3, dir / "fp8");
  auto ref = ModelSource::open(dir / "bf16");
  auto q = ModelSource::open(dir / "fp8");
  ASSERT_TRUE(q->config().fp8_block.has_value());
  EXPECT_EQ(*q->config().fp8_block, (std::pair<uint32_t, uint32_t>{128, 128}));
  int fp8 = 0;
  for (const MappedTensor& t : ref->tensors().tensors()) {
    const MappedTensor& u = q->tensors().at(t.name);
    std::vector<float> a = read_f32(u), b = read_f32(t);
    if (u.dtype != DType::kF8E4M3) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << t.name;
      continue;
    }
    ++fp8;
    // Every block's scale is at most the tensor's amax / 448.
    float amax = 0;
    for (float x : b) amax = std::max(amax, std::fabs(x));
    const double scale = amax / 448.0;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_LE(std::fabs(double(a[i]) - b[i]), std::ldexp(std::fabs(b[i]), -4) + std::ldexp(scale, -9))
          << t.name << "[" << i << "]";
    EXPECT_LT(rel_rms(a, b), 0.04) << t.name;
  }
  EXPECT_GT(fp8, 0);
}

INSTANTIATE_TEST_SUITE_P(GenModel, PerArch, ::testing::ValuesIn(kArchs), arch_name);

TEST(GenModel, ShardedHfEqualsSingleFile) {
  TempDir dir;
  gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "one");
  GenResult r = gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "sharded", 7, 256 << 10);
  EXPECT_FALSE(fs::exists(dir / "sharded/model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "sharded/model.safetensors.index.json"));
  auto index = nlohmann::json::parse(read_bytes(dir / "sharded/model.safetensors.index.json"));
  auto a = ModelSource::open(dir / "one");
  auto b = ModelSource::open(dir / "sharded");
  EXPECT_GT(b->safetensors()->files().size(), 3u);
  EXPECT_EQ(index["weight_map"].size(), a->safetensors()->tensors().size());
  uint64_t total = 0;
  for (auto& f : b->safetensors()->files()) {
    uint64_t in_file = 0;
    for (auto& t : f->tensors()) in_file += t.data.size();
    total += in_file;
    if (f->tensors().size() > 1) {
      EXPECT_LE(in_file, 256u << 10) << f->path();
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(total, r.tensor_bytes);
  testing::expect_same_config(a->config(), b->config());
  for (const MappedTensor& t : a->tensors().tensors()) {
    std::vector<float> x = read_f32(t), y = read_f32(b->tensors().at(t.name));
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << t.name;
  }
  // Writing the single-file layout over the sharded directory leaves no shards.
  gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "sharded");
  EXPECT_FALSE(fs::exists(dir / "sharded/model.safetensors.index.json"));
  EXPECT_EQ(ModelSource::open(dir / "sharded")->safetensors()->files().size(), 1u);
}

TEST(GenModel, SameSeedSameBytesOtherSeedOtherWeights) {
  TempDir dir;
  gen(Arch::kQwen2Moe, OutFormat::kGguf, DType::kQ4_K, dir / "a.gguf", 1);
  gen(Arch::kQwen2Moe, OutFormat::kGguf, DType::kQ4_K, dir / "b.gguf", 1);
  gen(Arch::kQwen2Moe, OutFormat::kGguf, DType::kQ4_K, dir / "c.gguf", 2);
  EXPECT_EQ(read_bytes(dir / "a.gguf"), read_bytes(dir / "b.gguf"));
  gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "ha", 1, 300 << 10);
  gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "hb", 1, 300 << 10);
  for (auto& e : fs::directory_iterator(dir / "ha"))
    EXPECT_EQ(read_bytes(e.path().string()),
              read_bytes(dir / ("hb/" + e.path().filename().string())))
        << e.path();
  auto a = ModelSource::open(dir / "a.gguf");
  auto c = ModelSource::open(dir / "c.gguf");
  for (const MappedTensor& t : a->tensors().tensors()) {
    std::vector<float> x = read_f32(t), y = read_f32(c->tensors().at(t.name));
    size_t same = 0;
    for (size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
    // Norm weights are bf16 values near 1, so some coincide; nothing else should.
    EXPECT_LT(same, x.size() / 2 + 1) << t.name;
  }
}

TEST(GenModel, GgufLayoutFollowsLlamaCpp) {
  TempDir dir;
  gen(Arch::kDeepseekV3, OutFormat::kGguf, DType::kQ4_K, dir / "ds.gguf", 3, 0, "default");
  GgufFile f = GgufFile::open(dir / "ds.gguf");
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek2");
  EXPECT_EQ(f.get_uint("deepseek2.attention.head_count_kv"), 1u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.key_length"), 160u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.value_length"), 128u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.key_length_mla"), 64u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.value_length_mla"), 32u);
  EXPECT_EQ(f.get_uint("deepseek2.expert_gating_func"), 2u);
  EXPECT_EQ(f.get_uint("general.quantization_version"), 2u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens")->items.size(), natural_vocab_size());
  EXPECT_FALSE(f.get_string("tokenizer.chat_template").value_or("").empty());
  auto type_of = [&](const std::string& n) { return f.find_tensor(n)->dtype; };
  auto ne_of = [&](const std::string& n) { return f.find_tensor(n)->ne; };
  EXPECT_EQ(type_of("blk.1.ffn_gate_exps.weight"), DType::kQ4_K);
  EXPECT_EQ(ne_of("blk.1.ffn_gate_exps.weight"), (std::vector<uint64_t>{256, 256, 16}));
  EXPECT_EQ(type_of("blk.1.attn_output.weight"), DType::kQ5_0);  // rows of 128: fallback
  EXPECT_EQ(type_of("blk.1.attn_k_b.weight"), DType::kQ5_0);
  EXPECT_EQ(ne_of("blk.1.attn_k_b.weight"), (std::vector<uint64_t>{32, 128, 4}));
  EXPECT_EQ(ne_of("blk.1.attn_v_b.weight"), (std::vector<uint64_t>{128, 32, 4}));
  EXPECT_EQ(type_of("blk.1.ffn_gate_inp.weight"), DType::kF32);
  EXPECT_EQ(type_of("blk.1.exp_probs_b.bias"), DType::kF32);
  EXPECT_EQ(type_of("blk.1.attn_kv_a_norm.weight"), DType::kF32);
  EXPECT_EQ(f.tensors().back().name, "blk.2.exp_probs_b.bias");
  EXPECT_EQ(f.tensors().front().name, "token_embd.weight");

  gen(Arch::kMixtral, OutFormat::kGguf, DType::kF32, dir / "mx.gguf");
  GgufFile m = GgufFile::open(dir / "mx.gguf");
  EXPECT_EQ(m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_uint("llama.expert_count"), 4u);
  // q rows are permuted: GGUF row 1 is HF row hd/2 of head 0.
  const ModelConfig mc = preset_config(Arch::kMixtral, "tiny");
  const GgufTensor* q = m.find_tensor("blk.0.attn_q.weight");
  TensorSpec qs{"blk.0.attn_q.weight", {uint64_t(mc.n_heads) * mc.head_dim, mc.hidden}, 0};
  float stored;
  std::memcpy(&stored, q->data.data() + 1 * mc.hidden * 4, 4);
  EXPECT_EQ(stored, canonical_value(7, qs, uint64_t(mc.head_dim / 2) * mc.hidden));

  gen(Arch::kQwen2Moe, OutFormat::kGguf, DType::kF32, dir / "q2.gguf");
  GgufFile q2 = GgufFile::open(dir / "q2.gguf");
  EXPECT_EQ(q2.find_tensor("blk.0.ffn_gate_inp_shexp.weight")->ne, (std::vector<uint64_t>{256}));
}

TEST(GenModel, HfFilesLookLikeRealCheckpoints) {
  TempDir dir;
  gen(Arch::kDeepseekV3, OutFormat::kHf, DType::kF8E4M3, dir / "ds");
  auto cfg = nlohmann::json::parse(read_bytes(dir / "ds/config.json"));
  EXPECT_EQ(cfg["model_type"], "deepseek_v3");
  EXPECT_EQ(cfg["topk_method"], "noaux_tc");
  EXPECT_EQ(cfg["rope_scaling"]["type"], "yarn");
  EXPECT_EQ(cfg["quantization_config"]["weight_block_size"], nlohmann::json({128, 128}));
  EXPECT_EQ(cfg["rms_norm_eps"].dump(), "1e-06");
  auto tok = nlohmann::json::parse(read_bytes(dir / "ds/tokenizer.json"));
  EXPECT_EQ(tok["model"]["vocab"].size() + tok["added_tokens"].size(), natural_vocab_size());
  EXPECT_TRUE(fs::exists(dir / "ds/generation_config.json"));
  EXPECT_TRUE(fs::exists(dir / "ds/tokenizer_config.json"));
  auto st = SafetensorsModel::open_dir(dir / "ds");
  const SafetensorsTensor* kv = st.find("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->dtype, DType::kF8E4M3);
  // 160 rows: a partial edge block.
  EXPECT_EQ(st.find("model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv")->shape,
            (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(st.find("model.layers.1.mlp.gate.weight")->dtype, DType::kBF16);
  EXPECT_EQ(st.find("model.layers.1.mlp.gate.e_score_correction_bias")->dtype, DType::kF32);
  EXPECT_EQ(st.find("model.embed_tokens.weight")->dtype, DType::kBF16);
  EXPECT_EQ(st.find("model.layers.0.input_layernorm.weight")->dtype, DType::kBF16);
  EXPECT_EQ(st.find("model.layers.1.mlp.experts.7.down_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(st.find("model.layers.1.mlp.shared_experts.up_proj.weight")->dtype, DType::kF8E4M3);
}

TEST(GenModel, Tokenizer) {
  Tokenizer t = make_tokenizer(0);
  EXPECT_EQ(t.tokens.size(), natural_vocab_size());
  EXPECT_EQ(t.tokens[' '], "Ġ");
  EXPECT_EQ(t.tokens['A'], "A");
  EXPECT_EQ(t.tokens[0], "Ā");
  EXPECT_EQ(t.tokens[t.eos_id], "<|im_end|>");
  EXPECT_EQ(t.tokens[t.pad_id], "<|endoftext|>");
  Tokenizer small = make_tokenizer(300);
  EXPECT_EQ(small.tokens.size(), 300u);
  EXPECT_EQ(small.tokens.back(), "<|im_end|>");
  EXPECT_THROW(make_tokenizer(258), Error);

  // A larger vocabulary pads the GGUF token list.
  TempDir dir;
  GenOptions o;
  o.config = preset_config(Arch::kQwen3Moe, "tiny");
  o.config.vocab_size = 512;
  o.progress = false;
  generate(o, dir / "v.gguf");
  auto src = ModelSource::open(dir / "v.gguf");
  EXPECT_EQ(src->config().vocab_size, 512u);
  auto* toks = src->gguf()->get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(toks->items.size(), 512u);
  EXPECT_EQ(std::get<std::string>(toks->items[511].value), "[PAD511]");
}

TEST(GenModel, RejectsBadOptions) {
  TempDir dir;
  EXPECT_THROW(preset_config(Arch::kMixtral, "qwen3-30b-a3b-shapes"), Error);
  EXPECT_THROW(preset_config(Arch::kMixtral, "nope"), Error);
  EXPECT_THROW(gen(Arch::kQwen3Moe, OutFormat::kGguf, DType::kF8E4M3, dir / "x.gguf"), Error);
  EXPECT_THROW(gen(Arch::kQwen3Moe, OutFormat::kHf, DType::kQ4_K, dir / "x"), Error);
  GenOptions o;
  o.config = preset_config(Arch::kQwen3Moe, "tiny");
  o.config.moe.n_experts_used = 9;
  EXPECT_THROW(generate(o, dir / "y.gguf"), Error);
  EXPECT_EQ(preset_arch("deepseek-v3-shapes"), Arch::kDeepseekV3);
  ModelConfig big = preset_config(Arch::kQwen3Moe, "qwen3-30b-a3b-shapes");
  EXPECT_EQ(big.vocab_size, 151936u);
  EXPECT_EQ(big.moe.n_experts, 128u);
}

}  // namespace
}  // namespace tandem::genmodel
