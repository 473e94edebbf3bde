#include "common/formats/writers.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tandem {
namespace {

uint64_t tensor_bytes(const std::string& name, DType dtype, const std::vector<uint64_t>& shape) {
  uint64_t n = std::accumulate(shape.begin(), shape.end(), uint64_t{1}, std::multiplies<>());
  auto b = bytes_for(dtype, n);
  if (!b || (!shape.empty() && shape.back() % info(dtype).block_elems != 0))
    fail_invalid("writer: tensor '{}' rows of {} are not whole {} blocks", name,
                 shape.empty() ? 0 : shape.back(), tandem::name(dtype));
  return *b;
}

TensorProducer copy_of(std::vector<std::byte> data) {
  auto shared = std::make_shared<std::vector<std::byte>>(std::move(data));
  return [shared](std::span<std::byte> out) {
    if (out.size() != shared->size())
      throw Error(ErrorKind::kInternal, "writer: tensor data size does not match its shape");
    std::memcpy(out.data(), shared->data(), out.size());
  };
}

struct VectorSink {
  std::vector<std::byte> out;
  void put(const void* p, size_t n) {
    auto b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  uint64_t pos() const { return out.size(); }
};

struct FileSink {
  std::ofstream f;
  uint64_t n = 0;
  std::string path;
  void put(const void* p, size_t len) {
    f.write(static_cast<const char*>(p), std::streamsize(len));
    if (!f) fail(ErrorKind::kSystem, "cannot write {} (disk full?)", path);
    n += len;
  }
  uint64_t pos() const { return n; }
};

template <typename Sink>
void put_u32(Sink& s, uint32_t v) { s.put(&v, 4); }
template <typename Sink>
void put_u64(Sink& s, uint64_t v) { s.put(&v, 8); }
template <typename Sink>
void put_str(Sink& s, const std::string& v) {
  put_u64(s, v.size());
  s.put(v.data(), v.size());
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8: case GgufType::kBool: {
      uint8_t x = v.type == GgufType::kBool ? uint8_t(std::get<bool>(v.value)) : uint8_t(std::get<uint64_t>(v.value));
      s.put(&x, 1);
      break;
    }
    case GgufType::kI8: { int8_t x = int8_t(std::get<int64_t>(v.value)); s.put(&x, 1); break; }
    case GgufType::kU16: { uint16_t x = uint16_t(std::get<uint64_t>(v.value)); s.put(&x, 2); break; }
    case GgufType::kI16: { int16_t x = int16_t(std::get<int64_t>(v.value)); s.put(&x, 2); break; }
    case GgufType::kU32: put_u32(s, uint32_t(std::get<uint64_t>(v.value))); break;
    case GgufType::kI32: { int32_t x = int32_t(std::get<int64_t>(v.value)); s.put(&x, 4); break; }
    case GgufType::kU64: put_u64(s, std::get<uint64_t>(v.value)); break;
    case GgufType::kI64: { int64_t x = std::get<int64_t>(v.value); s.put(&x, 8); break; }
    case GgufType::kF32: { float x = float(std::get<double>(v.value)); s.put(&x, 4); break; }
    case GgufType::kF64: { double x = std::get<double>(v.value); s.put(&x, 8); break; }
    case GgufType::kString: put_str(s, std::get<std::string>(v.value)); break;
    case GgufType::kArray: {
      const auto& a = *std::get<std::shared_ptr<GgufArray>>(v.value);
      put_u32(s, uint32_t(a.elem_type));
      put_u64(s, a.items.size());
      for (auto& item : a.items) put_value(s, item);
      break;
    }
  }
}

template <typename Sink>
void pad_to(Sink& s, uint64_t alignment) {
  static const std::byte zeros[4096] = {};
  uint64_t pad = (alignment - s.pos() % alignment) % alignment;
  while (pad) {
    uint64_t n = std::min<uint64_t>(pad, sizeof zeros);
    s.put(zeros, n);
    pad -= n;
  }
}

template <typename Sink>
void put_data(Sink& s, const std::string& name, uint64_t bytes, const TensorProducer& produce) {
  // Uninitialised: the producer overwrites every byte, so zero-filling first
  // would only touch each page twice.
  auto buf = std::make_unique_for_overwrite<std::byte[]>(bytes);
  produce(std::span<std::byte>(buf.get(), bytes));
  (void)name;
  s.put(buf.get(), bytes);
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kString;
  for (auto& s : v) a->items.push_back({GgufType::kString, s});
  set(key, {GgufType::kArray, a});
}

void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kI32;
  for (auto x : v) a->items.push_back({GgufType::kI32, int64_t{x}});
  set(key, {GgufType::kArray, a});
}

