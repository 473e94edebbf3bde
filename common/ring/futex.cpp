#include "common/ring/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <ctime>

#include "common/error.h"

namespace tandem::futex {

static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4,
              "a futex word must be a plain 32-bit word");
static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8);

WaitResult wait(const void* word, uint32_t expected, Deadline deadline) {
  auto since_boot = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch());
  if (since_boot.count() < 0) since_boot = std::chrono::nanoseconds(0);
  timespec ts{};
  ts.tv_sec = time_t(since_boot.count() / 1'000'000'000);
  ts.tv_nsec = long(since_boot.count() % 1'000'000'000);
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout (plain
  // FUTEX_WAIT takes a relative one), which is what steady_clock is on Linux;
  // an absolute deadline also survives EINTR retries without drifting.
  long rc = ::syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, &ts, nullptr,
                      FUTEX_BITSET_MATCH_ANY);
  if (rc == 0) return WaitResult::kWoken;
  int err = errno;
  switch (err) {
    case EAGAIN: return WaitResult::kValueChanged;
    case ETIMEDOUT: return WaitResult::kTimedOut;
    case EINTR: return WaitResult::kInterrupted;
    default: fail_errno(err, "futex wait", __FILE__, __LINE__);
  }
}

int wake(const void* word, int count) {
  long rc = ::syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0);
  if (rc < 0) fail_errno(errno, "futex wake", __FILE__, __LINE__);
  return int(rc);
}

const void* low_half(const std::atomic<uint64_t>& word) {
  static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big);
  const char* base = reinterpret_cast<const char*>(&word);
  return std::endian::native == std::endian::little ? base : base + 4;
}

}  // namespace tandem::futex
