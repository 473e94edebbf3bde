// The engine against an independent plain scalar reference
// (tests/reference_forward.h) on generated "tiny" models, prompt kPrompt:
//   ArchF32:    every architecture in F32 GGUF. F32 weights multiply f32
//               activations, so what remains is llama.cpp's fp16 attention.
//   WeightType: every weight type, engine and reference on the SAME file, so
//               the weights' quantisation cancels and only the engine's
//               activation rounding (the weight type's dot format) remains.
// Every bound is ~2x the largest difference measured (numbers below, and
// printed by each test), per activation format.
//
// Both also check the greedy token wherever the reference's top1-top2 margin
// exceeds the max-abs bound: bounds are ~2x the measured error, so two logits
// cannot together move by that much. WeightType checks that it cannot pass
// vacuously: a quantised file's reference must move away from the F32 file's
// (by a plausible amount), and the engine must track the file's own
// (quantised) weights rather than the unquantised ones.
//
// Routing near-ties: two correct implementations may pick different experts
// when two selection scores are closer than their rounding differences; that
// token's output then differs by a whole expert. A position that breaks the
// bound while its reference routing margin (any layer) is under kRouteTie is
// excused with a printed note; excused positions must stay a small minority.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/engine/model.h"
#include "kernels/cpu/cpu_isa.h"
#include "common/model/model_source.h"
#include "tests/reference_forward.h"
#include "tools/gen_model/gen_model.h"

