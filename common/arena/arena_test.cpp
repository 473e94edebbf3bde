// The arena against the engine's own view of the same model: every dense
// tensor byte-identical, every expert slice equal to its rows or columns of
// the full expert matrix, each expert byte present exactly once, slices bound
// to their workers' nodes; identity-based adoption; corrupt arenas refused.
#include "common/arena/arena.h"

#include <numaif.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <random>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "common/arena/arena_format.h"
#include "common/arena/arena_plan.h"
#include "common/engine/weights.h"
#include "common/error.h"
#include "common/model/model_source.h"
#include "common/shm/numa.h"
#include "common/shm/run_dir.h"
#include "kernels/cpu/dequant.h"
#include "kernels/cpu/fp8_marks.h"
#include "kernels/cpu/weight_layout.h"
#include "proto/manifest.capnp.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::arena {
namespace {
namespace fs = std::filesystem;

class ArenaTest : public ::testing::Test {
 protected:
  // The real base (/dev/shm): shared memory policies and PSS only mean
  // something on a memory file system.
  void SetUp() override { run_ = RunDirectory::create(); }
  void TearDown() override { run_.remove(); }
  // Generates a tiny model of arch in dtype (GGUF, or HF for FP8/BF16 HF);
  // expert_ffn and hidden 0: the preset's.
  std::string make_model(Arch arch, DType dtype, genmodel::OutFormat format, const std::string& tag,
                         uint32_t expert_ffn = 0, uint32_t hidden = 0) {
    genmodel::GenOptions o;
    o.config = genmodel::preset_config(arch, "tiny");
    if (expert_ffn) o.config.moe.expert_ffn = expert_ffn;
    if (hidden) o.config.hidden = hidden;
    o.dtype = dtype;
    o.format = format;
    o.progress = false;
    std::string path = run_.file(tag + (format == genmodel::OutFormat::kGguf ? ".gguf" : ""));
    genmodel::generate(o, path);
    return path;
  }
  RunDirectory run_;
};

std::span<const std::byte> row_of(const MatrixView& m, int64_t r) {
  return {m.data + size_t(r) * m.row_stride, *bytes_for(m.dtype, uint64_t(m.cols))};
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// A worker's slice of FP8 experts (arena_plan.h): F ranges start at whole
// 128-blocks; every weight times its block's scale (from the .scale
// placement) is the engine's f32 value, and the marks are fp8_mark_blocks's.
void expect_fp8_slice_matches(const Arena& a, const ArenaTensor& s, const Weight& ref, bool down, int worker) {
  EXPECT_TRUE(s.slice_begin % 128 == 0 || s.slice_begin == s.slice_end) << s.slice_begin;
  const ArenaTensor& sc = a.at(fp8_scales_name(s.name), worker);
  const ArenaTensor& mk = a.at(fp8_marks_name(s.name), worker);
  const uint64_t rows = s.shape[1], cols = s.shape[2], rb = (rows + 127) / 128, cb = (cols + 127) / 128;
  ASSERT_EQ(sc.shape, (std::vector<uint64_t>{s.shape[0], rb, cb}));
  const size_t mrow = kernels::fp8_marks_row_bytes(int64_t(cols));
  ASSERT_EQ(mk.shape, (std::vector<uint64_t>{s.shape[0], rows, mrow}));
  const auto* w = reinterpret_cast<const uint8_t*>(s.bytes.data());
  const auto* scales = reinterpret_cast<const float*>(sc.bytes.data());
  std::vector<float> row(cols);
  std::vector<uint8_t> marks(rows * mrow);
  for (uint64_t e = 0; e < s.shape[0]; ++e) {
    const MatrixView& mv = ref.matrix(e);
    ASSERT_EQ(mv.dtype, DType::kF32);
    for (uint64_t r = 0; r < rows; ++r) {
      kernels::dequantize_generic(DType::kF8E4M3, w + (e * rows + r) * cols, row.data(), cols);
      const float* want = reinterpret_cast<const float*>(mv.data + (down ? r : s.slice_begin + r) * mv.row_stride) +
                          (down ? s.slice_begin : 0);
      for (uint64_t c = 0; c < cols; ++c)
        ASSERT_EQ(row[c] * scales[(e * rb + r / 128) * cb + c / 128], want[c])
            << "expert " << e << " row " << r << " col " << c;
    }
    kernels::fp8_mark_blocks(w + e * rows * cols, cols, int64_t(rows), int64_t(cols), marks.data());
    EXPECT_EQ(std::memcmp(marks.data(), mk.bytes.data() + e * rows * mrow, marks.size()), 0) << "expert " << e;
  }
}

// Checks every tensor of `a` against the engine's prepared weights of src.
void expect_matches_engine(const Arena& a, const ModelSource& src) {
  ModelWeights w = ModelWeights::prepare(src);
  const size_t workers = a.worker_nodes().size();
  for (const MappedTensor& t : src.tensors().tensors()) {
    SCOPED_TRACE(t.name);
    const Weight& ref = w.at(t.name);
    if (!is_routed_expert(t.name)) {
      const ArenaTensor& got = a.at(t.name);
      EXPECT_EQ(got.shape, t.shape);
      if (t.shape.size() == 1) {
        ASSERT_EQ(got.dtype, DType::kF32);
        auto v = ref.values();
        EXPECT_TRUE(same(got.bytes, std::as_bytes(v)));
        continue;
      }
      const std::byte* at = got.bytes.data();
      for (size_t m = 0; m < ref.matrix_count(); ++m) {
        const MatrixView& mv = ref.matrix(m);
        ASSERT_EQ(got.dtype, mv.dtype);
        for (int64_t r = 0; r < mv.rows; ++r) {
          auto want = row_of(mv, r);
          ASSERT_TRUE(same({at, want.size()}, want)) << "matrix " << m << " row " << r;
          at += want.size();
        }
      }
      EXPECT_EQ(at, got.bytes.data() + got.bytes.size());
      continue;
    }
    const bool down = t.name.find("down") != std::string::npos;
    uint64_t covered = 0;
    for (size_t wk = 0; wk < workers; ++wk) {
      const ArenaTensor& s = a.at(t.name, int(wk));
      EXPECT_EQ(s.node, a.worker_nodes()[wk]);
      const uint64_t n = s.slice_end - s.slice_begin;
      EXPECT_EQ(s.slice_begin, covered) << "slices must tile F in order";
      covered = s.slice_end;
      if (s.dtype == DType::kF8E4M3) {
        expect_fp8_slice_matches(a, s, ref, down, int(wk));
        continue;
      }
      for (size_t e = 0; e < ref.matrix_count(); ++e) {
        const MatrixView& mv = ref.matrix(e);
        ASSERT_EQ(s.dtype, mv.dtype);
        if (!down) {  // rows [f0, f1) of gate/up
          const size_t rb = row_of(mv, 0).size();
          for (uint64_t f = 0; f < n; ++f)
            ASSERT_TRUE(same(s.bytes.subspan((e * n + f) * rb, rb), row_of(mv, int64_t(s.slice_begin + f))))
                << "expert " << e << " row " << s.slice_begin + f;
        } else {  // columns [f0, f1) of down
          const auto& bi = info(mv.dtype);
          const size_t b0 = s.slice_begin / bi.block_elems * bi.block_bytes;
          const size_t nb = n / bi.block_elems * bi.block_bytes;
          for (int64_t h = 0; h < mv.rows; ++h)
            ASSERT_TRUE(same(s.bytes.subspan((e * uint64_t(mv.rows) + uint64_t(h)) * nb, nb),
                             row_of(mv, h).subspan(b0, nb)))
                << "expert " << e << " row " << h;
        }
      }
    }
    EXPECT_EQ(covered, down ? t.shape[2] : t.shape[1]) << "F not fully covered";
  }
}

TEST_F(ArenaTest, MatchesTheEngineWeightsForEveryTypeAndSplit) {
  struct Case {
    Arch arch;
    DType dtype;
    genmodel::OutFormat format;
    std::vector<int> nodes;
    uint32_t expert_ffn = 0;  // 0: the preset's
  };
  const Case cases[] = {
      {Arch::kDeepseekV3, DType::kQ4_K, genmodel::OutFormat::kGguf, {0, 0}},
      {Arch::kDeepseekV3, DType::kF8E4M3, genmodel::OutFormat::kHf, {0, 0, 0}},
      // FP8 slices of F = 320: 128, 128 and a partial 64-block, then an empty one
      {Arch::kDeepseekV3, DType::kF8E4M3, genmodel::OutFormat::kHf, {0, 0, 0, 0}, 320},
      {Arch::kQwen3Moe, DType::kQ8_0, genmodel::OutFormat::kGguf, {0}},
      {Arch::kMixtral, DType::kQ6_K, genmodel::OutFormat::kGguf, {0, 0}},
      {Arch::kQwen2Moe, DType::kBF16, genmodel::OutFormat::kHf, {0, 0}},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {} {} workers", to_string(c.arch), name(c.dtype), c.nodes.size()));
    std::string model = make_model(c.arch, c.dtype, c.format, "m" + std::to_string(i), c.expert_ffn);
    auto src = ModelSource::open(model);
    BuildOptions o;
    o.worker_nodes = c.nodes;
    std::string path = run_.file("arena" + std::to_string(i++));
    BuildStats stats = Arena::build(path, *src, o);
    EXPECT_TRUE(stats.built);
    Arena a = Arena::open(path);
    EXPECT_EQ(a.worker_nodes(), c.nodes);
    EXPECT_EQ(a.source_is_hf(), c.format == genmodel::OutFormat::kHf);
    expect_matches_engine(a, *src);
    // FP8 experts stay FP8, each slice with its scales and marks (the other
    // types have none)
    int fp8_slices = 0, extras = 0;
    for (const ArenaTensor& t : a.tensors()) {
      fp8_slices += t.worker >= 0 && t.dtype == DType::kF8E4M3;
      extras += t.name.ends_with(".scale") || t.name.ends_with(".marks");
    }
    EXPECT_EQ(fp8_slices > 0, c.dtype == DType::kF8E4M3);
    EXPECT_EQ(extras, 2 * fp8_slices);
  }
}

// With repack_for at avx512bf16, routed Q4_K and Q8_0 slices are stored repacked
// (q4_k_x4, q8_0_x4): the manifest says so, and each slice is exactly the
// rowmajor slice repacked; every other tensor is unchanged, and the plan (so
// the adoption check) differs.
// Arena b, built with repack_for, against a, built plain, tensor by tensor:
// a's are rowmajor, and each of b's is a's bytes repacked into
// `layout_of(b's tensor)` (rowmajor: as they are). Returns how many were
// repacked.
int expect_repacked(const Arena& a, const Arena& b,
                    const std::function<kernels::WeightLayout(const ArenaTensor&)>& layout_of) {
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  int repacked = 0;
  for (size_t i = 0; i < a.tensors().size() && i < b.tensors().size(); ++i) {
    const ArenaTensor &p = a.tensors()[i], &q = b.tensors()[i];
    SCOPED_TRACE(q.name + " worker " + std::to_string(q.worker));
    EXPECT_EQ(p.name, q.name);
    EXPECT_EQ(p.layout, "rowmajor");
    std::vector<uint8_t> want(reinterpret_cast<const uint8_t*>(p.bytes.data()),
                              reinterpret_cast<const uint8_t*>(p.bytes.data()) + p.bytes.size());
    const kernels::WeightLayout l = layout_of(q);
    EXPECT_EQ(q.layout, kernels::layout_name(l));
    if (l != kernels::WeightLayout::kRowMajor) {  // each expert's matrix alone (bf16_x16z codes one whole)
      const size_t matrix = want.size() / q.shape[0];
      for (uint64_t e = 0; e < q.shape[0]; ++e)
        kernels::repack_rows(l, q.dtype, want.data() + e * matrix, int64_t(q.shape[1]), int64_t(q.shape[2]));
      ++repacked;
    }
    EXPECT_EQ(q.bytes.size(), want.size());
    if (q.bytes.size() == want.size()) {
      EXPECT_EQ(std::memcmp(q.bytes.data(), want.data(), want.size()), 0);
    }
  }
  return repacked;
}

// Q4_K and Q8_0 expert slices take the x4 layouts at avx512, and Q8_0 takes
// q8_0_x16 at avx512bf16 (kernels::expert_matrix_layout).
TEST_F(ArenaTest, QuantisedExpertSlicesAreRepackedWhenAsked) {
  for (DType dtype : {DType::kQ4_K, DType::kQ8_0}) {
    const std::string tag(name(dtype));
    auto src = ModelSource::open(make_model(Arch::kQwen3Moe, dtype, genmodel::OutFormat::kGguf, tag));
    BuildOptions plain;
    plain.worker_nodes = {0, 0};
    Arena::build(run_.file(tag + "-plain"), *src, plain);
    Arena a = Arena::open(run_.file(tag + "-plain"));
    for (kernels::CpuIsa isa : {kernels::CpuIsa::kAvx512, kernels::CpuIsa::kAvx512Bf16}) {
      SCOPED_TRACE(std::string(name(dtype)) + " for " + std::string(kernels::isa_name(isa)));
      const std::string file = tag + "-" + std::string(kernels::isa_name(isa));
      BuildOptions rp = plain;
      rp.repack_for = isa;
      Arena::build(run_.file(file), *src, rp);
      Arena b = Arena::open(run_.file(file));
      EXPECT_NE(a.header().plan_hash, b.header().plan_hash);
      const int repacked = expect_repacked(a, b, [isa](const ArenaTensor& q) {
        if (q.worker < 0 || q.shape[1] == 0) return kernels::WeightLayout::kRowMajor;
        const kernels::WeightLayout l =
            kernels::expert_matrix_layout(q.dtype, isa, int64_t(q.shape[1]), int64_t(q.shape[2]));
        const bool x16 = isa == kernels::CpuIsa::kAvx512Bf16 && q.dtype == DType::kQ8_0;
        EXPECT_EQ(l, x16 ? kernels::WeightLayout::kQ8_0X16 : kernels::repacked_layout(q.dtype)) << q.name;
        return l;
      });
      EXPECT_GT(repacked, 0);
    }
  }
}

// FP8 gate and up slices (whole 128-column scale blocks) are stored as
// fp8_x16 for the avx512bf16 level (kernels::expert_matrix_layout): each
// exactly the rowmajor slice repacked, its scales and marks those of the
// rowmajor rows; the down slices (32 columns here, no whole scale block)
// and every other tensor stay as they are.
TEST_F(ArenaTest, LongFp8ExpertRowsAreStoredAsX16ForAvx512Bf16) {
  auto src = ModelSource::open(make_model(Arch::kDeepseekV3, DType::kF8E4M3, genmodel::OutFormat::kHf, "long-fp8",
                                         32, 5120));
  BuildOptions plain, x16;
  plain.worker_nodes = x16.worker_nodes = {0};
  x16.repack_for = kernels::CpuIsa::kAvx512Bf16;
  Arena::build(run_.file("long-plain"), *src, plain);
  Arena::build(run_.file("long-x16"), *src, x16);
  Arena a = Arena::open(run_.file("long-plain")), b = Arena::open(run_.file("long-x16"));
  expect_matches_engine(a, *src);
  const int sliced = expect_repacked(a, b, [](const ArenaTensor& q) {
    const bool gate_up = q.worker >= 0 && q.dtype == DType::kF8E4M3 && q.name.find("down") == std::string::npos;
    EXPECT_TRUE(!gate_up || q.shape[2] == 5120u) << q.name;
    return gate_up ? kernels::WeightLayout::kFp8X16 : kernels::WeightLayout::kRowMajor;
  });
  EXPECT_GT(sliced, 0);
}

// BF16 expert slices (whole units of 128 columns) are stored as bf16_x16z
// for the avx512bf16 level, each expert's matrix coded alone; a tensor with
// an expert whose values do not code (here one expert's gate overwritten
// with finite values over every exponent) takes bf16_x16, and so does its
// layer's up (the kernels take one layout for both), and the manifest says
// so.
TEST_F(ArenaTest, Bf16ExpertsAreCodedOrFallBackPerTensor) {
  const std::string path = make_model(Arch::kQwen3Moe, DType::kBF16, genmodel::OutFormat::kHf, "bf16z", 256, 256);
  std::string spoiled;
  {
    auto src = ModelSource::open(path);
    for (const MappedTensor& t : src->tensors().tensors())
      if (spoiled.empty() && t.name.find("ffn_gate_exps") != std::string::npos) {
        spoiled = t.name;
        const SourceMatrix& m = *t.pieces.at(1).src;  // expert 1's matrix
        std::ifstream in(m.file, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(m.data.data()), 256));
        ASSERT_NE(at, std::string::npos);
        std::mt19937 rng(7);
        for (size_t i = 0; i + 1 < m.data.size(); i += 2) {
          const uint16_t v = uint16_t((rng() & 0x8000) | (1 + rng() % 254) << 7 | (rng() & 0x7f));
          std::memcpy(&bytes[at + i], &v, 2);
        }
        std::ofstream(m.file, std::ios::binary | std::ios::trunc) << bytes;
      }
  }
  ASSERT_FALSE(spoiled.empty());
  const std::string up_of_spoiled = spoiled.substr(0, spoiled.find("ffn_gate_exps")) + "ffn_up_exps.weight";
  auto src = ModelSource::open(path);
  BuildOptions plain, z;
  plain.worker_nodes = z.worker_nodes = {0};
  z.repack_for = kernels::CpuIsa::kAvx512Bf16;
  Arena::build(run_.file("bf16z-plain"), *src, plain);
  Arena::build(run_.file("bf16z-z"), *src, z);
  Arena a = Arena::open(run_.file("bf16z-plain")), b = Arena::open(run_.file("bf16z-z"));
  int coded = 0;
  const int repacked = expect_repacked(a, b, [&](const ArenaTensor& q) {
    if (q.worker < 0) return kernels::WeightLayout::kRowMajor;
    EXPECT_EQ(q.dtype, DType::kBF16) << q.name;
    if (q.name == spoiled || q.name == up_of_spoiled) return kernels::WeightLayout::kBf16X16;
    ++coded;
    return kernels::WeightLayout::kBf16X16Z;
  });
  EXPECT_GT(coded, 2);
  EXPECT_EQ(repacked, coded + 2);
  // Reopened with the same plan, it is adopted, fallback and all.
  BuildStats again;
  Arena c = Arena::open_or_build(run_.file("bf16z-z"), *src, z, &again);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(c.at(spoiled, 0).layout, "bf16_x16");
  EXPECT_EQ(c.at(up_of_spoiled, 0).layout, "bf16_x16");
}

TEST_F(ArenaTest, TwoVirtualNodesEachSliceOnceAndBoundWherePossible) {
  auto src = ModelSource::open(make_model(Arch::kQwen3Moe, DType::kQ8_0, genmodel::OutFormat::kGguf, "v"));
  BuildOptions o;
  o.worker_nodes = {0, 0};  // two virtual nodes on this machine's one node
  BuildStats stats = Arena::build(run_.file("arena"), *src, o);
  Arena a = Arena::open(run_.file("arena"));
  // Exactly-once: the expert bytes of both workers add up to the model's.
  uint64_t expert_bytes = 0, slice_bytes = 0;
  for (const MappedTensor& t : src->tensors().tensors())
    if (is_routed_expert(t.name)) expert_bytes += *bytes_for(stored_dtype(t), t.n_elems());
  for (const ArenaTensor& t : a.tensors())
    if (t.worker >= 0) slice_bytes += t.bytes.size();
  EXPECT_EQ(slice_bytes, expert_bytes);
  expect_matches_engine(a, *src);  // and each slice holds the right bytes

  if (!stats.numa_bound) GTEST_SKIP() << "the kernel refuses memory policies here (mbind)";
  EXPECT_EQ(a.header().numa_bound, 1u);
  for (const ArenaTensor& t : a.tensors()) {
    SCOPED_TRACE(fmt::format("{} worker {}", t.name, t.worker));
    MemoryPolicy p = policy_at(t.bytes.data());
    if (t.worker < 0) {
      EXPECT_NE(p.mode, MPOL_BIND) << "dense tensors are not bound";
      continue;
    }
    EXPECT_EQ(p.mode, MPOL_BIND);
    EXPECT_EQ(p.nodes, std::vector<int>{t.node});
    for (int node : nodes_of_pages(t.bytes.data(), t.bytes.size())) EXPECT_EQ(node, t.node);
  }
}

uint64_t checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount())
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ uint8_t(buf[i])) * 1099511628211ull;
  return h;
}

