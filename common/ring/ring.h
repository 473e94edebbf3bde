// Activation rings: single-producer/single-consumer message rings in shared
// memory, one per (requester, expert worker) pair and direction.
//
// A ring is one file in the run directory (ring_layout.h has its bytes). The
// requester creates both rings of a pair with RingFile::create before it
// starts (or restarts) the worker and hands it the paths; each side then
// attaches its end: RingWriter on one process, RingReader on the other. The
// requester never deletes a ring while the run lives, so a restarted worker
// re-attaches to the same file; the run directory's removal frees it.
//
// Messages: fixed slots of slot_bytes. The writer fills a slot in place
// (reserve -> write -> publish), the reader reads it in place (peek -> read
// -> release). Every message has a sequence number: its ring index, counted
// from 0 when the ring was created and never reset, not even by a restart.
// Batching: commit() stages a filled slot without publishing it and flush()
// publishes every staged slot with one store; peek() may be called several
// times before one release(). Wake-ups are cheap: a side only makes the futex
// syscall when the peer has said it is asleep.
//
// Waiting: every blocking call takes a deadline. It spins (RingOptions::spin),
// then sleeps on a futex in slices of at most RingOptions::slice, and checks
// between slices that the peer process is still the one that attached
// (is_alive: pid plus start time, so pid reuse cannot fool it). A dead or
// detached peer -> tandem::Error kPeerLost; the deadline passing while the
// peer lives -> kTimeout. Both name the ring file, the peer's role, pid and
// epoch, and what the call was waiting for. Nothing waits forever.
//
// Epochs and restarts (one writer and one reader at a time; attaching an end
// whose current owner is alive is refused with kInvalidInput):
//  - Attaching claims the end (compare-exchange of the packed ProcessId from
//    0 or a dead owner) and then increments that end's epoch.
//  - A restarted WRITER continues at the shared tail. It never touches slots
//    below the tail: they are complete messages the reader may be reading.
//    A slot the dead writer had reserved or staged but not published lies at
//    or above the tail and is never seen: the new writer overwrites it. Its
//    messages carry the new epoch. The reader delivers every message the old
//    writer published (they are whole: published means the tail store
//    happened after the bytes were written), then, at the first message of
//    the new epoch (or, when the ring is empty, on seeing the new epoch in the
//    producer line), throws kPeerLost once, adopts the new epoch and goes on.
//    If it already reported the old writer lost (it waited on an empty ring
//    while the writer was dead) it adopts the new epoch silently: one report
//    per lost writer. A slot whose epoch is older than the one adopted, or
//    whose sequence is not its index, is never delivered (kInternal).
//  - A restarted READER continues at the shared head: messages the dead
//    reader had peeked but not released are delivered again (at-least-once
//    across a reader restart; compare sequence numbers to spot them).
//    Messages the dead reader released are gone: the writer can see how far
//    that was with released_sequence(). The writer never overwrites a slot
//    below head + slot_count, so a live reader's peeked slots are safe. The
//    writer learns of the new reader when it next looks at the consumer line
//    (when its cached head says the ring is full, or in check_peer) and
//    throws kPeerLost once unless it already reported that reader lost.
//  - A graceful detach (destroying the end) clears the owner but not the
//    epoch; the peer sees "detached" as kPeerLost when it has to wait.
// So, for re-driving work after a worker restart, the requester knows:
// requests with sequence < released_sequence() were taken by the dead
// worker (their answers may be missing), the rest will be read by the new
// one; responses are delivered up to the last one the dead worker published,
// and the kPeerLost between them marks where the old worker's stream ended.
//
// Memory ordering (x86 makes the acquire/release free; the seq_cst pairs
// cost one locked instruction per flush/release, not per message):
//  - Writer: writes payload and SlotHeader (plain stores), then
//    tail.store(release): the reader's tail.load(acquire) that sees the new
//    tail therefore sees the bytes.
//  - Reader: reads slots only below the acquired tail, then
//    head.store(release): the writer's head.load(acquire) that sees it
//    orders the reader's reads before the writer's reuse of those slots.
//  - Sleep/wake is a store-buffering (Dekker) pattern: the sleeper stores its
//    sleeping flag and then re-loads the peer's index; the peer stores its
//    index and then loads the flag. All four are seq_cst, so at least one side
//    sees the other: either the sleeper sees the new index and does not
//    sleep, or the peer sees the flag and wakes it (and the futex value check
//    covers a wake that arrives before the sleeper is in the kernel).
//    seq_cst operations rather than fences, because ThreadSanitizer does not
//    model atomic_thread_fence.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/shm/shm_file.h"

