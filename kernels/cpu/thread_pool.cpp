#include "kernels/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace tandem::kernels {
namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

// The entry word of a job: its generation's low 32 bits, a closed bit, and
// how many threads entered it. A thread enters with a compare-and-swap
// that checks both, so it can neither join a closed job nor one that a
// newer job has replaced while it was waking.
constexpr uint64_t kClosed = uint64_t(1) << 31;
constexpr uint64_t kEnteredMask = kClosed - 1;
inline uint64_t entry_of(uint64_t generation) { return (generation & 0xFFFFFFFFu) << 32; }

struct ThreadPool::State {
  Options options;
  std::vector<std::thread> threads;
  // A job is published by setting `entry` and then bumping `generation`;
  // each thread that enters it runs it and bumps `finished`.
  alignas(64) std::atomic<uint64_t> generation{0};
  alignas(64) std::atomic<uint64_t> entry{0};
  alignas(64) std::atomic<uint64_t> finished{0};
  alignas(64) std::atomic<bool> stop{false};
  void (*job)(void*, int, int) = nullptr;
  void* ctx = nullptr;

  bool enter(uint64_t g) {
    uint64_t v = entry.load(std::memory_order_acquire);
    for (;;) {
      if ((v & ~(kClosed | kEnteredMask)) != entry_of(g) || (v & kClosed)) return false;
      if (entry.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  }

  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation.load(std::memory_order_acquire);
      const auto spin_until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(options.spin_us);
      while (g == seen && !stop.load(std::memory_order_relaxed)) {
        if (std::chrono::steady_clock::now() > spin_until) {
          generation.wait(seen, std::memory_order_acquire);
        } else {  // the clock now and then; the word after every pause (a pause can be 64+ cycles)
          for (int k = 0; k < 64 && generation.load(std::memory_order_relaxed) == seen; ++k) cpu_relax();
        }
        g = generation.load(std::memory_order_acquire);
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = g;
      if (!enter(g)) continue;  // a shared job that closed before this thread woke
      job(ctx, index, int(threads.size()) + 1);
      finished.fetch_add(1, std::memory_order_acq_rel);  // run_job spins on it
    }
  }
};

namespace {
void pin_to(pthread_t thread, int cpu, const char* who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (int rc = pthread_setaffinity_np(thread, sizeof(set), &set); rc != 0)
    throw Error(ErrorKind::kSystem,
                std::string("pthread_setaffinity_np(") + who + " to cpu " + std::to_string(cpu) +
                    "): " + std::strerror(rc),
                rc);
}
}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    throw Error(ErrorKind::kSystem, std::string("sched_getaffinity: ") + std::strerror(errno), errno);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

ThreadPool ThreadPool::create(const Options& options) {
  if (options.threads < 1)
    throw Error(ErrorKind::kInvalidInput,
                "thread pool: " + std::to_string(options.threads) + " threads (need at least 1)");
  auto state = std::make_unique<State>();
  state->options = options;
  ThreadPool pool(std::move(state));
  State* s = pool.state_.get();
  const auto& cpus = options.cpus;
  if (options.pin_caller && !cpus.empty()) pin_to(pthread_self(), cpus[0], "the calling thread");
  for (int i = 1; i < options.threads; ++i) {
    try {
      s->threads.emplace_back([s, i] { s->loop(i); });
    } catch (const std::system_error& e) {
      throw Error(ErrorKind::kSystem, std::string("starting compute thread: ") + e.what(),
                  e.code().value());
    }
    if (!cpus.empty())
      pin_to(s->threads.back().native_handle(), cpus[size_t(i) % cpus.size()], "a compute thread");
  }
  return pool;
}

ThreadPool::ThreadPool(std::unique_ptr<State> state) : state_(std::move(state)) {}
ThreadPool::ThreadPool(ThreadPool&&) noexcept = default;
ThreadPool& ThreadPool::operator=(ThreadPool&& other) noexcept {
  if (this != &other) {
    ThreadPool gone(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

ThreadPool::~ThreadPool() {
  if (!state_) return;
  state_->stop.store(true, std::memory_order_release);
  state_->generation.fetch_add(1, std::memory_order_acq_rel);
  state_->generation.notify_all();
  for (auto& t : state_->threads) t.join();
}

int ThreadPool::size() const { return int(state_->threads.size()) + 1; }

void ThreadPool::run_job(void (*job)(void*, int, int), void* ctx, bool shared) {
  State& s = *state_;
  s.job = job;
  s.ctx = ctx;
  // Every thread that entered the previous job has finished it (below), so
  // nothing reads job, ctx or finished meanwhile.
  s.finished.store(0, std::memory_order_relaxed);
  const uint64_t g = s.generation.load(std::memory_order_relaxed) + 1;
  s.entry.store(entry_of(g), std::memory_order_release);
  s.generation.store(g, std::memory_order_release);
  if (!s.threads.empty()) s.generation.notify_all();
  job(ctx, 0, size());
  // A shared job closes now: threads that have not entered it skip it.
  const uint64_t entered =
      shared ? s.entry.fetch_or(kClosed, std::memory_order_acq_rel) & kEnteredMask : s.threads.size();
  while (s.finished.load(std::memory_order_acquire) != entered) {
    for (int k = 0; k < 16; ++k) cpu_relax();
  }
}

}  // namespace tandem::kernels
