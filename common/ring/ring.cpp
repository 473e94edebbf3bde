#include "common/ring/ring.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/ring/futex.h"
#include "common/ring/ring_layout.h"
#include "common/shm/process.h"

namespace tandem {
namespace L = ring_layout;
using std::chrono::steady_clock;

namespace {

// Tells the core we are spinning: frees the sibling hyperthread's resources
// and avoids the memory-order mis-speculation flush when the line changes.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

bool identity_alive(uint64_t identity) {
  if (identity == 0) return false;
  auto now = find_process(L::identity_pid(identity));
  return now && L::pack_identity(*now) == identity;
}

// "pid N" for messages; a peer that detached before we saw it has no pid.
std::string who(uint64_t identity) {
  return identity ? fmt::format("pid {}", L::identity_pid(identity)) : std::string("pid unknown");
}

long long elapsed_ms(steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - since).count();
}

// Waits until `index` differs from `stuck` and returns its new value. Spins
// for options.spin, then sleeps on the index's futex word in slices of at
// most options.slice; before each slice `check_peer()` throws if the peer is
// lost, and once `deadline` has passed `timeout()` throws. `sleeping` is the
// flag the peer reads after it moves `index` (see "Memory ordering" in
// ring.h for why the flag store and the index re-load are seq_cst).
//
// check_peer(probe) always looks at the peer's epoch and owner word (two
// loads); with probe it also asks /proc whether the owner still lives, which
// costs tens of microseconds, so that happens at most once per slice per
// end (`next_probe`), however many short waits a slow peer causes.
template <typename CheckPeer, typename Timeout>
uint64_t wait_for_change(const RingOptions& options, const std::atomic<uint64_t>& index,
                         uint64_t stuck, std::atomic<uint32_t>& sleeping, Deadline deadline,
                         Deadline& next_probe, CheckPeer&& check_peer, Timeout&& timeout) {
  if (options.spin.count() > 0) {
    auto spin_end = steady_clock::now() + options.spin;
    for (;;) {
      // Reading the clock costs ~20 ns; check it every 64 pauses only.
      for (int i = 0; i < 64; ++i) {
        uint64_t v = index.load(std::memory_order_acquire);
        if (v != stuck) return v;
        cpu_relax();
      }
      if (steady_clock::now() >= spin_end) break;
    }
  }
  auto slice = std::chrono::duration_cast<steady_clock::duration>(options.slice);
  for (;;) {
    auto now = steady_clock::now();
    bool probe = now >= next_probe;
    if (probe) next_probe = now + slice;
    check_peer(probe);
    if (now >= deadline) timeout();
    Deadline slice_end = std::min<Deadline>(deadline, now + slice);
    sleeping.store(1, std::memory_order_seq_cst);
    uint64_t v = index.load(std::memory_order_seq_cst);
    if (v != stuck) {
      sleeping.store(0, std::memory_order_relaxed);
      return v;
    }
    // Any return (wake, changed value, timeout, signal) leads to a re-check.
    futex::wait(futex::low_half(index), uint32_t(stuck), slice_end);
    sleeping.store(0, std::memory_order_relaxed);
    v = index.load(std::memory_order_acquire);
    if (v != stuck) return v;
  }
}

// Claims one end of a ring: compare-exchange of the owner word from 0 or a
// dead owner to us. A live owner (including ourselves) is refused.
void claim_end(std::atomic<uint64_t>& owner, uint64_t self, const char* role,
               const std::string& path) {
  uint64_t current = owner.load(std::memory_order_acquire);
  for (;;) {
    if (current != 0 && identity_alive(current))
      throw Error(ErrorKind::kInvalidInput,
                  fmt::format("ring {}: cannot attach a {}: pid {} is attached and alive", path,
                              role, L::identity_pid(current)));
    if (owner.compare_exchange_weak(current, self, std::memory_order_acq_rel,
                                    std::memory_order_acquire))
      return;
  }
}

// Clears the owner word if it is still ours.
void release_end(std::atomic<uint64_t>& owner, uint64_t self) {
  uint64_t expected = self;
  owner.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed);
}

}  // namespace