// The largest fixture model (by file size), or "" without fixtures.
std::string largest_fixture() {
  const char* env = std::getenv("TANDEM_FIXTURES");
  if (!env || !fs::is_directory(env)) return "";
  std::string best;
  uintmax_t best_size = 0;
  for (const auto& e : fs::recursive_directory_iterator(env))
    if (e.path().extension() == ".gguf" && e.file_size() > best_size) {
      best = e.path().string();
      best_size = e.file_size();
    }
  return best;
}

TEST_F(ArenaTest, SecondOpenOfTheLargestFixtureAdoptsWithoutRewriting) {
  std::string model = largest_fixture();
  if (model.empty()) GTEST_SKIP() << "no fixtures (TANDEM_FIXTURES) beside the checkout";
  auto src = ModelSource::open(model);
  BuildOptions o;
  o.worker_nodes = {0, 0};
  std::string path = run_.file("arena");
  BuildStats first, second;
  { Arena a = Arena::open_or_build(path, *src, o, &first); }
  EXPECT_TRUE(first.built) << first.reason;
  EXPECT_GT(first.tensors_written, 0u);
  struct stat st1 {};
  ASSERT_EQ(::stat(path.c_str(), &st1), 0);
  uint64_t sum1 = checksum(path);

  Arena again = Arena::open_or_build(path, *src, o, &second);
  EXPECT_FALSE(second.built) << second.reason;
  EXPECT_EQ(second.tensors_written, 0u);
  EXPECT_EQ(second.bytes_written, 0u);
  struct stat st2 {};
  ASSERT_EQ(::stat(path.c_str(), &st2), 0);
  EXPECT_EQ(st1.st_ino, st2.st_ino) << "the arena file was replaced";
  EXPECT_EQ(st1.st_mtim.tv_nsec, st2.st_mtim.tv_nsec);
  EXPECT_EQ(st1.st_mtim.tv_sec, st2.st_mtim.tv_sec);
  EXPECT_EQ(checksum(path), sum1);
  expect_matches_engine(again, *src);

  // Another plan (one worker) is not adopted.
  BuildStats third;
  o.worker_nodes = {0};
  Arena other = Arena::open_or_build(path, *src, o, &third);
  EXPECT_TRUE(third.built);
  EXPECT_NE(third.reason.find("expert workers"), std::string::npos) << third.reason;
}

