#include "common/arena/arena_plan.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/model/model_source.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::arena {
namespace {
namespace fs = std::filesystem;

// A tiny DeepSeek-V3 (dense leading layer, shared expert, MLA) in `dtype`.
std::unique_ptr<ModelSource> tiny_model(DType dtype, const std::string& tag) {
  std::string path = (fs::temp_directory_path() /
                      fmt::format("tandem-plan-test-{}-{}.gguf", ::getpid(), tag)).string();
  genmodel::GenOptions o;
  o.config = genmodel::preset_config(Arch::kDeepseekV3, "tiny");
  o.dtype = dtype;
  o.progress = false;
  genmodel::generate(o, path);
  auto src = ModelSource::open(path);
  fs::remove(path);  // the mapping keeps the data alive
  return src;
}

TEST(ArenaPlan, SplitsExpertsIntoWholeBlocksStoredOnce) {
  auto src = tiny_model(DType::kQ8_0, "q8");
  const TensorMap& map = src->tensors();
  for (size_t workers : {1u, 2u, 3u}) {
    SCOPED_TRACE(fmt::format("{} workers", workers));
    ArenaPlan plan = plan_arena(map, std::vector<int>(workers, 0), 4096);
    ASSERT_EQ(plan.workers.size(), workers);
    uint64_t expert_bytes = 0, slice_bytes = 0;
    for (const MappedTensor& t : map.tensors())
      if (is_routed_expert(t.name)) expert_bytes += *bytes_for(stored_dtype(t), t.n_elems());
    uint64_t prev_end = 0;
    for (const Placement& p : plan.placements) {
      EXPECT_EQ(p.offset % 4096, 0u) << p.name;
      EXPECT_GE(p.offset, prev_end) << p.name << " overlaps the tensor before it";
      prev_end = p.offset + p.bytes;
      if (p.worker < 0) {
        EXPECT_FALSE(is_routed_expert(p.name));
        EXPECT_LE(p.offset + p.bytes, plan.dense.end);
        continue;
      }
      slice_bytes += p.bytes;
      const Region& r = plan.workers[size_t(p.worker)];
      EXPECT_GE(p.offset, r.begin);
      EXPECT_LE(p.offset + p.bytes, r.end) << p.name << " leaves its worker's region";
      EXPECT_EQ(p.split, p.name.find("down") != std::string::npos ? SplitAxis::kCols : SplitAxis::kRows);
    }
    EXPECT_LE(prev_end, plan.data_end);
    // Every expert byte is in exactly one slice.
    EXPECT_EQ(slice_bytes, expert_bytes);
    // Per tensor, the workers' F ranges tile [0, F) in order, in whole blocks.
    for (const MappedTensor& t : map.tensors()) {
      if (!is_routed_expert(t.name)) continue;
      uint64_t at = 0;
      for (size_t w = 0; w < workers; ++w) {
        auto it = std::find_if(plan.placements.begin(), plan.placements.end(),
                               [&](const Placement& p) { return p.name == t.name && p.worker == int(w); });
        ASSERT_NE(it, plan.placements.end()) << t.name << " has no slice for worker " << w;
        EXPECT_EQ(it->slice_begin, at);
        EXPECT_EQ(it->slice_begin % 32, 0u);  // q8_0 blocks
        at = it->slice_end;
      }
      const uint64_t f = t.name.find("down") != std::string::npos ? t.shape[2] : t.shape[1];
      EXPECT_EQ(at, f) << t.name;
    }
  }
}

TEST(ArenaPlan, HashFollowsWorkersNodesAndAlignment) {
  auto src = tiny_model(DType::kF32, "f32");
  const TensorMap& map = src->tensors();
  uint64_t a = plan_arena(map, {0, 0}, 4096).hash;
  EXPECT_EQ(a, plan_arena(map, {0, 0}, 4096).hash);
  EXPECT_NE(a, plan_arena(map, {0}, 4096).hash);
  EXPECT_NE(a, plan_arena(map, {0, 1}, 4096).hash);
  EXPECT_NE(a, plan_arena(map, {0, 0}, 2 << 20).hash);
  EXPECT_THROW(plan_arena(map, {}, 4096), Error);
  EXPECT_THROW(plan_arena(map, {0}, 3000), Error);
}

TEST(ArenaPlan, RepackingQ4KChangesOnlyTheExpertLayoutsAndTheHash) {
  auto src = tiny_model(DType::kQ4_K, "q4k-x4");
  const TensorMap& map = src->tensors();
  const ArenaPlan plain = plan_arena(map, {0, 0}, 4096), x4 = plan_arena(map, {0, 0}, 4096, kernels::CpuIsa::kAvx512Bf16);
  EXPECT_NE(plain.hash, x4.hash);
  ASSERT_EQ(plain.placements.size(), x4.placements.size());
  int repacked = 0;
  for (size_t i = 0; i < x4.placements.size(); ++i) {
    const Placement& p = x4.placements[i];
    EXPECT_EQ(plain.placements[i].layout, kernels::WeightLayout::kRowMajor) << p.name;
    EXPECT_EQ(p.offset, plain.placements[i].offset) << p.name;  // same bytes, other order
    const bool fits = p.worker >= 0 && (p.dtype == DType::kQ4_K || p.dtype == DType::kQ8_0) &&
                      p.shape[1] > 0 && p.shape[1] % 4 == 0;
    EXPECT_EQ(p.layout, fits ? kernels::repacked_layout(p.dtype) : kernels::WeightLayout::kRowMajor) << p.name;
    repacked += fits;
  }
  EXPECT_GT(repacked, 0);
}

TEST(ArenaPlan, StoredTypes) {
  auto src = tiny_model(DType::kQ4_K, "q4k");
  for (const MappedTensor& t : src->tensors().tensors()) {
    if (t.shape.size() == 1) {
      EXPECT_EQ(stored_dtype(t), DType::kF32) << t.name;
    } else if (t.zero_copy()) {
      EXPECT_EQ(stored_dtype(t), t.dtype) << t.name;
    }
  }
}

// A Hugging Face FP8 DeepSeek-V3 with F = 320 over 2 workers and 2 MiB
// alignment: routed experts stay F8_E4M3, F splits at 128-blocks (256 + a
// partial 64), and each slice's scales and marks follow its values at
// cache-line alignment, inside the values' last page, never a page of their own.
TEST(ArenaPlan, Fp8ExpertsKeepTheirTypeWithScalesAndMarksBesideThem) {
  const std::string dir = (fs::temp_directory_path() / fmt::format("tandem-plan-test-{}-fp8", ::getpid())).string();
  genmodel::GenOptions o;
  o.config = genmodel::preset_config(Arch::kDeepseekV3, "tiny");
  o.config.moe.expert_ffn = 320;
  o.dtype = DType::kF8E4M3;
  o.format = genmodel::OutFormat::kHf;
  o.progress = false;
  genmodel::generate(o, dir);
  auto src = ModelSource::open(dir);
  fs::remove_all(dir);
  const uint64_t align = 2 << 20;
  const ArenaPlan plan = plan_arena(src->tensors(), {0, 0}, align);
  int slices = 0;
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const Placement& p = plan.placements[i];
    SCOPED_TRACE(p.name + " worker " + std::to_string(p.worker));
    if (p.role == PlacementRole::kValues) {
      EXPECT_EQ(p.offset % align, 0u);
      if (!is_routed_expert(p.name)) continue;
      EXPECT_EQ(p.dtype, DType::kF8E4M3);
      EXPECT_EQ(p.slice_begin, p.worker == 0 ? 0u : 256u);
      EXPECT_EQ(p.slice_end, p.worker == 0 ? 256u : 320u);
      ASSERT_LT(i + 2, plan.placements.size());
      const Placement &sc = plan.placements[i + 1], &mk = plan.placements[i + 2];
      EXPECT_EQ(sc.role, PlacementRole::kFp8Scales);
      EXPECT_EQ(sc.name, fp8_scales_name(p.name));
      EXPECT_EQ(mk.role, PlacementRole::kFp8Marks);
      EXPECT_EQ(mk.name, fp8_marks_name(p.name));
      EXPECT_EQ(sc.worker, p.worker);
      EXPECT_EQ(mk.worker, p.worker);
      const uint64_t page_end = (p.offset + p.bytes + align - 1) / align * align;
      EXPECT_EQ(sc.offset % kSmallAlignment, 0u);
      EXPECT_EQ(mk.offset % kSmallAlignment, 0u);
      EXPECT_GE(sc.offset, p.offset + p.bytes);
      EXPECT_GE(mk.offset, sc.offset + sc.bytes);
      EXPECT_LE(mk.offset + mk.bytes, page_end);
      EXPECT_LE(mk.offset + mk.bytes, plan.workers[size_t(p.worker)].end);
      ++slices;
    }
  }
  EXPECT_GT(slices, 0);
}

}  // namespace
}  // namespace tandem::arena