// ---------------------------------------------------------------- RingFile

RingFile RingFile::create(const std::string& path, RingShape shape) {
  if (shape.slot_count < 2 || shape.slot_count > L::kMaxSlotCount ||
      !std::has_single_bit(shape.slot_count))
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {}: slot count {} is not a power of two in [2, {}]", path,
                            shape.slot_count, L::kMaxSlotCount));
  if (shape.slot_bytes == 0 || shape.slot_bytes > L::kMaxSlotBytes)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {}: slot size {} bytes is not in [1, {}]", path,
                            shape.slot_bytes, L::kMaxSlotBytes));
  size_t stride = (L::kSlotHeaderBytes + shape.slot_bytes + L::kSlotAlign - 1) /
                  L::kSlotAlign * L::kSlotAlign;
  uint64_t file_bytes = L::kSlotsOffset + uint64_t(shape.slot_count) * stride;

  RingFile ring;
  ring.path_ = path;
  FileDescriptor fd = create_shared_file(path, file_bytes, /*reserve=*/true);
  ring.mapping_ = Mapping::map_shared(fd.get(), file_bytes, Access::kReadWrite, path);
  // The file is zero-filled; constructing Control there starts the atomics'
  // lifetimes with the same zeros.
  auto* control = new (ring.mapping_.data()) L::Control();
  control->header.version = L::kVersion;
  control->header.slot_count = shape.slot_count;
  control->header.slot_bytes = shape.slot_bytes;
  control->header.slot_stride = uint32_t(stride);
  control->header.file_bytes = file_bytes;
  // Last, with release: an opener that sees the magic sees the fields.
  control->header.magic.store(L::kMagic, std::memory_order_release);
  ring.control_ = control;
  ring.slots_ = ring.mapping_.data() + L::kSlotsOffset;
  ring.shape_ = shape;
  ring.stride_ = stride;
  return ring;
}

RingFile RingFile::open(const std::string& path) {
  RingFile ring;
  ring.path_ = path;
  FileDescriptor fd = open_shared_file(path, Access::kReadWrite);
  uint64_t size = file_size(fd.get(), path);
  if (size < L::kSlotsOffset)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("{} is not a ring: {} bytes is too short", path, size));
  ring.mapping_ = Mapping::map_shared(fd.get(), size, Access::kReadWrite, path);
  auto* control = std::launder(reinterpret_cast<L::Control*>(ring.mapping_.data()));
  const L::Header& h = control->header;
  if (h.magic.load(std::memory_order_acquire) != L::kMagic)
    throw Error(ErrorKind::kInvalidInput, fmt::format("{} is not a ring (bad magic)", path));
  if (h.version != L::kVersion)
    throw Error(ErrorKind::kUnsupported,
                fmt::format("ring {} has version {}; this build reads {}", path, h.version,
                            L::kVersion));
  size_t stride = (L::kSlotHeaderBytes + uint64_t(h.slot_bytes) + L::kSlotAlign - 1) /
                  L::kSlotAlign * L::kSlotAlign;
  if (h.slot_count < 2 || h.slot_count > L::kMaxSlotCount || !std::has_single_bit(h.slot_count) ||
      h.slot_bytes == 0 || h.slot_bytes > L::kMaxSlotBytes || h.slot_stride != stride ||
      h.file_bytes != size || size != L::kSlotsOffset + uint64_t(h.slot_count) * stride)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {} has an inconsistent header ({} slots of {} bytes, stride {}, "
                            "{} bytes recorded, {} on disk)",
                            path, h.slot_count, h.slot_bytes, h.slot_stride, h.file_bytes, size));
  ring.control_ = control;
  ring.slots_ = ring.mapping_.data() + L::kSlotsOffset;
  ring.shape_ = {h.slot_count, h.slot_bytes};
  ring.stride_ = stride;
  return ring;
}

// ---------------------------------------------------------------- RingWriter

RingWriter::RingWriter(RingWriter&& o) noexcept = default;

