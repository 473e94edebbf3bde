// One copy, however many processes map it: several processes map the arena
// read-only and touch every page; their proportional set sizes (PSS, which
// splits each shared page among its mappers) must add up to one arena, while
// their resident sizes add up to one arena each.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "common/arena/arena.h"
#include "common/model/model_source.h"
#include "common/shm/run_dir.h"
#include "tools/gen_model/gen_model.h"

namespace tandem::arena {
namespace {
namespace fs = std::filesystem;

// Fields of /proc/PID/smaps_rollup in kB ("Pss", "Pss_Shmem", "Rss", ...).
std::map<std::string, uint64_t> smaps_rollup(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::map<std::string, uint64_t> out;
  std::string key;
  uint64_t kb;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (ls >> key >> kb >> unit && key.back() == ':') out[key.substr(0, key.size() - 1)] = kb;
  }
  return out;
}

TEST(ArenaPss, SummedPssOfManyMappersIsOneCopy) {
  // ~110 MiB of weights; the model file lives outside /dev/shm so that no
  // other shared memory is in play.
  std::string model = (fs::temp_directory_path() / ("tandem-pss-" + std::to_string(::getpid()) + ".gguf")).string();
  genmodel::GenOptions o;
  o.config = genmodel::preset_config(Arch::kQwen3Moe, "small");
  o.progress = false;
  genmodel::generate(o, model);
  RunDirectory run = RunDirectory::create();
  const std::string path = run.file("arena");
  {
    auto src = ModelSource::open(model);
    BuildOptions b;
    b.worker_nodes = {0, 0};
    Arena::build(path, *src, b);  // returns with the builder's mapping gone
  }
  fs::remove(model);
  const uint64_t arena_kb = fs::file_size(path) / 1024;

  constexpr int kProcesses = 4;
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < kProcesses; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(ready[0]);
      ::close(done[1]);
      uint64_t before = smaps_rollup(::getpid())["Pss_Shmem"];
      Arena a = Arena::open(path);
      volatile uint64_t sum = 0;
      for (size_t off = 0; off < a.size(); off += 4096) sum = sum + uint64_t(a.data()[off]);
      (void)!::write(ready[1], &before, sizeof before);
      char c;
      (void)!::read(done[0], &c, 1);  // parent closes it when it has measured
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(done[0]);
  uint64_t baseline_kb = 0;
  for (int i = 0; i < kProcesses; ++i) {
    uint64_t b = 0;
    ASSERT_EQ(::read(ready[0], &b, sizeof b), ssize_t(sizeof b));
    baseline_kb += b;
  }
  uint64_t pss_kb = 0, rss_kb = 0;
  for (pid_t k : kids) {
    auto r = smaps_rollup(k);
    ASSERT_TRUE(r.count("Pss_Shmem")) << "this kernel's smaps_rollup has no Pss_Shmem";
    pss_kb += r["Pss_Shmem"];
    rss_kb += r["Rss"];
  }
  ::close(done[1]);
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  pss_kb -= baseline_kb;

  std::printf("arena %lu kB; %d mappers: summed Pss_Shmem %lu kB (%.3f copies), summed Rss %lu kB\n",
              (unsigned long)arena_kb, kProcesses, (unsigned long)pss_kb,
              double(pss_kb) / double(arena_kb), (unsigned long)rss_kb);
  EXPECT_NEAR(double(pss_kb), double(arena_kb), 0.05 * double(arena_kb));
  // Each process did see the whole arena resident: sharing, not absence.
  EXPECT_GE(rss_kb, uint64_t(kProcesses) * arena_kb * 95 / 100);
}

}  // namespace
}  // namespace tandem::arena
