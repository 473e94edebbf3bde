// A whole run's shared resources — the arena, a pair of activation rings and
// the control socket, in use by an owner and a worker process — leave nothing
// behind: when a worker is SIGKILLed and the run is then stopped, and when the
// owner itself is SIGKILLed and a new run sweeps its leftovers.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/arena/arena.h"
#include "common/control/client.h"
#include "common/control/server.h"
#include "common/model/model_source.h"
#include "common/ring/ring.h"
#include "common/shm/run_dir.h"
#include "tools/gen_model/gen_model.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono;

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) out.insert(e.path().string());
  return out;
}

struct Pids {
  pid_t owner = 0, worker = 0;
  char run[512] = {};
};

// The worker: maps the arena, attaches its ring ends, joins the control
// plane, then idles heartbeating. Never returns.
[[noreturn]] void worker_main(const std::string& run_path, const std::string& endpoint, ProcessId owner,
                              int ready_fd) {
  try {
    zmq::context_t ctx;
    control::ClientOptions co;
    co.identity = {proto::Role::EXPERT, 0, 0};
    auto client = control::ControlClient::connect(ctx, endpoint, co, owner, steady_clock::now() + seconds(30));
    arena::Arena a = arena::Arena::open(run_path + "/arena");
    RingReader requests = RingReader::attach(run_path + "/ring-gpu0-expert0-request");
    RingWriter responses = RingWriter::attach(run_path + "/ring-expert0-gpu0-response");
    char ok = 1;
    (void)!::write(ready_fd, &ok, 1);
    for (;;) client.poll(milliseconds(100));
  } catch (...) {
  }
  ::_exit(1);
}

// The owner (a launcher's part): creates the run, the arena, the rings and the
// control socket, starts the worker, reports, then serves until `stop_fd`
// closes and stops the run.
[[noreturn]] void owner_main(const std::string& base, const std::string& model, int report_fd, int stop_fd) {
  int status = 1;
  try {
    RunDirectory run = RunDirectory::create(base);
    zmq::context_t ctx;
    auto server = control::ControlServer::bind(ctx, run);
    {
      auto src = ModelSource::open(model);
      arena::BuildOptions b;
      b.worker_nodes = {0};
      arena::Arena::build(run.file("arena"), *src, b);
    }
    RingFile::create(run.file("ring-gpu0-expert0-request"), {8, 4096});
    RingFile::create(run.file("ring-expert0-gpu0-response"), {8, 4096});
    int ready[2];
    if (::pipe(ready) != 0) ::_exit(1);
    pid_t worker = ::fork();
    if (worker == 0) worker_main(run.path(), server.endpoint(), self_process(), ready[1]);
    ::close(ready[1]);
    char ok = 0;
    bool joined = false;
    auto until = steady_clock::now() + seconds(60);
    while (!joined && steady_clock::now() < until)
      for (auto& e : server.poll(milliseconds(50))) joined |= e.kind == control::ServerEvent::Kind::kJoined;
    if (!joined || ::read(ready[0], &ok, 1) != 1) throw Error(ErrorKind::kTimeout, "worker did not start");
    RingWriter requests = RingWriter::attach(run.file("ring-gpu0-expert0-request"));
    Pids p{::getpid(), worker, {}};
    std::snprintf(p.run, sizeof p.run, "%s", run.path().c_str());
    (void)!::write(report_fd, &p, sizeof p);
    // Serve until told to stop (stop_fd readable: closed by the test).
    for (;;) {
      server.poll(milliseconds(50));
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(stop_fd, &fds);
      timeval tv{0, 0};
      if (::select(stop_fd + 1, &fds, nullptr, nullptr, &tv) > 0) break;
    }
    ::kill(worker, SIGKILL);  // the worker may already be dead
    ::waitpid(worker, nullptr, 0);
    status = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "owner: %s\n", e.what());
  }
  ::_exit(status);  // every owner above has been destroyed: the run is stopped
}

class RunCleanup : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/dev/shm/tandem-cleanup-test-" + std::to_string(::getpid());
    model_ = (fs::temp_directory_path() / ("tandem-cleanup-" + std::to_string(::getpid()) + ".gguf")).string();
    genmodel::GenOptions o;
    o.config = genmodel::preset_config(Arch::kQwen3Moe, "tiny");
    o.progress = false;
    genmodel::generate(o, model_);
    shm_before_ = listing("/dev/shm");
  }
  void TearDown() override {
    fs::remove_all(base_);
    fs::remove(model_);
  }
  Pids start(int& stop_write) {
    int report[2], stop[2];
    EXPECT_EQ(::pipe(report), 0);
    EXPECT_EQ(::pipe(stop), 0);
    pid_t owner = ::fork();
    if (owner == 0) {
      ::close(report[0]);
      ::close(stop[1]);
      owner_main(base_, model_, report[1], stop[0]);
    }
    ::close(report[1]);
    ::close(stop[0]);
    Pids p;
    EXPECT_EQ(::read(report[0], &p, sizeof p), ssize_t(sizeof p)) << "the owner did not start its run";
    ::close(report[0]);
    stop_write = stop[1];
    return p;
  }
  // Nothing of any run is left in /dev/shm but the (empty) base.
  void expect_clean() {
    std::set<std::string> now = listing("/dev/shm");
    now.erase(base_);
    for (const auto& f : now)
      EXPECT_TRUE(shm_before_.count(f)) << f << " was left behind";
  }
  std::string base_, model_;
  std::set<std::string> shm_before_;
};

TEST_F(RunCleanup, WorkerKilledThenRunStoppedLeavesNothing) {
  int stop = -1;
  Pids p = start(stop);
  ASSERT_GT(p.worker, 0);
  EXPECT_TRUE(fs::exists(std::string(p.run) + "/arena"));
  EXPECT_TRUE(fs::exists(std::string(p.run) + "/control.sock"));
  ::kill(p.worker, SIGKILL);
  ::close(stop);  // stop the run
  int status = 0;
  ::waitpid(p.owner, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(p.run));
  EXPECT_TRUE(fs::is_empty(base_));
  expect_clean();
}

TEST_F(RunCleanup, OwnerKilledLeftoversAreSweptByTheNextRun) {
  int stop = -1;
  Pids p = start(stop);
  ::kill(p.owner, SIGKILL);
  ::kill(p.worker, SIGKILL);
  ::waitpid(p.owner, nullptr, 0);
  ::close(stop);
  EXPECT_TRUE(fs::exists(std::string(p.run) + "/arena")) << "a SIGKILLed owner cannot clean up";
  {
    RunDirectory next = RunDirectory::create(base_);
    EXPECT_FALSE(fs::exists(p.run)) << "the new run did not sweep the dead one";
  }
  EXPECT_TRUE(fs::is_empty(base_));
  expect_clean();
}

}  // namespace
}  // namespace tandem