RingWriter& RingWriter::operator=(RingWriter&& o) noexcept {
  if (this != &o) {
    detach();
    file_ = std::move(o.file_);
    options_ = o.options_;
    self_ = o.self_;
    slot_count_ = o.slot_count_;
    slot_bytes_ = o.slot_bytes_;
    tail_ = o.tail_;
    cached_head_ = o.cached_head_;
    staged_ = o.staged_;
    reserved_ = o.reserved_;
    epoch_ = o.epoch_;
    reader_epoch_ = o.reader_epoch_;
    reader_identity_ = o.reader_identity_;
    reported_reader_ = o.reported_reader_;
    next_probe_ = o.next_probe_;
  }
  return *this;
}

RingWriter::~RingWriter() { detach(); }

void RingWriter::detach() {
  if (!file_) return;
  release_end(file_->control().producer.writer, self_);
  file_.reset();
}

RingWriter RingWriter::attach(const std::string& path, RingOptions options) {
  return attach(std::make_shared<const RingFile>(RingFile::open(path)), options);
}

RingWriter RingWriter::attach(std::shared_ptr<const RingFile> file, RingOptions options) {
  RingWriter w;
  L::Control& c = file->control();
  w.self_ = L::pack_identity(self_process());
  claim_end(c.producer.writer, w.self_, "writer", file->path());
  // Read the tail before publishing the new epoch: a reader that sees the
  // epoch then also sees every message the previous writer published.
  w.tail_ = c.producer.tail.load(std::memory_order_acquire);
  w.cached_head_ = c.consumer.head.load(std::memory_order_acquire);
  w.reader_epoch_ = c.consumer.reader_epoch.load(std::memory_order_acquire);
  w.reader_identity_ = c.consumer.reader.load(std::memory_order_acquire);
  // A writer killed in its sleep leaves its flag set, which would cost the
  // reader a futex_wake per release until we next sleep: it is ours now.
  c.consumer.writer_sleeping.store(0, std::memory_order_relaxed);
  w.epoch_ = c.producer.writer_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  w.slot_count_ = file->shape().slot_count;
  w.slot_bytes_ = file->shape().slot_bytes;
  w.options_ = options;
  w.file_ = std::move(file);
  spdlog::debug("ring {}: writer attached (epoch {}, next sequence {})", w.path(), w.epoch_,
                w.tail_);
  return w;
}

uint64_t RingWriter::released_sequence() const {
  return file_->control().consumer.head.load(std::memory_order_acquire);
}

// Reloads the head, and notices a reader that replaced the one last seen.
bool RingWriter::refresh_head() {
  L::ConsumerLine& k = file_->control().consumer;
  cached_head_ = k.head.load(std::memory_order_acquire);
  uint32_t e = k.reader_epoch.load(std::memory_order_acquire);
  if (e != reader_epoch_) reader_replaced(e);
  return next_sequence() - cached_head_ < slot_count_;
}

void RingWriter::reader_replaced(uint32_t new_epoch) {
  uint32_t old = reader_epoch_;
  uint64_t old_identity = reader_identity_;
  reader_epoch_ = new_epoch;
  reader_identity_ = file_->control().consumer.reader.load(std::memory_order_acquire);
  if (old == 0 || reported_reader_ == old) {
    spdlog::info("ring {}: reader {} attached (reader epoch {})", path(),
                 who(reader_identity_), new_epoch);
    return;
  }
  reported_reader_ = old;
  std::string msg = fmt::format(
      "ring {}: the reader ({}, epoch {}) was replaced by {} (epoch {}); it had released "
      "messages below sequence {}, the new reader starts there",
      path(), who(old_identity), old, who(reader_identity_), new_epoch,
      cached_head_);
  spdlog::warn("{}", msg);
  throw Error(ErrorKind::kPeerLost, msg);
}

void RingWriter::reader_lost(const std::string& how) {
  bool first = reported_reader_ != reader_epoch_;
  reported_reader_ = reader_epoch_;
  std::string msg = fmt::format(
      "ring {}: the reader ({}, epoch {}) {}; the writer (epoch {}) is at message {}, the "
      "reader had released messages below {}",
      path(), who(reader_identity_), reader_epoch_, how, epoch_, next_sequence(),
      cached_head_);
  if (first) spdlog::warn("{}", msg);
  throw Error(ErrorKind::kPeerLost, msg);
}

