#include "common/arena/identity.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace tandem::arena {

Hasher& Hasher::add(std::string_view s) {
  add(uint64_t(s.size()));  // length first: ("ab","c") and ("a","bc") differ
  for (unsigned char c : s) {
    h_ ^= c;
    h_ *= 0x100000001b3ull;
  }
  return *this;
}

Hasher& Hasher::add(uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h_ ^= (v >> (8 * i)) & 0xff;
    h_ *= 0x100000001b3ull;
  }
  return *this;
}

ModelIdentity identify_files(const std::vector<std::string>& paths) {
  ModelIdentity id;
  Hasher h;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      int err = errno;
      throw Error(ErrorKind::kSystem, fmt::format("cannot stat model file {}: {}", p, std::strerror(err)), err);
    }
    SourceFileId f{std::filesystem::absolute(p).lexically_normal().string(), uint64_t(st.st_size),
                   int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    h.add(f.path).add(f.size).add(f.mtime_ns);
    id.files.push_back(std::move(f));
  }
  id.hash = h.value();
  return id;
}

}  // namespace tandem::arena
