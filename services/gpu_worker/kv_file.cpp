#include "services/gpu_worker/kv_file.h"

#include <atomic>
#include <climits>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/shm/process.h"

namespace tandem::gpu {

namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'K', 'V', '1', '\0'};

struct Header {
  char magic[8];
  uint32_t n_layers;
  uint32_t top_logprobs_plus_one;  // SequenceParams::top_logprobs + 1
  uint64_t coordinator_pid, coordinator_ticks;
  uint64_t sequence;
  int64_t capacity, k_width, v_width;
  float temperature, top_p, min_p, repetition_penalty;
  int32_t top_k, repeat_last_n;
  uint64_t seed;
  alignas(64) std::atomic<int64_t> committed;  // its own cache line
  uint8_t pad[64 - sizeof(std::atomic<int64_t>)];
};
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(sizeof(Header) % 64 == 0);

size_t history_bytes(int64_t capacity) { return (size_t(capacity) * sizeof(uint32_t) + 63) / 64 * 64; }

size_t file_bytes(const ModelConfig& c, int64_t capacity) {
  return sizeof(Header) + history_bytes(capacity) + engine::KvCache::floats_for(c, capacity) * sizeof(float);
}

Header* header(const Mapping& m) { return reinterpret_cast<Header*>(m.data()); }

}  // namespace

KvFile KvFile::create(const std::string& path, const ModelConfig& c, uint64_t sequence, const SequenceParams& params,
                      const ProcessId& coordinator) {
  remove_quietly(path);  // a predecessor's copy of this sequence (it is being reopened)
  const size_t bytes = file_bytes(c, params.capacity);
  KvFile f;
  f.path_ = path;
  f.params_ = params;
  try {  // the path is this call's now: a file half made (no space) goes
    FileDescriptor fd = create_shared_file(path, bytes, true);
    f.map_ = Mapping::map_shared(fd.get(), bytes, Access::kReadWrite, path);
  } catch (...) {
    remove_quietly(path);
    throw;
  }
  Header* h = new (f.map_.data()) Header{};
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  engine::KvCache probe(c, 0);
  h->n_layers = c.n_layers;
  h->top_logprobs_plus_one = uint32_t(params.top_logprobs + 1);
  h->coordinator_pid = uint64_t(coordinator.pid);
  h->coordinator_ticks = coordinator.start_ticks;
  h->sequence = sequence;
  h->capacity = params.capacity;
  h->k_width = probe.k_width();
  h->v_width = probe.v_width();
  const engine::SamplingParams& s = params.sampling;
  h->temperature = s.temperature;
  h->top_p = s.top_p;
  h->min_p = s.min_p;
  h->repetition_penalty = s.repetition_penalty;
  h->top_k = s.top_k;
  h->repeat_last_n = s.repeat_last_n;
  h->seed = s.seed;
  h->committed.store(0, std::memory_order_release);
  return f;
}

std::optional<ProcessId> KvFile::owner(const std::string& path) {
  try {
    FileDescriptor fd = open_shared_file(path, Access::kReadOnly);
    if (file_size(fd.get(), path) < sizeof(Header)) return std::nullopt;
    Mapping m = Mapping::map_shared(fd.get(), sizeof(Header), Access::kReadOnly, path);
    const Header* h = header(m);
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
    return ProcessId{pid_t(h->coordinator_pid), h->coordinator_ticks};
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<KvFile> KvFile::adopt(const std::string& path, const ModelConfig& c, uint64_t sequence,
                                    const ProcessId& coordinator) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  KvFile f;
  f.path_ = path;
  std::string why;
  try {
    FileDescriptor fd = open_shared_file(path, Access::kReadWrite);
    const uint64_t bytes = file_size(fd.get(), path);
    if (bytes < sizeof(Header)) {
      why = "shorter than its header";
    } else {
      f.map_ = Mapping::map_shared(fd.get(), size_t(bytes), Access::kReadWrite, path);
      const Header* h = header(f.map_);
      engine::KvCache probe(c, 0);
      if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) why = "not a KV file";
      else if (h->coordinator_pid != uint64_t(coordinator.pid) || h->coordinator_ticks != coordinator.start_ticks)
        why = "another coordinator's";
      else if (h->sequence != sequence) why = "another sequence's";
      else if (h->n_layers != c.n_layers || h->k_width != probe.k_width() || h->v_width != probe.v_width())
        why = "another model's";
      else if (h->capacity < 1 || h->capacity > INT32_MAX || bytes != file_bytes(c, h->capacity))
        why = "of the wrong size";
      else if (h->committed.load(std::memory_order_acquire) > h->capacity) why = "committed beyond its capacity";
      else if (h->top_logprobs_plus_one > 21) why = "with bad parameters";
    }
  } catch (const Error& e) {
    why = e.what();
  }
  if (!why.empty()) {
    spdlog::warn("not adopting {} ({}); removing it", path, why);
    remove_quietly(path);
    return std::nullopt;
  }
  const Header* h = header(f.map_);
  f.params_.capacity = h->capacity;
  f.params_.top_logprobs = int(h->top_logprobs_plus_one) - 1;
  engine::SamplingParams& s = f.params_.sampling;
  s.temperature = h->temperature;
  s.top_p = h->top_p;
  s.min_p = h->min_p;
  s.repetition_penalty = h->repetition_penalty;
  s.top_k = h->top_k;
  s.repeat_last_n = h->repeat_last_n;
  s.seed = h->seed;
  return f;
}

engine::KvCache KvFile::cache(const ModelConfig& c, int64_t size) {
  const Header* h = header(map_);
  float* rows = reinterpret_cast<float*>(map_.data() + sizeof(Header) + history_bytes(h->capacity));
  return engine::KvCache(c, h->capacity, {rows, engine::KvCache::floats_for(c, h->capacity)}, size);
}

std::span<uint32_t> KvFile::history() {
  return {reinterpret_cast<uint32_t*>(map_.data() + sizeof(Header)), size_t(header(map_)->capacity)};
}

int64_t KvFile::committed() const { return header(map_)->committed.load(std::memory_order_acquire); }

void KvFile::commit(int64_t n) { header(map_)->committed.store(n, std::memory_order_release); }

void KvFile::remove() { remove_quietly(path_); }

}  // namespace tandem::gpu