void RingWriter::check_reader_while_waiting(bool probe) {
  L::ConsumerLine& k = file_->control().consumer;
  uint32_t e = k.reader_epoch.load(std::memory_order_acquire);
  if (e != reader_epoch_) reader_replaced(e);
  uint64_t id = k.reader.load(std::memory_order_acquire);
  if (id == 0) {
    if (reader_epoch_ == 0) return;  // none attached yet: wait for one until the deadline
    reader_lost("detached");
  }
  if (probe && !identity_alive(id)) {
    // A new reader may be between its claim and its epoch: look again later.
    if (k.reader_epoch.load(std::memory_order_acquire) != reader_epoch_) return;
    reader_identity_ = id;
    reader_lost("died");
  }
  reader_identity_ = id;
}

void RingWriter::check_peer() {
  refresh_head();
  L::ConsumerLine& k = file_->control().consumer;
  uint64_t id = k.reader.load(std::memory_order_acquire);
  if (id == 0 && reader_epoch_ != 0) reader_lost("detached");
  if (id != 0 && !identity_alive(id) &&
      k.reader_epoch.load(std::memory_order_acquire) == reader_epoch_) {
    reader_identity_ = id;
    reader_lost("died");
  }
}

std::span<std::byte> RingWriter::reserve(Deadline deadline) {
  uint64_t want = next_sequence();
  if (want - cached_head_ >= slot_count_ && !refresh_head()) {
    flush();  // the reader cannot free what it cannot see
    auto start = steady_clock::now();
    L::Control& c = file_->control();
    cached_head_ = wait_for_change(
        options_, c.consumer.head, cached_head_, c.consumer.writer_sleeping, deadline,
        next_probe_, [&](bool probe) { check_reader_while_waiting(probe); },
        [&] {
          throw Error(ErrorKind::kTimeout,
                      fmt::format("ring {}: timed out after {} ms waiting for a free slot for "
                                  "message {}: {}; it has released messages below {}",
                                  path(), elapsed_ms(start), want,
                                  reader_epoch_ == 0
                                      ? std::string("no reader has attached")
                                      : fmt::format("the reader ({}, epoch {}) is alive",
                                                    who(reader_identity_),
                                                    reader_epoch_),
                                  cached_head_));
        });
  }
  reserved_ = true;
  return {file_->slot(want) + L::kSlotHeaderBytes, slot_bytes_};
}

void RingWriter::commit(size_t bytes) {
  if (!reserved_)
    throw Error(ErrorKind::kInternal, fmt::format("ring {}: commit() without reserve()", path()));
  if (bytes > slot_bytes_)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {}: a {}-byte message does not fit a {}-byte slot", path(), bytes,
                            slot_bytes_));
  uint64_t index = next_sequence();
  L::SlotHeader header{uint32_t(bytes), epoch_, index};
  std::memcpy(file_->slot(index), &header, sizeof header);
  ++staged_;
  reserved_ = false;
}

void RingWriter::flush() {
  if (staged_ == 0) return;
  tail_ += staged_;
  staged_ = 0;
  L::ProducerLine& p = file_->control().producer;
  // Release publishes the slots; seq_cst also orders this store before the
  // load of reader_sleeping (the wake-up handshake).
  p.tail.store(tail_, std::memory_order_seq_cst);
  if (p.reader_sleeping.load(std::memory_order_seq_cst)) futex::wake(futex::low_half(p.tail));
}

void RingWriter::send(std::span<const std::byte> message, Deadline deadline) {
  if (message.size() > slot_bytes_)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {}: a {}-byte message does not fit a {}-byte slot", path(),
                            message.size(), slot_bytes_));
  std::span<std::byte> slot = reserve(deadline);
  if (!message.empty()) std::memcpy(slot.data(), message.data(), message.size());
  publish(message.size());
}

// ---------------------------------------------------------------- RingReader

RingReader::RingReader(RingReader&& o) noexcept = default;

