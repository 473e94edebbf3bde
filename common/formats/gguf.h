// GGUF (v2 and v3) reader: metadata of every value type, tensor infos and a
// zero-copy view of each tensor's data. Everything is validated on open:
// header sizes, string and array lengths against the bytes left, tensor
// types, shapes, alignment, data ranges inside the file and non-overlapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"

namespace tandem {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* to_string(GgufType t);

struct GgufValue;
struct GgufArray {
  GgufType elem_type;
  std::vector<GgufValue> items;
};

// Integers keep their signedness; floats widen to double.
struct GgufValue {
  GgufType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> value;
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;       // ggml order: ne[0] varies fastest
  std::vector<uint64_t> shape;    // row-major order (ne reversed)
  DType dtype;
  uint64_t offset = 0;            // relative to the data section
  uint64_t n_elems = 0;
  std::span<const std::byte> data;
};

struct GgufLimits {
  uint64_t max_string = 64ull << 20;     // one metadata string (chat templates are large)
  uint64_t max_array = 64ull << 20;      // elements in one metadata array
  uint64_t max_tensors = 1u << 20;
  uint64_t max_kv = 1u << 20;
  uint32_t max_array_depth = 4;
};

class GgufFile {
 public:
  // Maps and parses a file. Throws Error naming the file and what is wrong.
  static GgufFile open(const std::string& path, const GgufLimits& limits = {});
  // Parses bytes that the caller keeps alive (fuzzing, tests).
  static GgufFile parse(std::span<const std::byte> bytes, const std::string& label,
                        const GgufLimits& limits = {});

  const std::string& path() const { return label_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return bytes_.size(); }
  int64_t mtime_ns() const { return file_.mtime_ns(); }

  // Metadata in file order (keys are unique).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;

  // Typed getters: nullopt if absent, Error if present with a wrong type or
  // out of range. Any integer type converts to an integer getter.
  std::optional<uint64_t> get_uint(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  const GgufArray* get_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;

 private:
  void parse_all(const GgufLimits& limits);
  std::string label_;
  MappedFile file_;
  std::span<const std::byte> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A short human-readable rendering of a value (arrays abbreviated).
std::string format_value(const GgufValue& v, size_t max_items = 8);

}  // namespace tandem
