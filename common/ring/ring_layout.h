// The bytes of a ring file, shared by every process that maps it. Internal
// to ring.cpp and its tests; users go through ring.h.
//
//   [0, 128)      Header       written once by the creator, then read-only
//   [128, 256)    ProducerLine written by the writer (the reader only flips
//                 reader_sleeping, and only on its way to sleep)
//   [256, 384)    ConsumerLine written by the reader (the writer only flips
//                 writer_sleeping, likewise)
//   [4096, ...)   slot_count slots of slot_stride bytes: a 16-byte SlotHeader,
//                 then up to slot_bytes of payload
//
// Each line is 64 bytes of data padded to 128: adjacent-line prefetchers
// fetch 64-byte lines in pairs, so two hot 64-byte neighbours would still
// bounce between the cores. The fast path of each side touches its own line,
// its cached copy of the peer's index and the slots; the peer's line is read
// only when the cached index says the ring is full (writer) or empty (reader).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/shm/process.h"

namespace tandem::ring_layout {

inline constexpr uint64_t kMagic = 0x31474e4952444e54ull;  // "TNDRING1" read little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kLineBytes = 128;
inline constexpr size_t kSlotHeaderBytes = 16;
inline constexpr size_t kSlotAlign = 64;
inline constexpr size_t kSlotsOffset = 4096;
inline constexpr uint32_t kMaxSlotCount = 1u << 20;
inline constexpr uint32_t kMaxSlotBytes = 64u << 20;

struct alignas(kLineBytes) Header {
  std::atomic<uint64_t> magic;  // stored last, with release, by the creator
  uint32_t version;
  uint32_t slot_count;   // a power of two
  uint32_t slot_bytes;   // payload capacity of one slot
  uint32_t slot_stride;  // bytes from one slot to the next (64-byte multiple)
  uint64_t file_bytes;
};

struct alignas(kLineBytes) ProducerLine {
  // Messages published so far = the sequence number of the next message.
  // Only the writer stores it; its low 32 bits are the futex word readers
  // sleep on. Never reset: a restarted writer continues from it.
  std::atomic<uint64_t> tail;
  // The attached writer, pack_identity(ProcessId); 0 while none is attached.
  // Attaching claims it with a compare-exchange from 0 or a dead writer.
  std::atomic<uint64_t> writer;
  // How many writers have attached; 0 = never. Slots carry the epoch of the
  // writer that filled them.
  std::atomic<uint32_t> writer_epoch;
  // Set by the reader just before it sleeps on `tail`. It lives on the
  // writer's line because the writer checks it after every publish: the
  // check hits the writer's own cache; the reader writes it only when it is
  // about to sleep anyway.
  std::atomic<uint32_t> reader_sleeping;
};

struct alignas(kLineBytes) ConsumerLine {
  // Messages released so far; only the reader stores it. Futex word (low
  // half) for a writer that waits for space.
  std::atomic<uint64_t> head;
  std::atomic<uint64_t> reader;        // as ProducerLine::writer
  std::atomic<uint32_t> reader_epoch;  // how many readers have attached
  std::atomic<uint32_t> writer_sleeping;
};

// Written by the writer before the tail store that publishes the slot, read
// by the reader after the tail load that reveals it: plain memory.
struct SlotHeader {
  uint32_t length;    // payload bytes
  uint32_t epoch;     // writer_epoch of the writer that filled the slot
  uint64_t sequence;  // the ring index of this message
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes);

struct Control {
  Header header;
  ProducerLine producer;
  ConsumerLine consumer;
};
static_assert(sizeof(Control) <= kSlotsOffset);
static_assert(offsetof(Control, producer) % kLineBytes == 0);
static_assert(offsetof(Control, consumer) - offsetof(Control, producer) >= kLineBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "ring atomics must be address-free to work across processes");

// A ProcessId in one word, so that claiming and reading a ring end is a
// single atomic operation: the pid in the high half, the low 32 bits of the
// start time (clock ticks since boot) in the low half. 0 means "nobody".
inline uint64_t pack_identity(const ProcessId& id) {
  return (uint64_t(uint32_t(id.pid)) << 32) | (id.start_ticks & 0xffffffffu);
}
inline pid_t identity_pid(uint64_t identity) { return pid_t(identity >> 32); }

}  // namespace tandem::ring_layout
