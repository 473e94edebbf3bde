#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "common/error.h"

namespace tandem {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor FileDescriptor::open_read_only(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw Error(err == ENOENT ? ErrorKind::kNotFound : ErrorKind::kSystem,
                fmt::format("cannot open {}: {}", path, std::strerror(err)), err);
  }
  return FileDescriptor(fd);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mtime_ns_(o.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mtime_ns_ = o.mtime_ns_;
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ && size_) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile MappedFile::open(const std::string& path) {
  FileDescriptor fd = FileDescriptor::open_read_only(path);
  struct stat st {};
  TANDEM_SYSCALL(::fstat(fd.get(), &st));
  if (!S_ISREG(st.st_mode)) fail_invalid("{} is not a regular file", path);
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  m.mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) fail_errno(errno, "mmap " + path, __FILE__, __LINE__);
    m.data_ = static_cast<const std::byte*>(p);
  }
  return m;
}

}  // namespace tandem
