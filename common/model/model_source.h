// A model as the user names it: a GGUF file or a Hugging Face directory
// (config.json + safetensors). Opens and validates the files, fills the
// config and builds the tensor map. Keeps the mappings alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/model/config.h"
#include "common/model/tensor_map.h"

namespace tandem {

class GgufFile;
class SafetensorsModel;

enum class SourceFormat { kGguf, kHuggingFace };

// One tensor as stored in a file, for listings.
struct StoredTensor {
  std::string file;
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // row-major
  uint64_t offset = 0;          // byte offset in the file
  uint64_t bytes = 0;
};

class ModelSource {
 public:
  // path: a .gguf file, an HF directory, or an HF directory's config.json.
  static std::unique_ptr<ModelSource> open(const std::string& path);
  ~ModelSource();

  SourceFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  const TensorMap& tensors() const { return map_; }
  const GgufFile* gguf() const { return gguf_.get(); }
  const SafetensorsModel* safetensors() const { return st_.get(); }

  std::vector<StoredTensor> stored_tensors() const;
  uint64_t total_file_bytes() const;
  // Names, sizes and mtimes of the source files (for arena identity).
  std::vector<std::string> files() const;

 private:
  ModelSource() = default;
  SourceFormat format_ = SourceFormat::kGguf;
  std::string path_;
  ModelConfig config_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsModel> st_;
  TensorMap map_;
};

}  // namespace tandem
