// Helpers of the corruption suite: an assertion that a call fails with a
// tandem::Error whose message says what is wrong, a byte-level GGUF builder
// for files the writer refuses to produce, raw safetensors files, temporary
// directories, fixture copies and rewrites of real model files.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/formats/gguf.h"
#include "tests/tiny_models.h"

namespace tandem::testing {

// Runs fn and checks that it throws a tandem::Error (not another exception
// type, not nothing) whose what() contains every needle and, if given, has
// the kind. The failure message shows what happened instead.
::testing::AssertionResult ThrowsError(const std::function<void()>& fn,
                                       std::initializer_list<std::string_view> needles,
                                       std::optional<ErrorKind> kind = std::nullopt);
// Like ThrowsError, but any one of the alternatives may match (each
// alternative a list of needles that must all be present).
::testing::AssertionResult ThrowsErrorAnyOf(const std::function<void()>& fn,
                                            const std::vector<std::vector<std::string>>& any_of);

#define EXPECT_TANDEM_ERROR(stmt, ...) \
  EXPECT_TRUE(::tandem::testing::ThrowsError([&] { stmt; }, __VA_ARGS__))

// The fixture directory (TANDEM_FIXTURES, else the path CMake saw), or "" if
// it does not exist. Tests that need it call GTEST_SKIP() when empty.
std::string fixtures_dir();

// A fresh directory under the test temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view name);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view file) const;

 private:
  std::string path_;
};

// Copies every regular file of src into dst (created), writable.
void copy_dir(const std::string& src, const std::string& dst);
void copy_file_writable(const std::string& src, const std::string& dst);
std::vector<std::byte> read_file(const std::string& path);
void write_file(const std::string& path, std::span<const std::byte> bytes);
void write_text(const std::string& path, std::string_view text);
std::string read_text(const std::string& path);

// An exact-size heap copy, so that AddressSanitizer sees any read past the end.
struct ExactBuffer {
  explicit ExactBuffer(std::span<const std::byte> b);
  std::unique_ptr<std::byte[]> data;
  size_t size;
  std::span<const std::byte> span() const { return {data.get(), size}; }
};

// Byte-level GGUF builder: writes exactly what it is told, in order.
class RawGguf {
 public:
  RawGguf& u8(uint8_t v) { return put(&v, 1); }
  RawGguf& u32(uint32_t v) { return put(&v, 4); }
  RawGguf& u64(uint64_t v) { return put(&v, 8); }
  RawGguf& i32(int32_t v) { return put(&v, 4); }
  RawGguf& f32(float v) { return put(&v, 4); }
  RawGguf& raw(std::string_view s) { return put(s.data(), s.size()); }
  RawGguf& str(std::string_view s) { return u64(s.size()).raw(s); }
  RawGguf& zeros(size_t n);
  // Pads with zeros to a multiple of alignment.
  RawGguf& pad(uint64_t alignment);

  // "GGUF", version, tensor count, metadata count.
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3);
  RawGguf& kv(std::string_view key, GgufType t) { return str(key).u32(uint32_t(t)); }
  RawGguf& kv_u32(std::string_view key, uint32_t v) { return kv(key, GgufType::kU32).u32(v); }
  RawGguf& kv_str(std::string_view key, std::string_view v) {
    return kv(key, GgufType::kString).str(v);
  }
  // ne in ggml order (ne[0] fastest), ggml type id, offset in the data section.
  RawGguf& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset);

  size_t size() const { return bytes_.size(); }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  RawGguf& put(const void* p, size_t n);
  std::vector<std::byte> bytes_;
};

// A safetensors file: the length prefix (the header's size unless given),
// the header text and data_bytes zero bytes.
std::vector<std::byte> raw_safetensors(std::string_view header, size_t data_bytes,
                                       std::optional<uint64_t> claimed_len = std::nullopt);

// Rewrites a safetensors file through SafetensorsWriter. edit may change an
// entry (name, dtype, shape, data) or return false to drop it; add appends.
struct StEntry {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::vector<std::byte> data;
};
void rewrite_safetensors(const std::string& src, const std::string& dst,
                         const std::function<bool(StEntry&)>& edit,
                         const std::vector<StEntry>& add = {});

// Rewrites a GGUF through GgufWriter (same alignment). edit_kv may change a
// value or return false to drop the key; edit_tensor likewise for tensors
// (shape row-major).
void rewrite_gguf(const std::string& src, const std::string& dst,
                  const std::function<bool(const std::string&, GgufValue&)>& edit_kv,
                  const std::function<bool(StEntry&)>& edit_tensor);

}  // namespace tandem::testing
