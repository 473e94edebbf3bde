// Bounds-checked little-endian reads from a byte span. Every read checks the
// remaining length first, so a truncated or lying header becomes an Error
// naming what was being read and where, never a read past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/error.h"

namespace tandem {

class ByteReader {
 public:
  ByteReader(std::span<const std::byte> bytes, std::string_view label)
      : bytes_(bytes), label_(label) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A u64 length followed by that many bytes; max_len guards absurd lengths.
  std::string_view read_string(std::string_view what, uint64_t max_len) {
    uint64_t n = read<uint64_t>(what);
    if (n > max_len)
      fail_invalid("{}: {} has length {} at offset {}, more than the limit {}", label_, what, n,
                   pos_ - 8, max_len);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail_invalid("{}: truncated while reading {} at offset {} (need {} bytes, {} left)", label_,
                   what, pos_, n, remaining());
  }

 private:
  std::span<const std::byte> bytes_;
  std::string_view label_;
  size_t pos_ = 0;
};

}  // namespace tandem
