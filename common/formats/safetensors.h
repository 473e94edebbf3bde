// safetensors reader: one file, or a sharded checkpoint described by
// model.safetensors.index.json. Zero-copy views into read-only mappings;
// the header is validated fully before any tensor is handed out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"

namespace tandem {

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // row-major
  uint64_t n_elems = 0;
  uint64_t offset = 0;          // byte offset of the data in the file
  std::span<const std::byte> data;
  std::string file;             // the shard it lives in (for messages)
};

struct SafetensorsLimits {
  uint64_t max_header = 100ull << 20;  // the format's own limit is 100 MB
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path, const SafetensorsLimits& limits = {});
  // Parses bytes that the caller keeps alive (fuzzing, tests).
  static SafetensorsFile parse(std::span<const std::byte> bytes, const std::string& label,
                               const SafetensorsLimits& limits = {});

  const std::string& path() const { return label_; }
  size_t file_size() const { return bytes_.size(); }
  int64_t mtime_ns() const { return file_.mtime_ns(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* find(const std::string& name) const;

 private:
  void parse_all(const SafetensorsLimits& limits);
  std::string label_;
  MappedFile file_;
  std::span<const std::byte> bytes_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// All safetensors of a Hugging Face model directory: `model.safetensors`, or
// the shards named by `model.safetensors.index.json`. Tensor names are unique
// across shards; every tensor the index names must be in the shard it names.
class SafetensorsModel {
 public:
  static SafetensorsModel open_dir(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // All tensors in shard order, then file order.
  std::vector<const SafetensorsTensor*> tensors() const;

 private:
  void add_file(std::unique_ptr<SafetensorsFile> f);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> by_name_;
};

}  // namespace tandem
