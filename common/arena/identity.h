// The identity of a model's source files and a small stable hash used for it
// and for the arena plan: an arena whose identities match what a new loader
// would build is adopted instead of rebuilt.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::arena {

// FNV-1a over bytes, fed field by field. Stable across runs and builds (it is
// stored in arena files), unlike std::hash.
class Hasher {
 public:
  Hasher& add(std::string_view s);
  Hasher& add(uint64_t v);
  Hasher& add(int64_t v) { return add(uint64_t(v)); }
  Hasher& add(uint32_t v) { return add(uint64_t(v)); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

struct SourceFileId {
  std::string path;  // absolute
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct ModelIdentity {
  std::vector<SourceFileId> files;
  uint64_t hash = 0;
};

// Stats each file (throws tandem::Error naming a file that cannot be read)
// and hashes their absolute paths, sizes and modification times.
ModelIdentity identify_files(const std::vector<std::string>& paths);

}  // namespace tandem::arena
