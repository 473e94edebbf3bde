// The compute threads of one kernel user (an expert worker's node, a
// benchmark): N-1 threads started once, optionally pinned one per CPU, plus
// the calling thread as thread 0. run() hands every thread the same job and
// returns when all have finished it; between jobs the threads spin briefly
// (a decode step's layers come back to back) and then sleep on a futex.
// run() itself never allocates.
//
// Waking a sleeping thread is slow where the CPU is virtual: on the
// development VM a futex wake reached the other vCPU after about 120 us,
// as long as a Qwen3-30B-A3B expert layer's whole batch-1 decode (0.3 ms).
// run_shared() is for jobs that hand out their work dynamically (an atomic
// task counter): the caller starts at once, threads join as they wake, and
// one that wakes after the caller's own call has returned skips the job, so
// a late thread costs its share of the time it slept, not the whole job's.
#pragma once

#include <memory>
#include <vector>

namespace tandem::kernels {

class ThreadPool {
 public:
  struct Options {
    int threads = 1;        // including the caller
    std::vector<int> cpus;  // thread i pinned to cpus[i % size]; empty: not pinned
    bool pin_caller = false;  // also pin the calling thread to cpus[0]
    int spin_us = 200;      // busy-wait this long for the next job before sleeping
  };

  // Starts the threads. Throws tandem::Error(kSystem) naming the call and
  // errno when a thread cannot be started or pinned; kInvalidInput for a
  // thread count below 1.
  static ThreadPool create(const Options& options);

  ThreadPool(ThreadPool&&) noexcept;
  ThreadPool& operator=(ThreadPool&&) noexcept;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();  // stops and joins the threads

  int size() const;

  // Calls fn(thread_index, size()) on every thread, index 0 on the caller.
  // One run at a time (from one thread).
  template <class F>
  void run(F& fn) {
    run_job([](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); }, &fn, false);
  }

  // Calls fn(thread_index, size()) on the caller (index 0) and on each other
  // thread that picks the job up before the caller's call returns; returns
  // when every call that started has returned. So fn(0, n) alone must
  // finish the job (later threads find nothing left to do), and fn must not
  // divide work by thread index. One run at a time (from one thread).
  template <class F>
  void run_shared(F& fn) {
    run_job([](void* ctx, int i, int n) { (*static_cast<F*>(ctx))(i, n); }, &fn, true);
  }

 private:
  struct State;
  explicit ThreadPool(std::unique_ptr<State> state);
  void run_job(void (*job)(void*, int, int), void* ctx, bool shared);
  std::unique_ptr<State> state_;
};

// The CPUs this process may run on (sched_getaffinity), in order.
std::vector<int> allowed_cpus();

}  // namespace tandem::kernels
