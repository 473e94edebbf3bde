// Writers for GGUF v3 and safetensors. Used by the test-model generator, the
// corruption tests and the fuzz seed corpus. Tensor data is produced on demand
// by a callback while writing, so models larger than memory can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/formats/gguf.h"

namespace tandem {

// Fills exactly the tensor's byte size.
using TensorProducer = std::function<void(std::span<std::byte> out)>;

// A tensor queued for writing: its data is produced when the file is written.
struct PendingTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // row-major
  uint64_t bytes;
  TensorProducer produce;
};

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  void set(const std::string& key, GgufValue v);
  void set_u32(const std::string& key, uint32_t v) { set(key, {GgufType::kU32, uint64_t{v}}); }
  void set_f32(const std::string& key, float v) { set(key, {GgufType::kF32, double{v}}); }
  void set_bool(const std::string& key, bool v) { set(key, {GgufType::kBool, v}); }
  void set_string(const std::string& key, std::string v) { set(key, {GgufType::kString, std::move(v)}); }
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);

  // shape is row-major (written to the file reversed, as ggml's ne).
  void add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                  TensorProducer produce);
  void add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                  std::vector<std::byte> data);

  std::vector<std::byte> to_bytes() const;
  void write(const std::string& path) const;

 private:
  template <typename Sink>
  void emit(Sink& sink) const;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

class SafetensorsWriter {
 public:
  void add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                  TensorProducer produce);
  void add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                  std::vector<std::byte> data);
  void set_metadata(const std::string& key, const std::string& value);

  std::vector<std::byte> to_bytes() const;
  void write(const std::string& path) const;

 private:
  std::string header() const;
  template <typename Sink>
  void emit(Sink& sink) const;
  std::vector<PendingTensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace tandem
