#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/error.h"

namespace tandem::kernels {
namespace {

// A job of `items` pieces handed out from a counter, as moe_forward's steps
// are: counts how often each piece ran and which threads took part.
struct CountedWork {
  explicit CountedWork(int items) : done(size_t(items)) {}
  std::vector<std::atomic<int>> done;
  std::atomic<int> next{0};
  std::atomic<int> calls{0};
  std::atomic<uint32_t> indices{0};  // bit i: thread index i was called
  std::atomic<int> bad_size{0};
};

void take_pieces(CountedWork& w, int index, int n, int expected_n) {
  w.calls.fetch_add(1);
  w.indices.fetch_or(uint32_t(1) << index);
  if (n != expected_n) w.bad_size.fetch_add(1);
  for (int i = w.next.fetch_add(1); i < int(w.done.size()); i = w.next.fetch_add(1)) w.done[size_t(i)].fetch_add(1);
}

TEST(ThreadPool, RunCallsEveryThreadOnceWithItsIndex) {
  for (int spin : {0, 200}) {
    ThreadPool pool = ThreadPool::create({4, {}, false, spin});
    ASSERT_EQ(pool.size(), 4);
    for (int rep = 0; rep < 50; ++rep) {
      std::atomic<int> hits[4] = {};
      auto job = [&](int i, int n) {
        ASSERT_EQ(n, 4);
        hits[i].fetch_add(1);
      };
      pool.run(job);
      for (int i = 0; i < 4; ++i) ASSERT_EQ(hits[i].load(), 1) << "thread " << i << ", spin " << spin;
    }
  }
}

// run_shared: every piece runs exactly once, the caller is always index 0,
// and no thread is still in (or enters) the job after run_shared returns,
// whether the other threads were spinning or asleep; run() between shared
// jobs still reaches every thread (a thread that skipped a shared job does
// not lose count).
TEST(ThreadPool, SharedJobsRunEachPieceOnceAndEndWithTheCall) {
  for (int spin : {0, 50, 100000}) {
    ThreadPool pool = ThreadPool::create({3, {}, false, spin});
    int joined_late = 0;
    for (int rep = 0; rep < 300; ++rep) {
      auto work = std::make_unique<CountedWork>(rep % 7 == 0 ? 1 : 64);
      auto shared = [&](int i, int n) { take_pieces(*work, i, n, 3); };
      pool.run_shared(shared);
      const int calls = work->calls.load();
      for (size_t k = 0; k < work->done.size(); ++k) ASSERT_EQ(work->done[k].load(), 1) << "piece " << k;
      ASSERT_EQ(work->bad_size.load(), 0);
      ASSERT_TRUE(work->indices.load() & 1u) << "the caller takes part as index 0";
      ASSERT_GE(calls, 1);
      ASSERT_LE(calls, 3);
      if (calls > 1) ++joined_late;
      if (rep % 10 == 0) {
        // a call entering after the return would be counted here
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ASSERT_EQ(work->calls.load(), calls) << "a thread entered the job after run_shared returned";
      }
      if (rep % 3 == 0) {
        std::atomic<int> hits[3] = {};
        auto all = [&](int i, int) { hits[i].fetch_add(1); };
        pool.run(all);
        for (int i = 0; i < 3; ++i) ASSERT_EQ(hits[i].load(), 1) << "run() after shared jobs, thread " << i;
      }
    }
    if (spin == 100000) {
      EXPECT_GT(joined_late, 0) << "spinning threads join shared jobs";
    }
  }
}

// A shared job completes when the other threads sleep through it: the
// caller alone takes every piece if it has to.
TEST(ThreadPool, SharedJobCompletesWithTheCallerAlone) {
  ThreadPool pool = ThreadPool::create({2, {}, false, 0});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the other thread is asleep
  CountedWork work(1000);
  auto shared = [&](int i, int n) { take_pieces(work, i, n, 2); };
  pool.run_shared(shared);
  for (auto& d : work.done) {
    ASSERT_EQ(d.load(), 1);
  }
}

TEST(ThreadPool, CreateRefusesNoThreads) {
  EXPECT_THROW(ThreadPool::create({0, {}, false, 0}), Error);
}

}  // namespace
}  // namespace tandem::kernels
