// Read-only memory mappings of whole files: the zero-copy base of the model
// readers. Move-only owners of an fd and a mapping, made by a factory that
// throws with errno and the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tandem {

// Owns a file descriptor; closes it once.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.release()) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  static FileDescriptor open_read_only(const std::string& path);

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A whole file mapped read-only. An empty file maps to an empty span.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  static MappedFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Modification time in nanoseconds, for model identity hashes.
  int64_t mtime_ns() const { return mtime_ns_; }

 private:
  void reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace tandem
