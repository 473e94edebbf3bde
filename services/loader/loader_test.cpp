// The loader as a process: builds the arena, adopts it the second time, and
// serves its manifest over the control plane until told to stop; a killed
// loader is noticed by the server.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/arena/arena.h"
#include "common/control/server.h"
#include "common/shm/run_dir.h"
#include "proto/control.capnp.h"
#include "tools/gen_model/gen_model.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono;

const std::string kLoader = std::string(TANDEM_BINARY_DIR) + "/bin/tandem-loader";

// Starts the loader with args, its stderr and stdout in `log`.
pid_t spawn_loader(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(kLoader.c_str())};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(kLoader.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = RunDirectory::create();
    model_ = run_.file("model.gguf");
    genmodel::GenOptions o;
    o.config = genmodel::preset_config(Arch::kDeepseekV3, "tiny");
    o.dtype = DType::kQ8_0;
    o.progress = false;
    genmodel::generate(o, model_);
  }
  RunDirectory run_;
  std::string model_;
};

TEST_F(LoaderTest, BuildsThenAdopts) {
  std::vector<std::string> args{"--model", model_, "--run-dir", run_.path(), "--worker-nodes", "0,0"};
  ASSERT_EQ(wait_exit(spawn_loader(args, run_.file("log1"))), 0) << slurp(run_.file("log1"));
  EXPECT_NE(slurp(run_.file("log1")).find("built: none exists yet"), std::string::npos) << slurp(run_.file("log1"));
  EXPECT_NE(slurp(run_.file("log1")).find("[loader/0 pid "), std::string::npos) << "log lines name role and pid";
  struct stat a {}, b {};
  ASSERT_EQ(::stat(run_.file("arena").c_str(), &a), 0);
  ASSERT_EQ(wait_exit(spawn_loader(args, run_.file("log2"))), 0) << slurp(run_.file("log2"));
  EXPECT_NE(slurp(run_.file("log2")).find("adopted"), std::string::npos) << slurp(run_.file("log2"));
  ASSERT_EQ(::stat(run_.file("arena").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(arena::Arena::open(run_.file("arena")).worker_nodes(), (std::vector<int>{0, 0}));
}

TEST_F(LoaderTest, RefusesBadArguments) {
  EXPECT_EQ(wait_exit(spawn_loader({"--model", model_}, run_.file("l"))), 2);
  EXPECT_NE(slurp(run_.file("l")).find("--run-dir"), std::string::npos);
  EXPECT_EQ(wait_exit(spawn_loader({"--model", model_, "--run-dir", run_.path(), "--worker-nodes", "0,x"},
                                   run_.file("l"))), 2);
  EXPECT_NE(slurp(run_.file("l")).find("--worker-nodes '0,x'"), std::string::npos) << slurp(run_.file("l"));
  EXPECT_EQ(wait_exit(spawn_loader({"--model", run_.file("missing.gguf"), "--run-dir", run_.path()},
                                   run_.file("l"))), 1);
  EXPECT_NE(slurp(run_.file("l")).find("missing.gguf"), std::string::npos) << slurp(run_.file("l"));
}

// Polls the server until an event of `kind` arrives (or the deadline).
std::optional<control::ServerEvent> wait_event(control::ControlServer& s, control::ServerEvent::Kind kind,
                                               seconds limit) {
  auto until = steady_clock::now() + limit;
  while (steady_clock::now() < until)
    for (auto& e : s.poll(milliseconds(50)))
      if (e.kind == kind) return std::move(e);
  return std::nullopt;
}

TEST_F(LoaderTest, ServesTheManifestAndStopsWhenTold) {
  zmq::context_t ctx;
  auto server = control::ControlServer::bind(ctx, run_);
  pid_t pid = spawn_loader({"--model", model_, "--run-dir", run_.path(), "--control", server.endpoint(),
                            "--server-pid", std::to_string(::getpid())},
                           run_.file("log"));
  auto joined = wait_event(server, control::ServerEvent::Kind::kJoined, seconds(60));
  ASSERT_TRUE(joined) << slurp(run_.file("log"));
  EXPECT_EQ(joined->peer.role, proto::Role::LOADER);

  capnp::MallocMessageBuilder b;
  b.initRoot<proto::Envelope>().initManifestRequest();
  uint64_t id = server.send_request(joined->peer, b);
  auto msg = wait_event(server, control::ServerEvent::Kind::kMessage, seconds(30));
  ASSERT_TRUE(msg && msg->message);
  auto env = msg->message->envelope();
  ASSERT_EQ(env.which(), proto::Envelope::MANIFEST_REPLY);
  EXPECT_EQ(env.getReplyTo(), id);
  std::string path = env.getManifestReply().getArenaPath();
  EXPECT_EQ(path, run_.file("arena"));
  arena::Arena a = arena::Arena::open(path);
  EXPECT_EQ(env.getManifestReply().getArenaSize(), a.size());

  server.send_shutdown(joined->peer, "test done");
  EXPECT_EQ(wait_exit(pid), 0) << slurp(run_.file("log"));
}

TEST_F(LoaderTest, AKilledLoaderIsNoticed) {
  zmq::context_t ctx;
  auto server = control::ControlServer::bind(ctx, run_);
  pid_t pid = spawn_loader({"--model", model_, "--run-dir", run_.path(), "--control", server.endpoint(),
                            "--server-pid", std::to_string(::getpid())},
                           run_.file("log"));
  ASSERT_TRUE(wait_event(server, control::ServerEvent::Kind::kJoined, seconds(60))) << slurp(run_.file("log"));
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  auto t0 = steady_clock::now();
  auto lost = wait_event(server, control::ServerEvent::Kind::kLost, seconds(10));
  ASSERT_TRUE(lost);
  EXPECT_LT(steady_clock::now() - t0, seconds(3)) << "noticed late";
  EXPECT_EQ(lost->peer.role, proto::Role::LOADER);
}

}  // namespace
}  // namespace tandem