void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = GgufType::kF32;
  for (auto x : v) a->items.push_back({GgufType::kF32, double{x}});
  set(key, {GgufType::kArray, a});
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                            TensorProducer produce) {
  if (info(dtype).ggml_type < 0)
    fail(ErrorKind::kUnsupported, "GGUF has no type for {} (tensor '{}')", tandem::name(dtype), name);
  uint64_t bytes = tensor_bytes(name, dtype, shape);
  tensors_.push_back({name, dtype, std::move(shape), bytes, std::move(produce)});
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape,
                            std::vector<std::byte> data) {
  add_tensor(name, dtype, std::move(shape), copy_of(std::move(data)));
}

template <typename Sink>
void GgufWriter::emit(Sink& s) const {
  put_u32(s, 0x46554747);
  put_u32(s, 3);
  put_u64(s, tensors_.size());
  bool has_alignment = alignment_ != 32;
  put_u64(s, kv_.size() + (has_alignment ? 1 : 0));
  if (has_alignment) {
    put_str(s, "general.alignment");
    put_u32(s, uint32_t(GgufType::kU32));
    put_value(s, GgufValue{GgufType::kU32, uint64_t{alignment_}});
  }
  for (auto& [k, v] : kv_) {
    put_str(s, k);
    put_u32(s, uint32_t(v.type));
    put_value(s, v);
  }
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    put_str(s, t.name);
    put_u32(s, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put_u64(s, *it);
    put_u32(s, uint32_t(info(t.dtype).ggml_type));
    put_u64(s, offset);
    offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  pad_to(s, alignment_);
  // Padding between tensors only: like llama.cpp's writer, the file ends
  // with the last tensor's data.
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i) pad_to(s, alignment_);
    put_data(s, tensors_[i].name, tensors_[i].bytes, tensors_[i].produce);
  }
}

std::vector<std::byte> GgufWriter::to_bytes() const {
  VectorSink s;
  emit(s);
  return std::move(s.out);
}

void GgufWriter::write(const std::string& path) const {
  FileSink s{std::ofstream(path, std::ios::binary | std::ios::trunc), 0, path};
  if (!s.f) fail(ErrorKind::kSystem, "cannot create {}", path);
  emit(s);
}

void SafetensorsWriter::add_tensor(const std::string& name, DType dtype,
                                   std::vector<uint64_t> shape, TensorProducer produce) {
  if (info(dtype).safetensors_name.empty())
    fail(ErrorKind::kUnsupported, "safetensors has no dtype for {} (tensor '{}')", tandem::name(dtype), name);
  uint64_t bytes = tensor_bytes(name, dtype, shape);
  tensors_.push_back({name, dtype, std::move(shape), bytes, std::move(produce)});
}

void SafetensorsWriter::add_tensor(const std::string& name, DType dtype,
                                   std::vector<uint64_t> shape, std::vector<std::byte> data) {
  add_tensor(name, dtype, std::move(shape), copy_of(std::move(data)));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_.emplace_back(key, value);
}

std::string SafetensorsWriter::header() const {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    auto& m = h["__metadata__"];
    for (auto& [k, v] : metadata_) m[k] = v;
  }
  uint64_t off = 0;
  for (auto& t : tensors_) {
    h[t.name] = {{"dtype", info(t.dtype).safetensors_name}, {"shape", t.shape},
                 {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the spec allows
  return s;
}

template <typename Sink>
void SafetensorsWriter::emit(Sink& s) const {
  std::string h = header();
  put_u64(s, h.size());
  s.put(h.data(), h.size());
  for (auto& t : tensors_) put_data(s, t.name, t.bytes, t.produce);
}

std::vector<std::byte> SafetensorsWriter::to_bytes() const {
  VectorSink s;
  emit(s);
  return std::move(s.out);
}

void SafetensorsWriter::write(const std::string& path) const {
  FileSink s{std::ofstream(path, std::ios::binary | std::ios::trunc), 0, path};
  if (!s.f) fail(ErrorKind::kSystem, "cannot create {}", path);
  emit(s);
}

}  // namespace tandem