RingReader& RingReader::operator=(RingReader&& o) noexcept {
  if (this != &o) {
    detach();
    file_ = std::move(o.file_);
    options_ = o.options_;
    self_ = o.self_;
    slot_bytes_ = o.slot_bytes_;
    head_ = o.head_;
    cached_tail_ = o.cached_tail_;
    peeked_ = o.peeked_;
    epoch_ = o.epoch_;
    writer_epoch_ = o.writer_epoch_;
    writer_identity_ = o.writer_identity_;
    reported_writer_ = o.reported_writer_;
    next_probe_ = o.next_probe_;
  }
  return *this;
}

RingReader::~RingReader() { detach(); }

void RingReader::detach() {
  if (!file_) return;
  release_end(file_->control().consumer.reader, self_);
  file_.reset();
}

RingReader RingReader::attach(const std::string& path, RingOptions options) {
  return attach(std::make_shared<const RingFile>(RingFile::open(path)), options);
}

RingReader RingReader::attach(std::shared_ptr<const RingFile> file, RingOptions options) {
  RingReader r;
  L::Control& c = file->control();
  r.self_ = L::pack_identity(self_process());
  claim_end(c.consumer.reader, r.self_, "reader", file->path());
  r.head_ = c.consumer.head.load(std::memory_order_acquire);
  // The writer epoch before the tail (see RingWriter::attach): messages
  // beyond the tail seen here come from this epoch or a later one.
  uint32_t writer_epoch = c.producer.writer_epoch.load(std::memory_order_acquire);
  r.cached_tail_ = c.producer.tail.load(std::memory_order_acquire);
  if (r.cached_tail_ != r.head_) {
    // Queued messages: start with the epoch of the oldest one.
    L::SlotHeader h;
    std::memcpy(&h, file->slot(r.head_), sizeof h);
    writer_epoch = h.epoch;
  }
  r.writer_epoch_ = writer_epoch;
  r.writer_identity_ = c.producer.writer.load(std::memory_order_acquire);
  c.producer.reader_sleeping.store(0, std::memory_order_relaxed);  // as in RingWriter::attach
  r.epoch_ = c.consumer.reader_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  r.slot_bytes_ = file->shape().slot_bytes;
  r.options_ = options;
  r.file_ = std::move(file);
  spdlog::debug("ring {}: reader attached (epoch {}, next sequence {})", r.path(), r.epoch_,
                r.head_);
  return r;
}

RingMessage RingReader::take(uint64_t index) {
  const std::byte* slot = file_->slot(index);
  L::SlotHeader h;
  std::memcpy(&h, slot, sizeof h);
  if (h.sequence != index || h.length > slot_bytes_)
    throw Error(ErrorKind::kInternal,
                fmt::format("ring {}: slot for message {} holds sequence {} of {} bytes (slot "
                            "size {}): the ring is corrupt",
                            path(), index, h.sequence, h.length, slot_bytes_));
  if (h.epoch != writer_epoch_) {
    if (h.epoch < writer_epoch_)
      throw Error(ErrorKind::kInternal,
                  fmt::format("ring {}: message {} comes from writer epoch {}, older than the "
                              "adopted epoch {}: refusing a stale slot",
                              path(), index, h.epoch, writer_epoch_));
    writer_replaced(h.epoch);
  }
  ++peeked_;
  return {{slot + L::kSlotHeaderBytes, h.length}, index, h.epoch};
}

void RingReader::writer_replaced(uint32_t new_epoch) {
  uint32_t old = writer_epoch_;
  uint64_t old_identity = writer_identity_;
  writer_epoch_ = new_epoch;
  writer_identity_ = file_->control().producer.writer.load(std::memory_order_acquire);
  if (old == 0 || reported_writer_ == old) {
    spdlog::info("ring {}: writer {} attached (writer epoch {})", path(),
                 who(writer_identity_), new_epoch);
    return;
  }
  reported_writer_ = old;
  std::string msg = fmt::format(
      "ring {}: the writer ({}, epoch {}) was replaced by {} (epoch {}); messages from "
      "sequence {} on come from the new writer",
      path(), who(old_identity), old, who(writer_identity_), new_epoch,
      next_sequence());
  spdlog::warn("{}", msg);
  throw Error(ErrorKind::kPeerLost, msg);
}