TEST_F(ArenaTest, ChangedModelFilesAreRebuilt) {
  std::string model = make_model(Arch::kQwen3Moe, DType::kF32, genmodel::OutFormat::kGguf, "c");
  BuildStats s;
  {
    auto src = ModelSource::open(model);
    Arena::open_or_build(run_.file("arena"), *src, {}, &s);
    EXPECT_TRUE(s.built);
  }
  fs::last_write_time(model, fs::last_write_time(model) + std::chrono::seconds(5));
  auto src = ModelSource::open(model);
  Arena::open_or_build(run_.file("arena"), *src, {}, &s);
  EXPECT_TRUE(s.built);
  EXPECT_NE(s.reason.find("model files changed"), std::string::npos) << s.reason;
}

void expect_refused(const std::string& path, const std::string& needle) {
  try {
    Arena::open(path);
    ADD_FAILURE() << "opened a corrupt arena; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST_F(ArenaTest, CorruptArenasAreRefusedWithTheCauseAndRebuilt) {
  auto src = ModelSource::open(make_model(Arch::kQwen3Moe, DType::kF32, genmodel::OutFormat::kGguf, "x"));
  const std::string good = run_.file("good");
  Arena::build(good, *src, {});
  const uint64_t size = fs::file_size(good);
  auto corrupt = [&](const std::string& name, auto&& edit) {
    std::string p = run_.file(name);
    fs::copy_file(good, p);
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
    edit(p);
    return p;
  };
  auto poke = [](const std::string& p, uint64_t off, const void* bytes, size_t n) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(off));
    f.write(static_cast<const char*>(bytes), std::streamsize(n));
  };
  expect_refused(corrupt("magic", [&](auto& p) { poke(p, 0, "XXXX", 4); }), "bad magic");
  expect_refused(corrupt("trunc", [&](auto& p) { fs::resize_file(p, size - 4096); }), "truncated");
  expect_refused(corrupt("tiny", [&](auto& p) { fs::resize_file(p, 100); }), "less than an arena header");
  uint32_t building = uint32_t(ArenaState::kBuilding);
  expect_refused(corrupt("state", [&](auto& p) { poke(p, offsetof(ArenaHeader, state), &building, 4); }),
                 "did not finish");
  {
    Arena a = Arena::open(good);
    uint64_t moff = a.header().manifest_offset;
    uint64_t huge = size * 2;
    expect_refused(corrupt("moff", [&](auto& p) { poke(p, offsetof(ArenaHeader, manifest_offset), &huge, 8); }),
                   "does not fit");
    std::string garbage(64, '\xff');
    expect_refused(corrupt("mgarbage", [&](auto& p) { poke(p, moff, garbage.data(), garbage.size()); }),
                   "manifest");
    // An arena of another kernel layout version (its layouts' bytes differ
    // under the same names): the manifest rewritten with the previous version.
    const uint64_t mbytes = a.header().manifest_bytes;
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(
                                              reinterpret_cast<const uint8_t*>(&a.header()) + moff),
                                          mbytes / 8);
    capnp::FlatArrayMessageReader reader(words);
    capnp::MallocMessageBuilder b;
    b.setRoot(reader.getRoot<proto::Manifest>());
    b.getRoot<proto::Manifest>().setLayoutVersion(kLayoutVersion - 1);
    const kj::Array<capnp::word> old = capnp::messageToFlatArray(b);
    const uint64_t old_bytes = old.asBytes().size();
    ASSERT_LE(old_bytes, mbytes);
    expect_refused(corrupt("layout4",
                           [&](auto& p) {
                             poke(p, moff, old.asBytes().begin(), old_bytes);
                             poke(p, offsetof(ArenaHeader, manifest_bytes), &old_bytes, 8);
                           }),
                   fmt::format("kernel layout version {}, this build reads version {}", kLayoutVersion - 1,
                               kLayoutVersion));
  }
  // open_or_build replaces a corrupt arena and says why.
  std::string p = corrupt("rebuild", [&](auto& q) { poke(q, 0, "XXXX", 4); });
  BuildStats s;
  Arena::open_or_build(p, *src, {}, &s);
  EXPECT_TRUE(s.built);
  EXPECT_NE(s.reason.find("bad magic"), std::string::npos) << s.reason;
  // A world-readable arena is refused.
  fs::permissions(good, fs::perms::others_read, fs::perm_options::add);
  expect_refused(good, "group or others");
}

TEST_F(ArenaTest, LeftoversOfADeadBuilderAreRemoved) {
  auto src = ModelSource::open(make_model(Arch::kQwen3Moe, DType::kF32, genmodel::OutFormat::kGguf, "d"));
  // A builder that died mid-build left its temporary file (pid 1's start
  // ticks never match a dead id like this one).
  std::string stale = run_.file("arena.building-999999-1");
  std::ofstream(stale) << "half an arena";
  Arena::build(run_.file("arena"), *src, {});
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(run_.file("arena")));
  for (const auto& e : fs::directory_iterator(run_.path()))
    EXPECT_EQ(e.path().filename().string().find(".building-"), std::string::npos) << e.path();
}

TEST_F(ArenaTest, ProgressIsReported) {
  auto src = ModelSource::open(make_model(Arch::kMixtral, DType::kF32, genmodel::OutFormat::kGguf, "p"));
  BuildOptions o;
  std::vector<BuildProgress> seen;
  o.on_progress = [&](const BuildProgress& p) { seen.push_back(p); };
  BuildStats s = Arena::build(run_.file("arena"), *src, o);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
  EXPECT_EQ(seen.back().bytes_total, s.bytes_written);
}

}  // namespace
}  // namespace tandem::arena
