#include "services/gpu_worker/sequence_file.h"

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/shm_file.h"

namespace tandem::gpu {

namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'S', 'E', 'Q', '\0'};
constexpr uint32_t kVersion = 1;

size_t history_bytes(int64_t size) { return (size_t(size) * sizeof(uint32_t) + 7) / 8 * 8; }

size_t file_bytes(int64_t n_layers, int64_t k_width, int64_t v_width, int64_t size) {
  return sizeof(SequenceFileHeader) + history_bytes(size) +
         size_t(n_layers) * size_t(size) * size_t(k_width + v_width) * sizeof(float);
}

}  // namespace

void write_sequence_file(const std::string& path, const engine::KvCache& cache, int64_t n_layers,
                         std::span<const uint32_t> history) {
  const int64_t n = cache.size();
  if (int64_t(history.size()) != n)
    fail(ErrorKind::kInternal, "{}: a history of {} tokens for a cache of {}", path, history.size(), n);
  const size_t bytes = file_bytes(n_layers, cache.k_width(), cache.v_width(), n);
  FileDescriptor fd = create_shared_file(path, bytes, true);  // exclusive: another's file stays
  try {
    Mapping m = Mapping::map_shared(fd.get(), bytes, Access::kReadWrite, path);
    std::byte* at = m.data();
    SequenceFileHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.n_layers = uint32_t(n_layers);
    h.k_width = cache.k_width();
    h.v_width = cache.v_width();
    h.size = n;
    std::memcpy(at, &h, sizeof h);
    at += sizeof h;
    if (n > 0) std::memcpy(at, history.data(), history.size_bytes());
    at += history_bytes(n);
    for (int64_t l = 0; l < n_layers; ++l) {
      const size_t kb = size_t(n * cache.k_width()) * sizeof(float), vb = size_t(n * cache.v_width()) * sizeof(float);
      if (kb) std::memcpy(at, cache.k(l, 0), kb);
      at += kb;
      if (vb) std::memcpy(at, cache.v(l, 0), vb);
      at += vb;
    }
  } catch (...) {
    remove_quietly(path);
    throw;
  }
}

std::vector<uint32_t> read_sequence_file(const std::string& path, engine::KvCache& cache, int64_t n_layers) {
  if (cache.size() != 0) fail(ErrorKind::kInternal, "{}: read into a cache that holds {} positions", path, cache.size());
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail(ErrorKind::kNotFound, "sequence file {} does not exist (its sender failed or it was read already)", path);
  struct Remove {
    const std::string& path;
    ~Remove() { remove_quietly(path); }
  } remove{path};
  FileDescriptor fd = open_shared_file(path, Access::kReadOnly);
  const uint64_t bytes = file_size(fd.get(), path);
  if (bytes < sizeof(SequenceFileHeader)) fail_invalid("sequence file {}: {} bytes, shorter than its header", path, bytes);
  Mapping m = Mapping::map_shared(fd.get(), size_t(bytes), Access::kReadOnly, path);
  SequenceFileHeader h;
  std::memcpy(&h, m.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion)
    fail_invalid("sequence file {}: not a sequence file of version {}", path, kVersion);
  if (int64_t(h.n_layers) != n_layers || h.k_width != cache.k_width() || h.v_width != cache.v_width())
    fail_invalid("sequence file {}: {} layers of widths {}/{}, this model has {} of {}/{}", path, h.n_layers,
                 h.k_width, h.v_width, n_layers, cache.k_width(), cache.v_width());
  if (h.size < 0 || h.size > cache.capacity())
    fail_invalid("sequence file {}: {} positions do not fit a cache of {}", path, h.size, cache.capacity());
  if (bytes != file_bytes(n_layers, h.k_width, h.v_width, h.size))
    fail_invalid("sequence file {}: {} bytes, expected {} for {} positions", path, bytes,
                 file_bytes(n_layers, h.k_width, h.v_width, h.size), h.size);
  const std::byte* at = m.data() + sizeof h;
  std::vector<uint32_t> history(size_t(h.size));
  if (h.size > 0) std::memcpy(history.data(), at, history.size() * sizeof(uint32_t));
  at += history_bytes(h.size);
  for (int64_t l = 0; l < n_layers; ++l) {
    const size_t kb = size_t(h.size * h.k_width) * sizeof(float), vb = size_t(h.size * h.v_width) * sizeof(float);
    if (kb) std::memcpy(cache.k(l, 0), at, kb);
    at += kb;
    if (vb) std::memcpy(cache.v(l, 0), at, vb);
    at += vb;
  }
  cache.advance(h.size);
  return history;
}

}  // namespace tandem::gpu