void RingReader::writer_lost(const std::string& how) {
  bool first = reported_writer_ != writer_epoch_;
  reported_writer_ = writer_epoch_;
  std::string msg = fmt::format(
      "ring {}: the writer ({}, epoch {}) {}; the reader (epoch {}) has every message below "
      "sequence {}",
      path(), who(writer_identity_), writer_epoch_, how, epoch_, next_sequence());
  if (first) spdlog::warn("{}", msg);
  throw Error(ErrorKind::kPeerLost, msg);
}

void RingReader::check_writer_while_waiting(bool probe) {
  L::ProducerLine& p = file_->control().producer;
  uint32_t e = p.writer_epoch.load(std::memory_order_acquire);
  if (e != writer_epoch_) {
    // Deliver whatever the old writer published before reporting it gone.
    if (p.tail.load(std::memory_order_acquire) != next_sequence()) return;
    writer_replaced(e);
  }
  uint64_t id = p.writer.load(std::memory_order_acquire);
  if (id == 0) {
    if (writer_epoch_ == 0) return;  // none attached yet: wait for one until the deadline
    writer_lost("detached");
  }
  if (probe && !identity_alive(id)) {
    if (p.writer_epoch.load(std::memory_order_acquire) != writer_epoch_) return;
    writer_identity_ = id;
    writer_lost("died");
  }
  writer_identity_ = id;
}

void RingReader::check_peer() {
  L::ProducerLine& p = file_->control().producer;
  uint64_t id = p.writer.load(std::memory_order_acquire);
  if (id == 0 && p.writer_epoch.load(std::memory_order_acquire) != 0) writer_lost("detached");
  if (id != 0 && !identity_alive(id)) {
    writer_identity_ = id;
    writer_lost("died");
  }
}

RingMessage RingReader::peek(Deadline deadline) {
  uint64_t want = next_sequence();
  if (want == cached_tail_) {
    L::ProducerLine& p = file_->control().producer;
    cached_tail_ = p.tail.load(std::memory_order_acquire);
    if (want == cached_tail_) {
      auto start = steady_clock::now();
      cached_tail_ = wait_for_change(
          options_, p.tail, want, p.reader_sleeping, deadline, next_probe_,
          [&](bool probe) { check_writer_while_waiting(probe); },
          [&] {
            throw Error(ErrorKind::kTimeout,
                        fmt::format("ring {}: timed out after {} ms waiting for message {}: {}",
                                    path(), elapsed_ms(start), want,
                                    writer_epoch_ == 0
                                        ? std::string("no writer has attached")
                                        : fmt::format("the writer ({}, epoch {}) is alive",
                                                      who(writer_identity_),
                                                      writer_epoch_)));
          });
    }
  }
  return take(want);
}

std::optional<RingMessage> RingReader::try_peek() {
  uint64_t want = next_sequence();
  if (want == cached_tail_) {
    cached_tail_ = file_->control().producer.tail.load(std::memory_order_acquire);
    if (want == cached_tail_) return std::nullopt;
  }
  return take(want);
}

void RingReader::release() {
  if (peeked_ == 0) return;
  head_ += peeked_;
  peeked_ = 0;
  L::ConsumerLine& k = file_->control().consumer;
  // Release: our reads of the slots happen before the writer reuses them;
  // seq_cst: the wake-up handshake, as in RingWriter::flush.
  k.head.store(head_, std::memory_order_seq_cst);
  if (k.writer_sleeping.load(std::memory_order_seq_cst)) futex::wake(futex::low_half(k.head));
}

size_t RingReader::receive(std::span<std::byte> buffer, Deadline deadline, uint64_t* sequence) {
  RingMessage m = peek(deadline);
  if (m.bytes.size() > buffer.size()) {
    --peeked_;  // leave it to be peeked again
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("ring {}: message {} has {} bytes, the buffer only {}", path(),
                            m.sequence, m.bytes.size(), buffer.size()));
  }
  if (!m.bytes.empty()) std::memcpy(buffer.data(), m.bytes.data(), m.bytes.size());
  if (sequence) *sequence = m.sequence;
  release();
  return m.bytes.size();
}

}  // namespace tandem