namespace tandem {

namespace ring_layout {
struct Control;
}

using Deadline = std::chrono::steady_clock::time_point;
// now + d, the usual way to make a deadline.
inline Deadline deadline_in(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

struct RingShape {
  uint32_t slot_count = 0;  // a power of two, 2 .. 2^20
  uint32_t slot_bytes = 0;  // payload capacity of one slot, 1 .. 64 MiB
};

struct RingOptions {
  // How long a blocked call busy-waits (with a pause instruction) before it
  // sleeps on the futex. Round trips in the microseconds need both sides
  // spinning; 0 sleeps at once (kind to a machine with fewer cores than
  // spinning threads).
  std::chrono::nanoseconds spin = std::chrono::microseconds(50);
  // The longest single futex sleep; the peer's liveness is checked between
  // slices, so this bounds how late a dead peer is noticed.
  std::chrono::nanoseconds slice = std::chrono::milliseconds(20);
};

// The mapped ring file. Both ends of a ring in one process (tests, or a
// requester talking to itself) share one RingFile, so they use the same
// addresses, which is also what lets ThreadSanitizer see their
// synchronisation.
class RingFile {
 public:
  RingFile(RingFile&&) noexcept = default;
  RingFile& operator=(RingFile&&) noexcept = default;
  RingFile(const RingFile&) = delete;
  RingFile& operator=(const RingFile&) = delete;

  // Creates the file (0600, exclusive, memory reserved now) and formats it.
  static RingFile create(const std::string& path, RingShape shape);
  // Opens and validates a ring another process created.
  static RingFile open(const std::string& path);

  const std::string& path() const { return path_; }
  RingShape shape() const { return shape_; }
  ring_layout::Control& control() const { return *control_; }
  std::byte* slot(uint64_t index) const {
    return slots_ + (index & (shape_.slot_count - 1)) * stride_;
  }

 private:
  RingFile() = default;
  std::string path_;
  Mapping mapping_;
  ring_layout::Control* control_ = nullptr;
  std::byte* slots_ = nullptr;
  RingShape shape_;
  size_t stride_ = 0;
};

// One message as the reader sees it: valid until the reader's release().
struct RingMessage {
  std::span<const std::byte> bytes;
  uint64_t sequence = 0;      // ring index; consecutive across restarts
  uint32_t writer_epoch = 0;  // the epoch of the writer that published it
};

// The writing end. Move-only (a moved-from end may only be destroyed or
// assigned to); destroying it detaches (staged but unflushed messages are
// dropped, as if the writer had died). One thread at a time.
class RingWriter {
 public:
  RingWriter(RingWriter&& o) noexcept;
  RingWriter& operator=(RingWriter&& o) noexcept;
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;
  ~RingWriter();

  static RingWriter attach(const std::string& path, RingOptions options = {});
  static RingWriter attach(std::shared_ptr<const RingFile> file, RingOptions options = {});

  // The payload of the next free slot (slot_bytes long), waiting for space
  // until `deadline`. If the ring is full it first flushes staged messages
  // (so a batching writer cannot wait on itself). Calling it again before
  // commit() returns the same slot.
  std::span<std::byte> reserve(Deadline deadline);
  // Stages the reserved slot with its first `bytes` bytes as the message;
  // the reader cannot see it until flush().
  void commit(size_t bytes);
  // Publishes every staged message with one store; wakes the reader only if
  // it sleeps.
  void flush();
  void publish(size_t bytes) {
    commit(bytes);
    flush();
  }
  // reserve + copy + publish.
  void send(std::span<const std::byte> message, Deadline deadline);

  // Non-blocking: throws kPeerLost if the reader attached now is dead or
  // detached, or if a new reader replaced the one last seen (once).
  void check_peer();

  // The sequence number the next committed message will get.
  uint64_t next_sequence() const { return tail_ + staged_; }
  // Every message below this sequence has been released by a reader.
  uint64_t released_sequence() const;
  uint32_t epoch() const { return epoch_; }
  RingShape shape() const { return file_->shape(); }
  const std::string& path() const { return file_->path(); }

 private:
  RingWriter() = default;
  bool refresh_head();
  void check_reader_while_waiting(bool probe);
  void reader_replaced(uint32_t new_epoch);
  [[noreturn]] void reader_lost(const std::string& how);
  void detach();

  std::shared_ptr<const RingFile> file_;
  RingOptions options_;
  uint64_t self_ = 0;
  uint32_t slot_count_ = 0;
  uint32_t slot_bytes_ = 0;
  uint64_t tail_ = 0;         // this writer's copy of the shared tail
  uint64_t cached_head_ = 0;  // last head seen; the real one is >= this
  uint32_t staged_ = 0;
  bool reserved_ = false;
  uint32_t epoch_ = 0;
  uint32_t reader_epoch_ = 0;       // the reader epoch last seen
  uint64_t reader_identity_ = 0;    // the reader last seen (for messages)
  uint32_t reported_reader_ = ~0u;  // reader epoch already reported lost
  Deadline next_probe_{};           // when the reader's process may next be probed
};

// The reading end. Move-only, like RingWriter; destroying it detaches
// (peeked but unreleased messages will be delivered again to the next
// reader). One thread at a time.
class RingReader {
 public:
  RingReader(RingReader&& o) noexcept;
  RingReader& operator=(RingReader&& o) noexcept;
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;
  ~RingReader();

  static RingReader attach(const std::string& path, RingOptions options = {});
  static RingReader attach(std::shared_ptr<const RingFile> file, RingOptions options = {});

  // The next message not yet peeked, waiting until `deadline`. It stays
  // valid, in place, until release(). Do not wait for more messages while
  // holding a whole ring's worth: the writer needs a release to go on.
  RingMessage peek(Deadline deadline);
  // As peek, but returns nullopt at once if no message is there.
  std::optional<RingMessage> try_peek();
  // Frees every peeked message at once; wakes the writer only if it sleeps.
  void release();
  // peek + copy into `buffer` + release; returns the message's length and,
  // if `sequence` is given, its sequence number. A message longer than
  // `buffer` is kInvalidInput (and stays unreleased).
  size_t receive(std::span<std::byte> buffer, Deadline deadline, uint64_t* sequence = nullptr);

  // Non-blocking: throws kPeerLost if the writer attached now is dead or
  // detached (whether or not messages are still queued).
  void check_peer();

  // The sequence number of the next message peek() will return.
  uint64_t next_sequence() const { return head_ + peeked_; }
  uint32_t epoch() const { return epoch_; }
  // The writer epoch whose messages are being delivered.
  uint32_t writer_epoch() const { return writer_epoch_; }
  RingShape shape() const { return file_->shape(); }
  const std::string& path() const { return file_->path(); }

 private:
  RingReader() = default;
  RingMessage take(uint64_t index);
  void check_writer_while_waiting(bool probe);
  void writer_replaced(uint32_t new_epoch);
  [[noreturn]] void writer_lost(const std::string& how);
  void detach();

  std::shared_ptr<const RingFile> file_;
  RingOptions options_;
  uint64_t self_ = 0;
  uint32_t slot_bytes_ = 0;
  uint64_t head_ = 0;         // this reader's copy of the shared head
  uint64_t cached_tail_ = 0;  // last tail seen; the real one is >= this
  uint32_t peeked_ = 0;
  uint32_t epoch_ = 0;
  uint32_t writer_epoch_ = 0;       // adopted writer epoch (0: none yet)
  uint64_t writer_identity_ = 0;    // the writer last seen (for messages)
  uint32_t reported_writer_ = ~0u;  // writer epoch already reported lost
  Deadline next_probe_{};           // when the writer's process may next be probed
};

}  // namespace tandem
