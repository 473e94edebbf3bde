// Sequence files (a prefill worker's handoff to the decode worker) and KV
// files (a gpu worker's sequences, adopted by its successor): a cache
// and its history come back bit for bit, the file is gone after the read,
// and files that do not fit the reader's model are refused with the cause.
#include "services/gpu_worker/sequence_file.h"

#include "services/gpu_worker/kv_file.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::gpu {
namespace {

void fill(engine::KvCache& c, int64_t layers, int64_t n, float base) {
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = 0; i < c.k_width(); ++i) c.k(l, p)[i] = base + float(l * 1000 + p) + 0.001f * float(i);
      for (int64_t i = 0; i < c.v_width(); ++i) c.v(l, p)[i] = -base - float(l * 1000 + p) - 0.002f * float(i);
    }
  c.advance(n);
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kInternal;
}

TEST(SequenceFile, RoundTripsGqaAndMlaCachesAndIsRemovedAfterTheRead) {
  RunDirectory run = RunDirectory::create();
  for (Arch arch : {Arch::kQwen3Moe, Arch::kDeepseekV3}) {
    const ModelConfig c = genmodel::preset_config(arch, "tiny");
    const int64_t L = c.n_layers;
    engine::KvCache src(c, 16);
    fill(src, L, 11, 0.5f);
    std::vector<uint32_t> history;
    for (uint32_t t = 0; t < 11; ++t) history.push_back(t * 7 + 1);
    const std::string path = run.file("seq.kv");
    write_sequence_file(path, src, L, history);
    EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    engine::KvCache dst(c, 20);
    EXPECT_EQ(read_sequence_file(path, dst, L), history);
    EXPECT_FALSE(std::filesystem::exists(path));
    ASSERT_EQ(dst.size(), 11);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t p = 0; p < 11; ++p) {
        for (int64_t i = 0; i < dst.k_width(); ++i) ASSERT_EQ(dst.k(l, p)[i], src.k(l, p)[i]);
        for (int64_t i = 0; i < dst.v_width(); ++i) ASSERT_EQ(dst.v(l, p)[i], src.v(l, p)[i]);
      }
    EXPECT_EQ(arch == Arch::kDeepseekV3, dst.v_width() == 0);  // MLA keeps the latent only
  }
}

TEST(SequenceFile, RefusesFilesThatDoNotFitTheReader) {
  RunDirectory run = RunDirectory::create();
  const ModelConfig qwen = genmodel::preset_config(Arch::kQwen3Moe, "tiny");
  const ModelConfig ds = genmodel::preset_config(Arch::kDeepseekV3, "tiny");
  engine::KvCache src(qwen, 8);
  fill(src, qwen.n_layers, 6, 1);
  const std::vector<uint32_t> history(6, 3);
  const std::string path = run.file("seq.kv");
  auto write = [&] { write_sequence_file(path, src, qwen.n_layers, history); };
  // Another model's cache.
  write();
  engine::KvCache other(ds, 8);
  EXPECT_EQ(kind_of([&] { read_sequence_file(path, other, ds.n_layers); }), ErrorKind::kInvalidInput);
  EXPECT_FALSE(std::filesystem::exists(path));  // refused files go too
  // Longer than the reader's cache.
  write();
  engine::KvCache small(qwen, 4);
  EXPECT_EQ(kind_of([&] { read_sequence_file(path, small, qwen.n_layers); }), ErrorKind::kInvalidInput);
  // Truncated.
  write();
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  engine::KvCache fresh(qwen, 8);
  EXPECT_EQ(kind_of([&] { read_sequence_file(path, fresh, qwen.n_layers); }), ErrorKind::kInvalidInput);
  EXPECT_EQ(fresh.size(), 0);
  // Not a sequence file.
  { std::ofstream(path) << std::string(200, 'x'); }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(kind_of([&] { read_sequence_file(path, fresh, qwen.n_layers); }), ErrorKind::kInvalidInput);
  // Missing (read already, or its writer failed).
  EXPECT_EQ(kind_of([&] { read_sequence_file(path, fresh, qwen.n_layers); }), ErrorKind::kNotFound);
  // The writer never overwrites: a name in use is an error.
  write();
  EXPECT_EQ(kind_of(write), ErrorKind::kSystem);
}

// KV files (kv_file.h): what one worker committed, its successor adopts —
// only for the same coordinator, sequence and model.
TEST(KvFile, AdoptsTheCommittedStateAndRefusesOthersFiles) {
  RunDirectory run = RunDirectory::create();
  const ModelConfig c = genmodel::preset_config(Arch::kQwen3Moe, "tiny");
  const ProcessId me = self_process(), other{me.pid, me.start_ticks + 1};
  SequenceParams p;
  p.capacity = 12;
  p.top_logprobs = 3;
  p.sampling.temperature = 0.7f;
  p.sampling.seed = 99;
  const std::string path = run.file("kv-g0-5.kv");
  {
    KvFile f = KvFile::create(path, c, 5, p, me);
    engine::KvCache cache = f.cache(c, 0);
    fill(cache, c.n_layers, 7, 2.5f);
    for (uint32_t t = 0; t < 7; ++t) f.history()[t] = 100 + t;
    f.commit(7);
  }
  EXPECT_EQ(KvFile::owner(path), me);
  std::optional<KvFile> a = KvFile::adopt(path, c, 5, me);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->committed(), 7);
  EXPECT_EQ(a->params().top_logprobs, 3);
  EXPECT_EQ(a->params().sampling.seed, 99u);
  EXPECT_EQ(a->params().sampling.temperature, 0.7f);
  EXPECT_EQ(a->history()[6], 106u);
  engine::KvCache back = a->cache(c, 7);
  engine::KvCache want(c, 12);
  fill(want, c.n_layers, 7, 2.5f);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t i = 0; i < back.k_width() * 7; ++i) ASSERT_EQ(back.k(l, 0)[i], want.k(l, 0)[i]);
  a.reset();
  // Another sequence id, then another coordinator: refused, and the file goes.
  EXPECT_FALSE(KvFile::adopt(path, c, 6, me));
  EXPECT_FALSE(std::filesystem::exists(path));
  KvFile::create(path, c, 5, p, other);
  EXPECT_FALSE(KvFile::adopt(path, c, 5, me));
  EXPECT_FALSE(std::filesystem::exists(path));
  // Another model's.
  KvFile::create(path, c, 5, p, me);
  EXPECT_FALSE(KvFile::adopt(path, genmodel::preset_config(Arch::kDeepseekV3, "tiny"), 5, me));
  EXPECT_FALSE(KvFile::adopt(path, c, 5, me));  // missing
}

}  // namespace
}  // namespace tandem::gpu
