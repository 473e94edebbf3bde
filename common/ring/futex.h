// Futex wait and wake on 32-bit words in memory shared between processes.
//
// These are SHARED futexes (no FUTEX_PRIVATE_FLAG): the kernel keys them by
// the backing file and offset, so a waiter and a waker in different processes
// that map the same shared file meet on the same word even at different
// virtual addresses. A private futex would key on (mm, address) and never
// match across processes.
//
// A futex is only a sleep/wake hint: callers must re-check their condition
// after every return, because wakes can be spurious and signals interrupt.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tandem::futex {

using Deadline = std::chrono::steady_clock::time_point;

enum class WaitResult {
  kWoken,         // a wake arrived (or a spurious wakeup: re-check)
  kValueChanged,  // the word no longer held `expected` when the kernel looked
  kTimedOut,      // the deadline passed
  kInterrupted,   // a signal handler ran; the caller re-checks and may wait again
};

// Sleeps while the 32-bit word at `word` holds `expected`, until a wake, a
// signal or `deadline` (steady_clock, i.e. CLOCK_MONOTONIC, absolute).
// `word` must be 4-byte aligned and lie in memory every party maps shared.
// Throws tandem::Error only for errors that mean a bug (EFAULT, EINVAL).
WaitResult wait(const void* word, uint32_t expected, Deadline deadline);
inline WaitResult wait(const std::atomic<uint32_t>& word, uint32_t expected, Deadline deadline) {
  return wait(static_cast<const void*>(&word), expected, deadline);
}

// Wakes up to `count` waiters on `word`; returns how many were woken.
int wake(const void* word, int count = 1);
inline int wake(const std::atomic<uint32_t>& word, int count = 1) {
  return wake(static_cast<const void*>(&word), count);
}

// The address of the low 32 bits of a 64-bit atomic, so that a monotonic
// 64-bit index can serve as its own futex word. The ring only sleeps on an
// index that can move by at most slot_count (<= 2^20) before the sleeper
// looks again, so the low half always changes when the index does.
const void* low_half(const std::atomic<uint64_t>& word);

}  // namespace tandem::futex
