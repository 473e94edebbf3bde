// Helpers shared by the control-plane tests: a private run directory per
// test, a server polled on its own thread, raw sockets for misbehaving peers,
// and forked children (which create their own zmq context and always _exit).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/control/client.h"
#include "common/control/message.h"
#include "common/control/server.h"
#include "common/control/socket.h"
#include "common/shm/run_dir.h"

namespace tandem::control::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Generous: the machine running the tests may be loaded.
inline constexpr auto kPatience = 20s;

class ControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = "/tmp/tandem-control-test-" + std::to_string(::getpid());
    run_ = RunDirectory::create(base_);
  }
  void TearDown() override {
    run_.remove();
    std::filesystem::remove_all(base_);
  }
  std::string endpoint() const { return ipc_endpoint(run_.file("control.sock")); }

  std::string base_;
  RunDirectory run_;
};

inline ClientOptions as(proto::Role role, uint32_t index, uint32_t epoch) {
  ClientOptions o;
  o.identity = PeerIdentity{role, index, epoch};
  return o;
}

// What a test needs to know about a ServerEvent, copyable.
struct SeenEvent {
  ServerEvent::Kind kind;
  PeerIdentity peer;
  std::string reason;
  ErrorKind code;
  std::string message;  // message_name() for kMessage
  uint64_t reply_to = 0;
};

// Runs a server's poll() loop on a thread and records the events; `hook`
// runs on that thread for each event (to answer requests).
class ServerThread {
 public:
  using Hook = std::function<void(ControlServer&, ServerEvent&)>;
  explicit ServerThread(ControlServer server, Hook hook = {})
      : server_(std::move(server)), hook_(std::move(hook)), thread_([this] { run(); }) {}
  ~ServerThread() {
    stop_ = true;
    thread_.join();
  }

  // Waits for an event that `pred` accepts; nullopt after `patience`.
  std::optional<SeenEvent> wait_for(std::function<bool(const SeenEvent&)> pred,
                                    std::chrono::milliseconds patience = kPatience) {
    std::unique_lock lock(mu_);
    std::optional<SeenEvent> found;
    cv_.wait_for(lock, patience, [&] {
      for (auto& e : seen_) {
        if (pred(e)) {
          found = e;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  std::optional<SeenEvent> wait_for(ServerEvent::Kind kind, const PeerIdentity& peer,
                                    std::chrono::milliseconds patience = kPatience) {
    return wait_for([&](const SeenEvent& e) { return e.kind == kind && e.peer == peer; },
                    patience);
  }
  std::vector<SeenEvent> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void run() {
    while (!stop_) {
      for (auto& e : server_.poll(20ms)) {
        SeenEvent s{e.kind, e.peer, e.reason, e.code, {}, 0};
        if (e.message) {
          s.message = message_name(e.message->envelope());
          s.reply_to = e.message->envelope().getReplyTo();
        }
        if (hook_) hook_(server_, e);
        std::lock_guard lock(mu_);
        seen_.push_back(std::move(s));
        cv_.notify_all();
      }
    }
  }

  ControlServer server_;
  Hook hook_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SeenEvent> seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once everything above exists
};

// Fork only while this process has no other threads (no ServerThread, no
// live zmq context): the child could inherit a lock another thread held.
// A forked child running `body` with its own zmq context; its exit status is
// body's return value, 99 if it threw. The context is destroyed (flushing
// within the linger) before _exit.
template <typename Body>
pid_t fork_child(Body body) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 99;
  try {
    zmq::context_t context(1);
    rc = body(context);
  } catch (const std::exception& e) {
    fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
  }
  ::_exit(rc);
}

inline int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

// A pipe a child writes one byte to when it is ready.
class ReadyPipe {
 public:
  ReadyPipe() { EXPECT_EQ(::pipe(fds_), 0); }
  ~ReadyPipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  void signal() { (void)!::write(fds_[1], "r", 1); }
  // True if the byte came within `patience`.
  bool wait(std::chrono::milliseconds patience = kPatience) {
    struct pollfd p {fds_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(patience.count())) != 1) return false;
    char c;
    return ::read(fds_[0], &c, 1) == 1;
  }

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace tandem::control::testing
