// Shared-memory files and their mappings. Every file Tandem shares between
// processes (the weight arena, activation rings) is a regular file in the
// run's private directory on a memory file system (/dev/shm or hugetlbfs),
// created 0600 with O_EXCL and opened with O_NOFOLLOW; opening one that
// another user owns, or that others may read, is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

struct stat;

#include "common/mapped_file.h"

namespace tandem {

enum class Access { kReadOnly, kReadWrite };

// Owns one mmap'ed range; unmaps it once. Move-only.
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& o) noexcept;
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  // Maps `size` bytes of fd from offset 0, shared. `what` names the file in
  // errors.
  static Mapping map_shared(int fd, size_t size, Access access, const std::string& what);

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void reset();
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Creates path exclusively (fails if it exists), mode 0600, sized to `size`
// bytes. With `reserve`, the memory is reserved now (fallocate), so a full
// /dev/shm is an error here rather than a SIGBUS at first touch.
FileDescriptor create_shared_file(const std::string& path, uint64_t size, bool reserve);
// Reserves [0, size) of an existing shared file (see create_shared_file).
void reserve_shared_file(int fd, uint64_t size, const std::string& what);
// Opens an existing shared file. Refuses symlinks, files of another user and
// files readable or writable by group or others.
FileDescriptor open_shared_file(const std::string& path, Access access);
// Throws kInvalidInput unless st (of `path`) belongs to this user and has no
// group or other permission bits; `fix` is appended to the latter message.
void require_private(const struct stat& st, const std::string& path, std::string_view fix);
// Size in bytes of an open file.
uint64_t file_size(int fd, const std::string& what);

}  // namespace tandem