namespace tandem {
namespace {

using genmodel::OutFormat;

// The engine's router scores deviate from the reference's by up to ~1.3e-2
// with Q8_0/Q8_K activations (measured as the change of the decision margin,
// Model::route_margins vs ours), ~5e-4 with f32 ones; a decision closer than
// this may legitimately flip. Only positions that break the bound use it.
constexpr double kRouteTie = 3e-2;
// Near-ties are rare (none excused in these prompts when written); more than
// a quarter of the prompt's positions excused would point at a broken router.
constexpr size_t kMaxExcusedPerPrompt = 3;

// ~12 tokens spread over the tiny vocabulary (bytes, merges, specials).
const std::vector<uint32_t> kPrompt = {5, 17, 42, 99, 3, 250, 7, 11, 64, 128, 200, 31};

struct Bound {
  double max_abs;  // over every compared logit
  double rel_rms;  // rms(engine - reference) / rms(reference)
};

// Bounds by the engine's activation format, ~2x the worst measured value
// (max abs / rel rms over the models tested with that format):
// f32 activations (GGUF F32; every HF source) and GGUF F16's fp16 ones: only
// fp16 attention and fp16 activation rounding (2^-11): measured 4.8e-3 / 9.6e-4.
constexpr Bound kF32Act{1e-2, 2e-3};
// bf16 activations (8-bit mantissa): measured 2.2e-2 / 5.0e-3.
constexpr Bound kBf16Act{5e-2, 1e-2};
// Q8_0 per 32 values (q8_0, q4_0, q5_0): measured 0.132 / 0.025. The same
// size as quantising the weights to Q8_0 (0.068 / 0.018 on qwen3_moe).
constexpr Bound kQ8_0Act{0.25, 0.05};
// Q8_K per 256 values (q4_k, q5_k, q6_k): coarser blocks, measured 0.147 / 0.030.
constexpr Bound kQ8_KAct{0.3, 0.06};

// Quantised weights move the reference's logits from the F32 file's by rel
// rms 0.018 (q8_0) to 0.34 (4-bit); a decoder that misplaces values or drops
// scales decorrelates them (rel rms ~1 or more). This catches a decoding bug
// shared by the engine and read_f32 (the HF/FP8 path decodes with read_f32's
// code, so there engine-vs-reference agreement alone would not).
constexpr double kQuantEffectMax = 0.7;

struct ModelKey {
  std::string arch;
  OutFormat format;
  DType dtype;
  std::string name() const {
    return arch + (format == OutFormat::kHf ? "_hf_" : "_gguf_") + std::string(tandem::name(dtype));
  }
};

// Every model this process generated; removed when the tests end.
std::map<std::string, std::string>& generated() {
  static std::map<std::string, std::string> made;
  return made;
}

class RemoveGeneratedModels : public ::testing::Environment {
 public:
  void TearDown() override {
    for (auto& [key, path] : generated()) std::filesystem::remove_all(path);
    generated().clear();
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new RemoveGeneratedModels);

// Generates each model once per process. The name carries the process id:
// ctest runs every test case as its own process, possibly in parallel, and
// they must not rewrite or remove each other's files.
std::string model_path(const ModelKey& k) {
  const std::string key = k.name();
  if (auto it = generated().find(key); it != generated().end()) return it->second;
  std::string path = fmt::format("{}/engine_ref_{}_{}{}", ::testing::TempDir(), getpid(), key,
                                 k.format == OutFormat::kGguf ? ".gguf" : "");
  genmodel::GenOptions o;
  o.config = genmodel::preset_config(genmodel::arch_from_name(k.arch), "tiny");
  o.format = k.format;
  o.dtype = k.dtype;
  o.progress = false;
  genmodel::generate(o, path);
  return generated()[key] = path;
}

struct Outputs {
  std::vector<float> engine;
  reference::ForwardResult ref;
  size_t vocab = 0;
};

// The engine's and the reference's logits of kPrompt, once per model.
const Outputs& outputs(const ModelKey& k) {
  static std::map<std::string, Outputs> done;
  if (auto it = done.find(k.name()); it != done.end()) return it->second;
  auto src = ModelSource::open(model_path(k));
  Outputs o;
  o.vocab = src->config().vocab_size;
  engine::Model model(*src, kernels::choose_isa_from_environment());
  auto cache = model.new_cache(int64_t(kPrompt.size()));
  o.engine = model.forward(kPrompt, cache);
  o.ref = reference::ReferenceModel(*src).forward(kPrompt);
  EXPECT_EQ(o.engine.size(), kPrompt.size() * o.vocab) << k.name();
  EXPECT_EQ(o.ref.logits.size(), kPrompt.size() * o.vocab) << k.name();
  return done[k.name()] = std::move(o);
}

template <typename T>
size_t argmax(const T* v, size_t n) { return size_t(std::max_element(v, v + n) - v); }

// Reference top1 - top2 at one position.
double top_margin(const double* r, size_t n) {
  std::vector<double> v(r, r + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

struct Diff {
  double max_abs = 0;
  double rel_rms = 0;
};

// a vs b over the positions not in `skip`.
template <typename A>
Diff compare(const std::vector<A>& a, const std::vector<double>& b, size_t vocab,
             const std::vector<size_t>& skip = {}) {
  Diff d;
  double sq = 0, ref_sq = 0;
  for (size_t t = 0; t < kPrompt.size(); ++t) {
    if (std::find(skip.begin(), skip.end(), t) != skip.end()) continue;
    for (size_t i = t * vocab; i < (t + 1) * vocab; ++i) {
      const double e = double(a[i]) - b[i];
      d.max_abs = std::max(d.max_abs, std::fabs(e));
      sq += e * e;
      ref_sq += b[i] * b[i];
    }
  }
  d.rel_rms = ref_sq > 0 ? std::sqrt(sq / ref_sq) : 0.0;
  return d;
}

struct Checked {
  Diff diff;
  std::vector<size_t> excused;
};

// The engine against the reference on one model, with near-tie excusal.
Checked check_against_reference(const ModelKey& k, const Bound& bound) {
  const Outputs& o = outputs(k);
  const size_t V = o.vocab, n = kPrompt.size();
  Checked c;
  size_t greedy_checked = 0;
  for (size_t t = 0; t < n; ++t) {
    const float* e = o.engine.data() + t * V;
    const double* r = o.ref.logits.data() + t * V;
    double worst = 0;
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(e[i]) - r[i]));
    const bool decided = top_margin(r, V) > bound.max_abs;
    const bool ok = worst < bound.max_abs && (!decided || argmax(e, V) == argmax(r, V));
    if (!ok && o.ref.route_margins[t] < kRouteTie) {
      std::printf("  note [%s]: position %zu excused: max abs %.3g with routing margin %.3g < %.0e\n",
                  k.name().c_str(), t, worst, o.ref.route_margins[t], kRouteTie);
      c.excused.push_back(t);
      continue;
    }
    if (decided) {
      ++greedy_checked;
      EXPECT_EQ(argmax(e, V), argmax(r, V)) << k.name() << " position " << t;
    }
  }
  c.diff = compare(o.engine, o.ref.logits, V, c.excused);
  double min_margin = *std::min_element(o.ref.route_margins.begin(), o.ref.route_margins.end());
  std::printf("[%s] engine vs reference: max abs %.3g (bound %.3g), rel rms %.3g (bound %.3g); "
              "greedy checked at %zu/%zu positions; min routing margin %.3g; %zu excused\n",
              k.name().c_str(), c.diff.max_abs, bound.max_abs, c.diff.rel_rms, bound.rel_rms,
              greedy_checked, n, min_margin, c.excused.size());
  EXPECT_LT(c.diff.max_abs, bound.max_abs) << k.name();
  EXPECT_LT(c.diff.rel_rms, bound.rel_rms) << k.name();
  EXPECT_LE(c.excused.size(), kMaxExcusedPerPrompt) << k.name() << ": too many near-tie positions";
  return c;
}

// ---- every architecture, F32 ------------------------------------------------
// Measured max abs / rel rms: qwen3_moe 3.2e-3 / 7.5e-4, qwen2_moe 3.6e-3 /
// 7.4e-4, mixtral 3.0e-3 / 7.2e-4, deepseek_v3 3.6e-3 / 8.5e-4, deepseek_v2
// 4.8e-3 / 8.5e-4.

class ArchF32 : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchF32, EngineMatchesReference) {
  check_against_reference({GetParam(), OutFormat::kGguf, DType::kF32}, kF32Act);
}

INSTANTIATE_TEST_SUITE_P(AllArchs, ArchF32,
                         ::testing::Values("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "deepseek_v2"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// ---- every weight type -----------------------------------------------------

struct TypeCase {
  ModelKey key;
  Bound bound;
};

std::ostream& operator<<(std::ostream& os, const TypeCase& c) { return os << c.key.name(); }

class WeightType : public ::testing::TestWithParam<TypeCase> {};

TEST_P(WeightType, EngineMatchesReferenceOnSameFile) {
  const TypeCase& c = GetParam();
  Checked d = check_against_reference(c.key, c.bound);
  // The generator's weights are bf16 values, so F32, F16 and BF16 files hold
  // the same numbers: their references must equal the F32 file's (F16 up to
  // its subnormals), and only the quantised types may move it.
  const Outputs &o = outputs(c.key), &f32 = outputs({c.key.arch, OutFormat::kGguf, DType::kF32});
  const Diff q = compare(o.ref.logits, f32.ref.logits, o.vocab);
  std::printf("[%s] reference vs the F32 file's reference (weight quantisation): max abs %.3g, rel rms %.3g\n",
              c.key.name().c_str(), q.max_abs, q.rel_rms);
  const bool quantised = !info(c.key.dtype).is_float || c.key.dtype == DType::kF8E4M3;
  if (!quantised) {
    constexpr double kSameWeights = 1e-6;  // f16 subnormals moved logits by 9e-8
    EXPECT_LT(q.max_abs, kSameWeights) << c.key.name();
    return;
  }
  EXPECT_GT(q.max_abs, 0.0) << c.key.name() << ": quantised weights equal the F32 ones";
  EXPECT_LT(q.rel_rms, kQuantEffectMax) << c.key.name() << ": implausible dequantisation";
  // The engine follows this file's weights, not the unquantised ones: it is
  // closer to this file's reference than to the F32 file's. (Measured ratio
  // of the two rel rms: 1.4-1.6 for q8_0, >= 3 for the other types.)
  const Diff x = compare(o.engine, f32.ref.logits, o.vocab, d.excused);
  std::printf("[%s] engine vs the F32 file's reference: rel rms %.3g (%.3gx engine vs reference)\n",
              c.key.name().c_str(), x.rel_rms, x.rel_rms / d.diff.rel_rms);
  EXPECT_GT(x.rel_rms, d.diff.rel_rms) << c.key.name();
  // Weights coarser than the activation format move the logits by more than
  // the engine's activation rounding does. Not Q8_0: its weights and its
  // activations round alike, so both effects are the same size.
  if (c.key.dtype != DType::kQ8_0) {
    EXPECT_GT(q.max_abs, d.diff.max_abs) << c.key.name();
  }
}

std::string case_name(const ::testing::TestParamInfo<TypeCase>& info) { return info.param.key.name(); }

// Measured engine vs reference, max abs / rel rms:
//   qwen3_moe GGUF f32 3.2e-3 / 7.5e-4, f16 4.1e-3 / 9.6e-4, bf16 2.2e-2 / 5.0e-3,
//   q8_0 0.070 / 0.017, q4_0 0.115 / 0.017, q5_0 0.077 / 0.017,
//   q4_k 0.118 / 0.024, q5_k 0.089 / 0.022, q6_k 0.089 / 0.022,
//   HF bf16 3.2e-3 / 7.5e-4, HF f8_e4m3 3.6e-3 / 7.6e-4;
//   deepseek_v3 GGUF q8_0 0.132 / 0.025, q4_k 0.147 / 0.030,
//   HF bf16 3.6e-3 / 8.5e-4, HF f8_e4m3 4.2e-3 / 8.6e-4.
// HF sources compute with f32 activations (the engine's choice for them).
INSTANTIATE_TEST_SUITE_P(
    AllTypes, WeightType,
    ::testing::Values(TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kF32}, kF32Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kF16}, kF32Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kBF16}, kBf16Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ8_0}, kQ8_0Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ4_0}, kQ8_0Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ5_0}, kQ8_0Act},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ4_K}, kQ8_KAct},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ5_K}, kQ8_KAct},
                      TypeCase{{"qwen3_moe", OutFormat::kGguf, DType::kQ6_K}, kQ8_KAct},
                      TypeCase{{"qwen3_moe", OutFormat::kHf, DType::kBF16}, kF32Act},
                      TypeCase{{"qwen3_moe", OutFormat::kHf, DType::kF8E4M3}, kF32Act},
                      TypeCase{{"deepseek_v3", OutFormat::kGguf, DType::kQ8_0}, kQ8_0Act},
                      TypeCase{{"deepseek_v3", OutFormat::kGguf, DType::kQ4_K}, kQ8_KAct},
                      TypeCase{{"deepseek_v3", OutFormat::kHf, DType::kBF16}, kF32Act},
                      TypeCase{{"deepseek_v3", OutFormat::kHf, DType::kF8E4M3}, kF32Act}),
    case_name);

}  // namespace
}  // namespace tandem
