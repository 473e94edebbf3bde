#include "common/shm/shm_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "common/error.h"

namespace tandem {

Mapping::Mapping(Mapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

Mapping::~Mapping() { reset(); }

void Mapping::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Mapping Mapping::map_shared(int fd, size_t size, Access access, const std::string& what) {
  if (size == 0) throw Error(ErrorKind::kInvalidInput, fmt::format("cannot map {}: it is empty", what));
  int prot = access == Access::kReadOnly ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    throw Error(ErrorKind::kSystem,
                fmt::format("cannot map {} ({} bytes): {}", what, size, std::strerror(err)), err);
  }
  Mapping m;
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = size;
  return m;
}

FileDescriptor create_shared_file(const std::string& path, uint64_t size, bool reserve) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    throw Error(ErrorKind::kSystem, fmt::format("cannot create {}: {}", path, std::strerror(err)),
                err);
  }
  FileDescriptor owner(fd);
  // The umask cannot widen 0600, but an inherited ACL default could: set it.
  if (::fchmod(fd, 0600) != 0) fail_errno(errno, "fchmod " + path, __FILE__, __LINE__);
  if (::ftruncate(fd, off_t(size)) != 0) {
    int err = errno;
    throw Error(ErrorKind::kSystem,
                fmt::format("cannot size {} to {} bytes: {}", path, size, std::strerror(err)), err);
  }
  if (reserve) reserve_shared_file(fd, size, path);
  return owner;
}

void reserve_shared_file(int fd, uint64_t size, const std::string& what) {
  if (size == 0) return;
  int rc = ::posix_fallocate(fd, 0, off_t(size));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
    throw Error(ErrorKind::kSystem,
                fmt::format("cannot reserve {} bytes for {}: {}{}", size, what, std::strerror(rc),
                            rc == ENOSPC ? " (the memory file system is full: see df /dev/shm)"
                                         : ""),
                rc);
}

FileDescriptor open_shared_file(const std::string& path, Access access) {
  int flags = (access == Access::kReadOnly ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    throw Error(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kSystem,
                fmt::format("cannot open {}: {}{}", path, std::strerror(err),
                            err == ELOOP ? " (a symbolic link: refused)" : ""),
                err);
  }
  FileDescriptor owner(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_errno(errno, "fstat " + path, __FILE__, __LINE__);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::kInvalidInput, fmt::format("{} is not a regular file", path));
  require_private(st, path, "");
  return owner;
}

void require_private(const struct stat& st, const std::string& path, std::string_view fix) {
  if (st.st_uid != ::getuid())
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("{} belongs to uid {}, not to this user (uid {}): refused", path,
                            st.st_uid, ::getuid()));
  if (st.st_mode & 077)
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("{} has mode {:o}: group or others may access it, refused{}", path,
                            st.st_mode & 0777, fix));
}

uint64_t file_size(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_errno(errno, "fstat " + what, __FILE__, __LINE__);
  return uint64_t(st.st_size);
}

}  // namespace tandem
