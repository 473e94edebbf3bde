// Test messages for the ring tests: the size and bytes of message `sequence`
// are a pure function of (seed, sequence), so a reader in another process,
// or a restarted writer, agrees on them without talking. Each message is
//   [sequence u64][checksum u64][data: size - 16 bytes]
// and the checksum covers the data, so the reader detects lost, duplicated
// or reordered messages (sequence) and torn or stale bytes (checksum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include <fmt/format.h>

namespace tandem::ring_test {

inline constexpr size_t kMessageHeader = 16;

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Mostly small messages (15 in 16 between 16 and 128 bytes), the rest
// anywhere up to `max`: exercises full slots without making 10 million
// messages slow.
inline size_t message_size(uint64_t seed, uint64_t sequence, size_t max) {
  uint64_t r = mix(seed ^ (sequence * 0x2545f4914f6cdd1dull));
  size_t top = (r & 15) == 0 ? max : std::min<size_t>(max, 128);
  return kMessageHeader + size_t((r >> 8) % (top - kMessageHeader + 1));
}

// Generates the data words and folds them into the checksum in one pass.
template <bool kWrite>
inline uint64_t data_pass(std::byte* data, size_t n, uint64_t seed, uint64_t sequence,
                          bool* equal = nullptr) {
  uint64_t state = mix(seed + sequence);
  uint64_t sum = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i += 8) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t w = state ^ (state >> 29);
    size_t k = std::min<size_t>(8, n - i);
    uint64_t want = 0;  // the k bytes that go into the message
    std::memcpy(&want, &w, k);
    if constexpr (kWrite) {
      std::memcpy(data + i, &want, k);
    } else {
      uint64_t got = 0;
      std::memcpy(&got, data + i, k);
      if (got != want) *equal = false;
      want = got;
    }
    sum = (sum ^ want) * 0x100000001b3ull;
  }
  return sum;
}

inline void fill_message(std::span<std::byte> out, uint64_t seed, uint64_t sequence) {
  uint64_t sum = data_pass<true>(out.data() + kMessageHeader, out.size() - kMessageHeader, seed,
                                 sequence);
  std::memcpy(out.data(), &sequence, 8);
  std::memcpy(out.data() + 8, &sum, 8);
}

// Empty string if the message is message `sequence`, else what is wrong.
inline std::string check_message(std::span<const std::byte> in, uint64_t seed, uint64_t sequence,
                                 size_t max) {
  size_t want = message_size(seed, sequence, max);
  if (in.size() != want) return fmt::format("message {}: {} bytes, expected {}", sequence, in.size(), want);
  uint64_t got_sequence = 0, got_sum = 0;
  std::memcpy(&got_sequence, in.data(), 8);
  std::memcpy(&got_sum, in.data() + 8, 8);
  if (got_sequence != sequence)
    return fmt::format("expected message {}, got message {}", sequence, got_sequence);
  bool equal = true;
  uint64_t sum = data_pass<false>(const_cast<std::byte*>(in.data()) + kMessageHeader,
                                  in.size() - kMessageHeader, seed, sequence, &equal);
  if (sum != got_sum || !equal) return fmt::format("message {}: checksum mismatch", sequence);
  return {};
}

}  // namespace tandem::ring_test
