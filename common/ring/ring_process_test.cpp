// Rings between processes: a forked writer streams millions of checked
// messages to the test process; writers and readers killed with SIGKILL at
// random points are detected by their peer before its deadline, and a
// restarted peer (a new process) re-attaches with a new epoch and traffic
// resumes where the ring says it should.
//
// Children are forked from the (single-threaded) test process; they never
// return into GoogleTest: every child path ends in _exit, and children die
// with the test process (PR_SET_PDEATHSIG) if it fails early.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/ring/ring.h"
#include "common/ring/ring_test_support.h"
#include "common/shm/run_dir.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

constexpr uint64_t kSeed = 0x7a11d3u;

// TANDEM_RING_MESSAGES overrides the message count (sanitizer builds).
uint64_t message_count(uint64_t fallback) {
  const char* env = std::getenv("TANDEM_RING_MESSAGES");
  return env && *env ? std::strtoull(env, nullptr, 10) : fallback;
}

double seconds_since(steady_clock::time_point t) {
  return std::chrono::duration<double>(steady_clock::now() - t).count();
}

// Small spin: the two sides share two cores with whatever else is running.
RingOptions test_options() {
  RingOptions o;
  o.spin = 20us;
  return o;
}

// Forks; the child runs fn() and _exits with its result (1 if it threw).
// The child tells the parent it is ready through a pipe (see ready()).
struct Child {
  pid_t pid = -1;
  int ready_fd = -1;
};

template <typename Fn>
Child fork_child(Fn&& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(ErrorKind::kSystem, "pipe");
  std::fflush(nullptr);  // or the child inherits, and may repeat, buffered output
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorKind::kSystem, "fork");
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);
    int rc = 1;
    try {
      rc = fn(fds[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
    }
    ::_exit(rc);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

void signal_ready(int fd) {
  char c = 1;
  (void)!::write(fd, &c, 1);
  ::close(fd);
}

// Waits for the child's ready byte (it has attached).
bool wait_ready(Child& child) {
  char c = 0;
  ssize_t n = ::read(child.ready_fd, &c, 1);
  ::close(child.ready_fd);
  return n == 1;
}

int wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

ErrorKind error_kind_of_peek(RingReader& reader) {
  try {
    reader.peek(deadline_in(10s));
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;
}

class RingProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("tandem-ringproc-test-" + std::to_string(::getpid()))).string();
    run_ = RunDirectory::create(base_);
  }
  void TearDown() override {
    run_.remove();
    fs::remove_all(base_);
  }
  std::string base_;
  RunDirectory run_;
};

// Writes the deterministic message stream from the ring's next sequence on,
// for ever (until killed) or until `count` messages have been sent.
int writer_main(const std::string& path, uint32_t slot_bytes, int ready_fd, uint64_t count,
                uint64_t batch_seed) {
  RingWriter writer = RingWriter::attach(path, test_options());
  signal_ready(ready_fd);
  std::mt19937 rng{uint32_t(batch_seed)};
  uint64_t sent = 0;
  while (sent < count) {
    uint64_t batch = std::min<uint64_t>(count - sent, 1 + rng() % 8);
    for (uint64_t i = 0; i < batch; ++i, ++sent) {
      uint64_t seq = writer.next_sequence();
      size_t size = ring_test::message_size(kSeed, seq, slot_bytes);
      ring_test::fill_message(writer.reserve(deadline_in(30s)).first(size), kSeed, seq);
      writer.commit(size);
    }
    writer.flush();
  }
  return 0;  // the writer detaches as it goes out of scope
}

// Reads and checks messages from wherever the ring's head is, for ever
// (until killed) or until `count` were checked. Holds random batches.
int reader_main(const std::string& path, uint32_t slot_bytes, int ready_fd, uint64_t count,
                uint64_t batch_seed) {
  RingReader reader = RingReader::attach(path, test_options());
  signal_ready(ready_fd);
  std::mt19937 rng{uint32_t(batch_seed)};
  uint64_t expected = reader.next_sequence();
  uint64_t checked = 0;
  while (checked < count) {
    uint64_t batch = 1 + rng() % 4;
    for (uint64_t i = 0; i < batch && checked < count; ++i, ++checked, ++expected) {
      RingMessage m = reader.peek(deadline_in(30s));
      std::string error = m.sequence == expected
                              ? ring_test::check_message(m.bytes, kSeed, expected, slot_bytes)
                              : fmt::format("sequence {}, expected {}", m.sequence, expected);
      if (!error.empty()) {
        std::fprintf(stderr, "reader child: %s\n", error.c_str());
        return 2;
      }
    }
    reader.release();
  }
  return 0;
}

