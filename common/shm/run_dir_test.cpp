#include "common/shm/run_dir.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

// A fresh private base per test, removed afterwards.
class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("tandem-rundir-test-" + std::to_string(::getpid()));
    fs::remove_all(base_);
  }
  void TearDown() override { fs::remove_all(base_); }
  fs::path base_;
};

mode_t mode_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

TEST_F(RunDirTest, CreatesPrivateDirectoriesAndRemovesThem) {
  std::string path;
  {
    RunDirectory run = RunDirectory::create(base_.string());
    path = run.path();
    EXPECT_EQ(mode_of(base_.string()), 0700u);
    EXPECT_EQ(mode_of(path), 0700u);
    EXPECT_TRUE(run.owner());
    EXPECT_EQ(run.owner_process(), self_process());
    std::ofstream(run.file("x")) << "data";
    RunDirectory worker = RunDirectory::attach(path);
    EXPECT_FALSE(worker.owner());
  }  // the worker's copy leaves it; the owner's removes it
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(RunDirTest, RefusesAWorldReadableBase) {
  fs::create_directories(base_);
  ::chmod(base_.c_str(), 0755);
  try {
    RunDirectory::create(base_.string());
    FAIL() << "a 0755 base was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mode 755"), std::string::npos) << e.what();
  }
}

TEST_F(RunDirTest, RefusesASymlinkedBase) {
  fs::create_directories(base_.string() + "-target");
  fs::create_symlink(base_.string() + "-target", base_);
  EXPECT_THROW(RunDirectory::create(base_.string()), Error);
  fs::remove_all(base_.string() + "-target");
}

TEST_F(RunDirTest, SweepsRunsOfDeadOwnersOnly) {
  ensure_private_dir(base_.string());
  // A child makes a run with a file in it, then dies by SIGKILL: its directory
  // is left behind, as after a crash.
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    RunDirectory run = RunDirectory::create(base_.string());
    std::ofstream(run.file("arena")) << "weights";
    char ok = 1;
    (void)!::write(pipefd[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char ok = 0;
  ASSERT_EQ(::read(pipefd[0], &ok, 1), 1);
  ::close(pipefd[0]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::vector<fs::path> before(fs::directory_iterator(base_), {});
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(fs::exists(before[0] / "arena"));

  RunDirectory live = RunDirectory::create(base_.string());  // sweeps the dead one
  EXPECT_FALSE(fs::exists(before[0]));
  // A live run is never swept.
  EXPECT_TRUE(sweep_dead_runs({base_.string()}).empty());
  EXPECT_TRUE(fs::exists(live.path()));
  // Foreign entries are left alone.
  fs::create_directories(base_ / "not-a-run");
  sweep_dead_runs({base_.string()});
  EXPECT_TRUE(fs::exists(base_ / "not-a-run"));
}

TEST(RunDirNames, ParseOwner) {
  auto id = run_owner_from_name("run-123-456-deadbeef");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, 123);
  EXPECT_EQ(id->start_ticks, 456u);
  EXPECT_FALSE(run_owner_from_name("run-x-456-a"));
  EXPECT_FALSE(run_owner_from_name("other"));
  EXPECT_FALSE(run_owner_from_name("run-12"));
}

TEST(ProcessIdentity, DistinguishesLiveDeadAndReused) {
  ProcessId me = self_process();
  EXPECT_TRUE(is_alive(me));
  EXPECT_FALSE(is_alive({me.pid, me.start_ticks + 1}));  // same pid, another process
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  auto id = find_process(child);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(find_process(child));
  if (id) {
    EXPECT_FALSE(is_alive(*id));
  }
  EXPECT_EQ(parse_process_id(to_string(me)), me);
  EXPECT_THROW(parse_process_id("12"), Error);
}

}  // namespace
}  // namespace tandem
