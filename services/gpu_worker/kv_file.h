// A gpu worker's sequence in a shared-memory file of the run directory: its
// KV cache rows, token history and parameters, with a committed position
// count. A restarted gpu worker adopts the file and goes on from any
// position up to the committed one, so the coordinator retries the step
// that was in flight instead of replaying the whole sequence (step.h).
//
// A step writes rows and history beyond the committed count, then commits;
// a kill before the commit leaves the committed prefix intact (the rows
// beyond it are overwritten by the retry). A file names the coordinator it
// belongs to: another coordinator's sequence ids mean other sequences, so
// its files are never adopted (they are swept when the worker joins a new
// coordinator).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/engine/kv_cache.h"
#include "common/mapped_file.h"
#include "common/shm/process.h"
#include "common/shm/shm_file.h"
#include "services/gpu_worker/step.h"

namespace tandem::gpu {

class KvFile {
 public:
  KvFile(KvFile&&) noexcept = default;
  KvFile& operator=(KvFile&&) noexcept = default;

  // A new file for `sequence` (an old one at `path` is replaced), sized for
  // params.capacity positions. Throws tandem::Error (kSystem with errno).
  static KvFile create(const std::string& path, const ModelConfig& c, uint64_t sequence, const SequenceParams& params,
                       const ProcessId& coordinator);
  // The file at `path` if it holds `sequence` of `coordinator` for this
  // model; nullopt if there is none. A file that does not fit (another
  // model, truncated, another coordinator's) is removed and nullopt returned.
  static std::optional<KvFile> adopt(const std::string& path, const ModelConfig& c, uint64_t sequence,
                                     const ProcessId& coordinator);
  // The coordinator a file at `path` belongs to, if it is a KV file.
  static std::optional<ProcessId> owner(const std::string& path);

  // A cache over the file's rows, holding `size` positions (<= committed()).
  engine::KvCache cache(const ModelConfig& c, int64_t size);
  std::span<uint32_t> history();  // capacity entries; [0, committed) valid
  int64_t committed() const;
  // Rows and history [0, n) are complete.
  void commit(int64_t n);
  const SequenceParams& params() const { return params_; }
  const std::string& path() const { return path_; }
  // Deletes the file (the mapping stays valid until this object goes).
  void remove();

 private:
  KvFile() = default;
  std::string path_;
  Mapping map_;
  SequenceParams params_;
};

}  // namespace tandem::gpu