TEST_F(RingProcessTest, TenMillionMessagesBetweenTwoProcesses) {
  const uint64_t kMessages = message_count(10'000'000);
  constexpr uint32_t kSlotBytes = 4096;
  std::string path = run_.file("stream");
  auto ring = std::make_shared<const RingFile>(RingFile::create(path, {64, kSlotBytes}));
  RingReader reader = RingReader::attach(ring, test_options());
  auto start = steady_clock::now();
  Child child = fork_child(
      [&](int fd) { return writer_main(path, kSlotBytes, fd, kMessages, 11); });
  ASSERT_TRUE(wait_ready(child));

  std::mt19937 rng(12);
  uint64_t received = 0, bytes = 0;
  std::string error;
  while (received < kMessages && error.empty()) {
    uint64_t batch = std::min<uint64_t>(kMessages - received, 1 + rng() % 4);
    for (uint64_t i = 0; i < batch && error.empty(); ++i, ++received) {
      RingMessage m = reader.peek(deadline_in(30s));
      bytes += m.bytes.size();
      error = m.sequence == received
                  ? ring_test::check_message(m.bytes, kSeed, received, kSlotBytes)
                  : fmt::format("sequence {}, expected {}", m.sequence, received);
    }
    reader.release();
  }
  double elapsed = seconds_since(start);
  EXPECT_EQ(error, "");
  EXPECT_EQ(received, kMessages);
  int status = wait_status(child.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  // Nothing duplicated after the end; the writer detached on its way out.
  EXPECT_FALSE(reader.try_peek());
  EXPECT_EQ(error_kind_of_peek(reader), ErrorKind::kPeerLost);
  std::printf("[ info ] %llu messages (%.1f MB) between two processes in %.2f s\n",
              (unsigned long long)received, double(bytes) / 1e6, elapsed);
}

// A peer that lives but does not answer (stopped) is a timeout at the
// deadline, not a loss; once it is killed, the next wait reports the loss.
TEST_F(RingProcessTest, AStoppedWriterIsATimeoutAndAKilledOneALoss) {
  std::string path = run_.file("stopped");
  auto ring = std::make_shared<const RingFile>(RingFile::create(path, {4, 64}));
  RingReader reader = RingReader::attach(ring, test_options());
  Child child = fork_child([&](int fd) {
    RingWriter writer = RingWriter::attach(path, test_options());
    signal_ready(fd);
    ::raise(SIGSTOP);
    return 0;
  });
  ASSERT_TRUE(wait_ready(child));
  auto start = steady_clock::now();
  try {
    reader.peek(start + 300ms);
    FAIL() << "a message from a stopped writer";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("is alive"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_GE(steady_clock::now() - start, 300ms);
  ::kill(child.pid, SIGKILL);
  wait_status(child.pid);
  start = steady_clock::now();
  EXPECT_EQ(error_kind_of_peek(reader), ErrorKind::kPeerLost);
  EXPECT_LT(steady_clock::now() - start, 2s);
}

TEST_F(RingProcessTest, KilledWritersAreDetectedAndRestartedWritersResume) {
  constexpr uint32_t kSlotBytes = 512;
  constexpr int kIterations = 6;
  std::string path = run_.file("writer-kill");
  auto ring = std::make_shared<const RingFile>(RingFile::create(path, {32, kSlotBytes}));
  RingReader reader = RingReader::attach(ring, test_options());
  std::mt19937 rng(21);
  uint64_t expected = 0;
  uint32_t last_epoch = 0;
  for (int iter = 0; iter < kIterations; ++iter) {
    Child child = fork_child([&](int fd) {
      return writer_main(path, kSlotBytes, fd, ~0ull, 100 + uint64_t(iter));
    });
    ASSERT_TRUE(wait_ready(child));
    auto kill_at = steady_clock::now() + std::chrono::microseconds(rng() % 40000);
    std::optional<steady_clock::time_point> killed_at;
    uint64_t this_writer = 0;
    int held = 0;
    for (;;) {
      if (!killed_at && steady_clock::now() >= kill_at) {
        ::kill(child.pid, SIGKILL);
        killed_at = steady_clock::now();
      }
      try {
        RingMessage m = reader.peek(deadline_in(10s));
        ASSERT_EQ(m.sequence, expected) << "lost, duplicated or reordered";
        ASSERT_EQ(ring_test::check_message(m.bytes, kSeed, expected, kSlotBytes), "");
        if (this_writer == 0 && iter > 0) {
          // The first message of a restarted writer: a newer epoch, and the
          // old writer's loss was reported already, so no second report.
          EXPECT_GT(m.writer_epoch, last_epoch);
        }
        last_epoch = m.writer_epoch;
        ++expected;
        ++this_writer;
        // Hold a few messages at times, never a whole ring's worth.
        if (++held >= 8 || rng() % 3 == 0) {
          reader.release();
          held = 0;
        }
      } catch (const Error& e) {
        ASSERT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
        ASSERT_TRUE(killed_at.has_value()) << "peer lost before it was killed: " << e.what();
        double detect = seconds_since(*killed_at);
        EXPECT_LT(detect, 2.0) << "detected " << detect << " s after the kill (deadline 10 s)";
        std::printf("[ info ] writer %d killed after %llu messages; detected in %.1f ms\n", iter,
                    (unsigned long long)this_writer, detect * 1e3);
        break;
      }
    }
    reader.release();
    int status = wait_status(child.pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  }
  EXPECT_GT(expected, 0u);
  // A last writer that finishes: traffic after all those kills is intact.
  Child child = fork_child([&](int fd) { return writer_main(path, kSlotBytes, fd, 1000, 7); });
  ASSERT_TRUE(wait_ready(child));
  for (int i = 0; i < 1000; ++i) {
    RingMessage m = reader.peek(deadline_in(10s));
    ASSERT_EQ(m.sequence, expected);
    ASSERT_EQ(ring_test::check_message(m.bytes, kSeed, expected, kSlotBytes), "");
    ++expected;
    reader.release();
  }
  int status = wait_status(child.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST_F(RingProcessTest, KilledReadersAreDetectedAndRestartedReadersResume) {
  constexpr uint32_t kSlotBytes = 512;
  constexpr int kIterations = 6;
  std::string path = run_.file("reader-kill");
  auto ring = std::make_shared<const RingFile>(RingFile::create(path, {32, kSlotBytes}));
  RingWriter writer = RingWriter::attach(ring, test_options());
  std::mt19937 rng(31);
  auto send_next = [&](Deadline deadline) {
    uint64_t seq = writer.next_sequence();
    size_t size = ring_test::message_size(kSeed, seq, kSlotBytes);
    ring_test::fill_message(writer.reserve(deadline).first(size), kSeed, seq);
    writer.publish(size);
  };
  for (int iter = 0; iter < kIterations; ++iter) {
    Child child = fork_child([&](int fd) {
      return reader_main(path, kSlotBytes, fd, ~0ull, 200 + uint64_t(iter));
    });
    ASSERT_TRUE(wait_ready(child));
    uint64_t released_before = writer.released_sequence();
    auto kill_at = steady_clock::now() + std::chrono::microseconds(rng() % 40000);
    std::optional<steady_clock::time_point> killed_at;
    for (;;) {
      if (!killed_at && steady_clock::now() >= kill_at) {
        ::kill(child.pid, SIGKILL);
        killed_at = steady_clock::now();
      }
      try {
        send_next(deadline_in(10s));
      } catch (const Error& e) {
        ASSERT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
        ASSERT_TRUE(killed_at.has_value()) << "peer lost before it was killed: " << e.what();
        double detect = seconds_since(*killed_at);
        EXPECT_LT(detect, 2.0) << "detected " << detect << " s after the kill (deadline 10 s)";
        std::printf("[ info ] reader %d killed after it released %llu messages; detected in "
                    "%.1f ms\n",
                    iter, (unsigned long long)(writer.released_sequence() - released_before),
                    detect * 1e3);
        break;
      }
    }
    int status = wait_status(child.pid);
    // Killed, not exited: an exit would mean the child found a bad message.
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  }
  // A last reader checks 1000 messages from the head on and leaves; the
  // writer goes on until it sees the reader detach.
  uint64_t start = writer.released_sequence();  // the dead readers' head
  Child child = fork_child([&](int fd) { return reader_main(path, kSlotBytes, fd, 1000, 9); });
  ASSERT_TRUE(wait_ready(child));
  ErrorKind end = ErrorKind::kInternal;
  try {
    for (;;) send_next(deadline_in(10s));
  } catch (const Error& e) {
    end = e.kind();
    EXPECT_NE(std::string(e.what()).find("detached"), std::string::npos) << e.what();
  }
  EXPECT_EQ(end, ErrorKind::kPeerLost);
  EXPECT_GE(writer.released_sequence(), start + 1000);
  int status = wait_status(child.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace tandem
