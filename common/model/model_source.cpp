#include "common/model/model_source.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"

namespace tandem {
namespace fs = std::filesystem;

ModelSource::~ModelSource() = default;

std::unique_ptr<ModelSource> ModelSource::open(const std::string& path) {
  std::unique_ptr<ModelSource> s(new ModelSource());
  s->path_ = path;
  std::error_code ec;
  fs::path p(path);
  if (!fs::exists(p, ec))
    throw Error(ErrorKind::kNotFound, fmt::format("{}: no such file or directory", path));
  if (fs::is_regular_file(p) && p.filename() == "config.json") p = p.parent_path();
  if (fs::is_directory(p)) {
    s->format_ = SourceFormat::kHuggingFace;
    fs::path cfg = p / "config.json";
    if (!fs::exists(cfg))
      throw Error(ErrorKind::kNotFound,
                  fmt::format("{}: not a model directory (no config.json; for GGUF pass the .gguf file)", path));
    std::ifstream in(cfg);
    // Values nested deeper than any config are dropped and reported: error
    // messages dump() values, which recurses once per level.
    constexpr int kMaxDepth = 64;
    bool too_deep = false;
    auto limit_depth = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      too_deep |= depth > kMaxDepth;
      return depth <= kMaxDepth;
    };
    nlohmann::json j = nlohmann::json::parse(in, limit_depth, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail_invalid("{}: not valid JSON", cfg.string());
    if (too_deep) fail_invalid("{}: JSON nests deeper than {} levels", cfg.string(), kMaxDepth);
    s->config_ = config_from_hf_json(j, cfg.string());
    s->st_ = std::make_unique<SafetensorsModel>(SafetensorsModel::open_dir(p.string()));
    s->map_ = TensorMap::from_hf(s->config_, *s->st_);
  } else {
    s->format_ = SourceFormat::kGguf;
    s->gguf_ = std::make_unique<GgufFile>(GgufFile::open(p.string()));
    s->config_ = config_from_gguf(*s->gguf_);
    s->map_ = TensorMap::from_gguf(s->config_, *s->gguf_);
  }
  return s;
}

std::vector<StoredTensor> ModelSource::stored_tensors() const {
  std::vector<StoredTensor> out;
  if (gguf_) {
    for (auto& t : gguf_->tensors())
      out.push_back({gguf_->path(), t.name, t.dtype, t.shape, gguf_->data_offset() + t.offset,
                     t.data.size()});
  } else {
    for (auto& f : st_->files())
      for (auto& t : f->tensors())
        out.push_back({f->path(), t.name, t.dtype, t.shape, t.offset, t.data.size()});
  }
  return out;
}

uint64_t ModelSource::total_file_bytes() const {
  if (gguf_) return gguf_->file_size();
  uint64_t n = 0;
  for (auto& f : st_->files()) n += f->file_size();
  return n;
}

std::vector<std::string> ModelSource::files() const {
  std::vector<std::string> out;
  if (gguf_) out.push_back(gguf_->path());
  else
    for (auto& f : st_->files()) out.push_back(f->path());
  return out;
}

}  // namespace tandem
