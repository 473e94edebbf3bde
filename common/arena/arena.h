// The weight arena: the model, laid out once in one shared-memory file in the
// layouts the kernels want, mapped read-only by every process of a run (see
// arena_format.h for the file, arena_plan.h for where tensors go).
//
// The loader calls Arena::open_or_build(): an arena at the path whose model
// identity and plan match is adopted as it is (nothing is rewritten);
// otherwise a new one is built beside it and renamed into place. Workers call
// Arena::open() and find their tensors by name and worker index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/arena/arena_format.h"
#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/shm/shm_file.h"
#include "kernels/cpu/cpu_isa.h"

namespace capnp {
class FlatArrayMessageReader;
}

namespace tandem {
class ModelSource;
}

namespace tandem::arena {

// One tensor, or one worker's slice of a routed-expert tensor, in the arena.
struct ArenaTensor {
  std::string name;
  int worker = -1;                 // -1: dense
  int node = -1;                   // physical NUMA node it is bound to, -1: none
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;     // stored (slice) shape, row-major
  std::string layout;              // kernel layout (kernels/cpu/weight_layout.h)
  uint64_t slice_begin = 0, slice_end = 0;  // F range of an expert slice
  std::span<const std::byte> bytes;
};

struct BuildProgress {
  uint64_t bytes_done = 0, bytes_total = 0;
  double seconds = 0;
};

struct BuildOptions {
  // Physical NUMA node of each expert worker; several workers may share one
  // (virtual nodes). The default is one worker on node 0.
  std::vector<int> worker_nodes{0};
  // Alignment of tensors and regions; 0 picks the file system's page size
  // (the huge page size on hugetlbfs).
  uint64_t alignment = 0;
  // The expert workers' kernel level: routed expert slices are stored in
  // the layouts its kernels read fastest (arena_plan.h); the loader passes
  // the level it detects. Generic: every slice rowmajor.
  kernels::CpuIsa repack_for = kernels::CpuIsa::kGeneric;
  // Called about once a second while building, and once at the end; when
  // empty, progress is logged (bytes, rate, ETA).
  std::function<void(const BuildProgress&)> on_progress;
};

struct BuildStats {
  bool built = false;              // false: an existing arena was adopted
  std::string reason;              // why it was built or adopted
  uint64_t tensors_written = 0;    // tensors and slices written
  uint64_t bytes_written = 0;
  double seconds = 0;
  bool numa_bound = false;         // worker regions were mbind'ed
};

class Arena {
 public:
  Arena(Arena&&) noexcept;
  Arena& operator=(Arena&&) noexcept;
  ~Arena();

  // Maps an arena read-only and validates its header, manifest and every
  // tensor's byte range; throws tandem::Error naming the path and the problem
  // (kNotFound when there is no file).
  static Arena open(const std::string& path);
  // Adopts the arena at path if it was built from these very files with the
  // same plan; otherwise builds it. Either way returns it opened read-only.
  static Arena open_or_build(const std::string& path, const ModelSource& src,
                             const BuildOptions& options, BuildStats* stats = nullptr);
  // Builds unconditionally (replacing what is at path) and returns the stats.
  static BuildStats build(const std::string& path, const ModelSource& src,
                          const BuildOptions& options);

  const std::string& path() const { return path_; }
  const ArenaHeader& header() const;
  size_t size() const { return map_.size(); }
  const std::byte* data() const { return map_.data(); }

  const std::vector<ArenaTensor>& tensors() const { return tensors_; }
  // A dense tensor (worker -1) or one worker's slice; nullptr if absent.
  const ArenaTensor* find(std::string_view name, int worker = -1) const;
  const ArenaTensor& at(std::string_view name, int worker = -1) const;  // throws kNotFound
  const std::vector<int>& worker_nodes() const { return worker_nodes_; }
  const std::string& source_path() const { return source_path_; }
  bool source_is_hf() const { return source_is_hf_; }
  const std::string& architecture() const { return architecture_; }
  // The manifest as stored, for processes that forward it.
  std::span<const std::byte> manifest_bytes() const;

 private:
  Arena() = default;
  std::string path_;
  FileDescriptor fd_;
  Mapping map_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  std::vector<ArenaTensor> tensors_;
  std::vector<int> worker_nodes_;
  std::string source_path_;
  bool source_is_hf_ = false;
  std::string architecture_;
};

// The alignment BuildOptions::alignment = 0 means for a file in `dir`: the
// huge page size on hugetlbfs, the base page size elsewhere.
uint64_t default_alignment(const std::string& dir);

}  // namespace tandem::arena
