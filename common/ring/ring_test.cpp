// Rings within one process: the API, back-pressure and deadlines, epochs
// and restarts with graceful detaches, and two threads streaming messages
// over one shared mapping (the test ThreadSanitizer checks meaningfully).
// Processes and SIGKILL: ring_process_test.cpp.
#include "common/ring/ring.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/ring/futex.h"
#include "common/ring/ring_layout.h"
#include "common/ring/ring_test_support.h"
#include "common/shm/run_dir.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

class RingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() / ("tandem-ring-test-" + std::to_string(::getpid()))).string();
    run_ = RunDirectory::create(base_);
  }
  void TearDown() override {
    run_.remove();
    fs::remove_all(base_);
  }
  std::shared_ptr<const RingFile> make_ring(RingShape shape, const std::string& name = "ring") {
    return std::make_shared<const RingFile>(RingFile::create(run_.file(name), shape));
  }
  std::string base_;
  RunDirectory run_;
};

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
std::string as_string(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

template <typename Fn>
ErrorKind error_kind_of(Fn&& fn, std::string* what = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no tandem::Error thrown";
  return ErrorKind::kInternal;
}

TEST(Futex, WaitsWakesAndTimesOut) {
  std::atomic<uint32_t> word{7};
  EXPECT_EQ(futex::wait(word, 8, steady_clock::now() + 1s), futex::WaitResult::kValueChanged);
  auto start = steady_clock::now();
  EXPECT_EQ(futex::wait(word, 7, start + 20ms), futex::WaitResult::kTimedOut);
  EXPECT_GE(steady_clock::now() - start, 20ms);
  std::thread waker([&] {
    std::this_thread::sleep_for(10ms);
    word.store(8);
    futex::wake(word);
  });
  // Woken (or the value changed first); either way well before the deadline.
  while (word.load() == 7) futex::wait(word, 7, steady_clock::now() + 10s);
  waker.join();
  EXPECT_LT(steady_clock::now() - start, 5s);
}

TEST(RingLayout, SidesLiveOnSeparateCacheLines) {
  using L = ring_layout::Control;
  EXPECT_GE(offsetof(L, producer), 64u);
  EXPECT_GE(offsetof(L, consumer) - offsetof(L, producer), 64u);
  EXPECT_EQ(offsetof(L, producer) % 64, 0u);
  EXPECT_EQ(offsetof(L, consumer) % 64, 0u);
}

TEST_F(RingTest, CreatesOpensAndValidates) {
  auto ring = make_ring({8, 100});
  RingFile opened = RingFile::open(ring->path());
  EXPECT_EQ(opened.shape().slot_count, 8u);
  EXPECT_EQ(opened.shape().slot_bytes, 100u);
  EXPECT_EQ(error_kind_of([&] { RingFile::create(run_.file("bad"), {6, 100}); }),
            ErrorKind::kInvalidInput);
  EXPECT_EQ(error_kind_of([&] { RingFile::create(run_.file("bad"), {8, 0}); }),
            ErrorKind::kInvalidInput);
  EXPECT_EQ(error_kind_of([&] { RingFile::create(ring->path(), {8, 100}); }), ErrorKind::kSystem);
  // A shared file that is not a ring.
  create_shared_file(run_.file("zeros"), 8192, false);
  EXPECT_EQ(error_kind_of([&] { RingFile::open(run_.file("zeros")); }), ErrorKind::kInvalidInput);
  EXPECT_EQ(error_kind_of([&] { RingWriter::attach(run_.file("missing")); }), ErrorKind::kNotFound);
}

TEST_F(RingTest, SendsAndReceivesWithSequenceNumbers) {
  auto ring = make_ring({4, 64});
  RingWriter writer = RingWriter::attach(ring);
  RingReader reader = RingReader::attach(ring);
  EXPECT_EQ(writer.epoch(), 1u);
  EXPECT_EQ(reader.epoch(), 1u);
  std::vector<std::string> sent = {"", "a", std::string(64, 'x'), "hello"};
  for (int round = 0; round < 3; ++round) {
    for (const auto& s : sent) writer.send(as_bytes(s), deadline_in(1s));
    for (size_t i = 0; i < sent.size(); ++i) {
      std::array<std::byte, 64> buf{};
      uint64_t seq = 99;
      size_t n = reader.receive(buf, deadline_in(1s), &seq);
      EXPECT_EQ(as_string({buf.data(), n}), sent[i]);
      EXPECT_EQ(seq, round * sent.size() + i);
    }
  }
  EXPECT_EQ(writer.released_sequence(), 12u);
  std::string big(65, 'y');
  EXPECT_EQ(error_kind_of([&] { writer.send(as_bytes(big), deadline_in(1s)); }),
            ErrorKind::kInvalidInput);
  // A message bigger than the caller's buffer stays in the ring.
  writer.send(as_bytes("0123456789"), deadline_in(1s));
  std::array<std::byte, 4> small{};
  EXPECT_EQ(error_kind_of([&] { reader.receive(small, deadline_in(1s)); }), ErrorKind::kInvalidInput);
  std::array<std::byte, 16> fits{};
  EXPECT_EQ(reader.receive(fits, deadline_in(1s)), 10u);
}

TEST_F(RingTest, ZeroCopyBatchesPublishAndReleaseTogether) {
  auto ring = make_ring({8, 32});
  RingWriter writer = RingWriter::attach(ring);
  RingReader reader = RingReader::attach(ring);
  for (int i = 0; i < 3; ++i) {
    std::span<std::byte> slot = writer.reserve(deadline_in(1s));
    EXPECT_EQ(slot.size(), 32u);
    std::memset(slot.data(), 'a' + i, 5);
    writer.commit(5);
  }
  EXPECT_FALSE(reader.try_peek()) << "staged messages must stay invisible until flush()";
  EXPECT_EQ(writer.next_sequence(), 3u);
  writer.flush();
  std::vector<RingMessage> held;
  for (int i = 0; i < 3; ++i) held.push_back(reader.peek(deadline_in(1s)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(as_string(held[i].bytes), std::string(5, char('a' + i)));
    EXPECT_EQ(held[i].sequence, uint64_t(i));
    EXPECT_EQ(held[i].writer_epoch, 1u);
  }
  EXPECT_EQ(writer.released_sequence(), 0u);
  reader.release();
  EXPECT_EQ(writer.released_sequence(), 3u);
  EXPECT_FALSE(reader.try_peek());
}

TEST_F(RingTest, FullRingAndEmptyRingTimeOutAtTheirDeadline) {
  auto ring = make_ring({4, 16});
  RingReader reader = RingReader::attach(ring);
  std::string what;
  // No writer has ever attached: the reader waits for one, then times out.
  EXPECT_EQ(error_kind_of([&] { reader.peek(deadline_in(30ms)); }, &what), ErrorKind::kTimeout);
  EXPECT_NE(what.find("no writer has attached"), std::string::npos) << what;

  RingWriter writer = RingWriter::attach(ring);
  for (int i = 0; i < 4; ++i) writer.send(as_bytes("m"), deadline_in(1s));
  auto start = steady_clock::now();
  EXPECT_EQ(error_kind_of([&] { writer.reserve(start + 50ms); }, &what), ErrorKind::kTimeout);
  EXPECT_GE(steady_clock::now() - start, 50ms);
  EXPECT_NE(what.find(ring->path()), std::string::npos) << what;
  EXPECT_NE(what.find("free slot for message 4"), std::string::npos) << what;
  EXPECT_NE(what.find("is alive"), std::string::npos) << what;
}

TEST_F(RingTest, RefusesASecondLiveEnd) {
  auto ring = make_ring({4, 16});
  RingWriter writer = RingWriter::attach(ring);
  RingReader reader = RingReader::attach(ring);
  EXPECT_EQ(error_kind_of([&] { RingWriter::attach(ring); }), ErrorKind::kInvalidInput);
  EXPECT_EQ(error_kind_of([&] { RingReader::attach(ring->path()); }), ErrorKind::kInvalidInput);
}

TEST_F(RingTest, DetachedWriterIsLostAndANewOneResumes) {
  auto ring = make_ring({4, 16});
  RingReader reader = RingReader::attach(ring);
  {
    RingWriter writer = RingWriter::attach(ring);
    writer.send(as_bytes("one"), deadline_in(1s));
    writer.send(as_bytes("two"), deadline_in(1s));
  }
  // Published messages outlive their writer.
  EXPECT_EQ(as_string(reader.peek(deadline_in(1s)).bytes), "one");
  EXPECT_EQ(as_string(reader.peek(deadline_in(1s)).bytes), "two");
  reader.release();
  std::string what;
  auto start = steady_clock::now();
  EXPECT_EQ(error_kind_of([&] { reader.peek(deadline_in(10s)); }, &what), ErrorKind::kPeerLost);
  EXPECT_LT(steady_clock::now() - start, 2s);
  EXPECT_NE(what.find("detached"), std::string::npos) << what;
  EXPECT_THROW(reader.check_peer(), Error);

  RingWriter again = RingWriter::attach(ring);
  EXPECT_EQ(again.epoch(), 2u);
  EXPECT_EQ(again.next_sequence(), 2u);
  again.send(as_bytes("three"), deadline_in(1s));
  // The loss was reported already: the new writer is adopted silently.
  RingMessage m = reader.peek(deadline_in(1s));
  EXPECT_EQ(as_string(m.bytes), "three");
  EXPECT_EQ(m.sequence, 2u);
  EXPECT_EQ(m.writer_epoch, 2u);
  EXPECT_NO_THROW(reader.check_peer());
}

TEST_F(RingTest, AReplacedWriterIsReportedOnceAtTheBoundary) {
  auto ring = make_ring({8, 16});
  RingReader reader = RingReader::attach(ring);
  {
    RingWriter first = RingWriter::attach(ring);
    for (auto s : {"a", "b", "c"}) first.send(as_bytes(s), deadline_in(1s));
    // Reserved and staged but never flushed: the writer "dies" with it.
    std::memcpy(first.reserve(deadline_in(1s)).data(), "stale", 5);
    first.commit(5);
  }
  RingWriter second = RingWriter::attach(ring);
  EXPECT_EQ(second.next_sequence(), 3u);
  for (auto s : {"d", "e"}) second.send(as_bytes(s), deadline_in(1s));

  std::vector<std::string> got;
  int lost = 0;
  while (got.size() < 5) {
    try {
      RingMessage m = reader.peek(deadline_in(1s));
      EXPECT_EQ(m.sequence, got.size());
      EXPECT_EQ(m.writer_epoch, got.size() < 3 ? 1u : 2u);
      got.emplace_back(as_string(m.bytes));
      reader.release();
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
      EXPECT_EQ(got.size(), 3u) << "the loss is reported between the old and the new messages";
      EXPECT_NE(std::string(e.what()).find("replaced"), std::string::npos) << e.what();
      ++lost;
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(lost, 1);
}

TEST_F(RingTest, ARestartedReaderGetsUnreleasedMessagesAgain) {
  auto ring = make_ring({4, 16});
  RingWriter writer = RingWriter::attach(ring);
  for (auto s : {"a", "b", "c"}) writer.send(as_bytes(s), deadline_in(1s));
  {
    RingReader reader = RingReader::attach(ring);
    reader.peek(deadline_in(1s));
    reader.release();                // "a" is consumed for good
    reader.peek(deadline_in(1s));    // "b" is held, not released
  }
  std::string what;
  EXPECT_EQ(error_kind_of([&] { writer.check_peer(); }, &what), ErrorKind::kPeerLost);
  EXPECT_NE(what.find("detached"), std::string::npos) << what;
  EXPECT_EQ(writer.released_sequence(), 1u);

  RingReader again = RingReader::attach(ring);
  EXPECT_EQ(again.epoch(), 2u);
  EXPECT_NO_THROW(writer.check_peer());  // the loss was reported: adopted silently
  RingMessage m = again.peek(deadline_in(1s));
  EXPECT_EQ(as_string(m.bytes), "b");
  EXPECT_EQ(m.sequence, 1u);
  // The writer fills the ring but never overwrites the held slot.
  writer.send(as_bytes("d"), deadline_in(1s));
  writer.send(as_bytes("e"), deadline_in(1s));
  EXPECT_EQ(error_kind_of([&] { writer.reserve(deadline_in(20ms)); }), ErrorKind::kTimeout);
  EXPECT_EQ(as_string(m.bytes), "b");
  again.release();
  for (auto s : {"c", "d", "e"}) EXPECT_EQ(as_string(again.peek(deadline_in(1s)).bytes), s);
}

TEST_F(RingTest, ANewReaderIsReportedOnceToTheWriter) {
  auto ring = make_ring({2, 16});
  std::optional<RingReader> first = RingReader::attach(ring);
  RingWriter writer = RingWriter::attach(ring);  // sees reader epoch 1
  first.reset();
  RingReader second = RingReader::attach(ring);
  writer.send(as_bytes("a"), deadline_in(1s));
  writer.send(as_bytes("b"), deadline_in(1s));
  // The ring is full, so the writer looks at the consumer line and sees a
  // reader epoch it never saw lost: one kPeerLost, then business as usual.
  std::string what;
  EXPECT_EQ(error_kind_of([&] { writer.reserve(deadline_in(1s)); }, &what), ErrorKind::kPeerLost);
  EXPECT_NE(what.find("replaced"), std::string::npos) << what;
  second.peek(deadline_in(1s));
  second.release();
  EXPECT_NO_THROW(writer.send(as_bytes("c"), deadline_in(1s)));
}

// Two threads over one mapping: the reader verifies every message's size,
// sequence and bytes; batches of random size on both sides; a small ring so
// that both sides block often and the futex path is exercised.
TEST_F(RingTest, TwoThreadsStreamAMillionMessages) {
  constexpr uint64_t kMessages = 1'000'000;
  constexpr uint64_t kSeed = 0x5eed;
  constexpr uint32_t kSlotBytes = 1024;
  auto ring = make_ring({16, kSlotBytes});
  RingOptions options;
  options.spin = 20us;
  RingWriter writer = RingWriter::attach(ring, options);
  RingReader reader = RingReader::attach(ring, options);
  auto start = steady_clock::now();
  std::string producer_error;
  std::thread producer([&] {
    try {
      std::mt19937 rng(1);
      uint64_t sent = 0;
      while (sent < kMessages) {
        uint64_t batch = std::min<uint64_t>(kMessages - sent, 1 + rng() % 8);
        for (uint64_t i = 0; i < batch; ++i, ++sent) {
          size_t size = ring_test::message_size(kSeed, sent, kSlotBytes);
          ring_test::fill_message(writer.reserve(deadline_in(30s)).first(size), kSeed, sent);
          writer.commit(size);
        }
        writer.flush();
      }
    } catch (const std::exception& e) {
      producer_error = e.what();
    }
  });
  std::mt19937 rng(2);
  uint64_t received = 0;
  std::string error;
  while (received < kMessages && error.empty()) {
    uint64_t batch = std::min<uint64_t>(kMessages - received, 1 + rng() % 4);
    for (uint64_t i = 0; i < batch && error.empty(); ++i, ++received) {
      RingMessage m = reader.peek(deadline_in(30s));
      if (m.sequence != received)
        error = fmt::format("sequence {} where {} was expected", m.sequence, received);
      else
        error = ring_test::check_message(m.bytes, kSeed, received, kSlotBytes);
    }
    reader.release();
  }
  producer.join();
  EXPECT_EQ(producer_error, "");
  EXPECT_EQ(error, "");
  EXPECT_EQ(received, kMessages);
  EXPECT_FALSE(reader.try_peek());
  std::printf("[ info ] %llu messages between two threads in %.2f s\n",
              (unsigned long long)kMessages,
              std::chrono::duration<double>(steady_clock::now() - start).count());
}

}  // namespace
}  // namespace tandem
