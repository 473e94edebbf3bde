#include "common/formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/formats/byte_reader.h"

namespace tandem {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

uint64_t json_uint(const json& v, const std::string& label, const std::string& tensor,
                   const char* what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail_invalid("{}: tensor '{}': {} must be a non-negative integer, got {}", label, tensor, what,
                 v.dump());
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path, const SafetensorsLimits& limits) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path);
  f.bytes_ = f.file_.bytes();
  f.label_ = path;
  f.parse_all(limits);
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, const std::string& label,
                                       const SafetensorsLimits& limits) {
  SafetensorsFile f;
  f.bytes_ = bytes;
  f.label_ = label;
  f.parse_all(limits);
  return f;
}

void SafetensorsFile::parse_all(const SafetensorsLimits& limits) {
  ByteReader r(bytes_, label_);
  uint64_t n = r.read<uint64_t>("header length");
  if (n > limits.max_header)
    fail_invalid("{}: header length {} exceeds the limit of {} bytes", label_, n,
                 limits.max_header);
  r.need(n, "JSON header");
  const char* text = reinterpret_cast<const char*>(bytes_.data() + 8);
  // nlohmann keeps the last of duplicate keys silently; the callback sees
  // every top-level key so a repeated tensor name is reported instead.
  std::string duplicate;
  std::set<std::string> seen;
  // A real header nests 3 deep. Deeper values are dropped while parsing and
  // reported: messages dump() JSON values, which recurses once per level.
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    if (depth > kMaxDepth) too_deep = true;
    return depth <= kMaxDepth;
  };
  json header = json::parse(text, text + n, on_event, /*allow_exceptions=*/false);
  if (!duplicate.empty()) fail_invalid("{}: tensor name '{}' appears twice in the header", label_, duplicate);
  if (too_deep) fail_invalid("{}: header nests JSON deeper than {} levels", label_, kMaxDepth);
  if (header.is_discarded())
    fail_invalid("{}: header is not valid JSON ({} bytes at offset 8)", label_, n);
  if (!header.is_object()) fail_invalid("{}: header must be a JSON object", label_);
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = bytes_.size() - data_start;

  for (auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail_invalid("{}: __metadata__ must be an object", label_);
      for (auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail_invalid("{}: __metadata__['{}'] must be a string", label_, mk);
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (key.empty()) fail_invalid("{}: a tensor has an empty name", label_);
    if (!value.is_object()) fail_invalid("{}: tensor '{}' entry must be an object", label_, key);
    SafetensorsTensor t;
    t.name = key;
    t.file = label_;
    auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string())
      fail_invalid("{}: tensor '{}' has no dtype string", label_, key);
    auto dtype = dtype_from_safetensors(dt->get<std::string>());
    if (!dtype)
      fail(ErrorKind::kUnsupported,
           "{}: tensor '{}' has dtype {}, which Tandem does not read (supported: F32, F16, BF16, "
           "F8_E4M3, I8, U8, I32)",
           label_, key, dt->get<std::string>());
    t.dtype = *dtype;
    auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array())
      fail_invalid("{}: tensor '{}' has no shape array", label_, key);
    if (sh->size() > 8) fail_invalid("{}: tensor '{}' has {} dimensions", label_, key, sh->size());
    t.n_elems = 1;
    for (auto& d : *sh) {
      uint64_t v = json_uint(d, label_, key, "shape entry");
      if (v != 0 && t.n_elems > std::numeric_limits<uint64_t>::max() / 16 / v)
        fail_invalid("{}: tensor '{}' element count overflows", label_, key);
      t.n_elems *= v;
      t.shape.push_back(v);
    }
    auto offs = value.find("data_offsets");
    if (offs == value.end() || !offs->is_array() || offs->size() != 2)
      fail_invalid("{}: tensor '{}' needs data_offsets [begin, end]", label_, key);
    uint64_t b = json_uint((*offs)[0], label_, key, "data_offsets[0]");
    uint64_t e = json_uint((*offs)[1], label_, key, "data_offsets[1]");
    if (b > e) fail_invalid("{}: tensor '{}' data_offsets [{}, {}] are reversed", label_, key, b, e);
    if (e > data_size)
      fail_invalid("{}: tensor '{}' data [{}, {}) extends past the end of the file (data section "
                   "holds {} bytes)",
                   label_, key, b, e, data_size);
    uint64_t expect = *bytes_for(t.dtype, t.n_elems);
    if (e - b != expect)
      fail_invalid("{}: tensor '{}' has {} bytes but shape {} of {} needs {}", label_, key, e - b,
                   sh->dump(), name(t.dtype), expect);
    t.offset = data_start + b;
    t.data = bytes_.subspan(data_start + b, e - b);
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::vector<const SafetensorsTensor*> sorted;
  for (auto& t : tensors_) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->data.data() < b->data.data(); });
  for (size_t i = 1; i < sorted.size(); ++i) {
    auto* a = sorted[i - 1];
    if (a->data.data() + a->data.size() > sorted[i]->data.data())
      fail_invalid("{}: tensors '{}' and '{}' overlap in the data section", label_, a->name,
                   sorted[i]->name);
  }
  // Keep tensors in data order: that is file order, which inspect prints.
  std::vector<SafetensorsTensor> ordered;
  ordered.reserve(tensors_.size());
  for (auto* t : sorted) ordered.push_back(*t);
  tensors_ = std::move(ordered);
  index_.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsModel SafetensorsModel::open_dir(const std::string& dir) {
  SafetensorsModel m;
  m.dir_ = dir;
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    std::ifstream in(index);
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail_invalid("{}: not valid JSON", index.string());
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      fail_invalid("{}: missing the weight_map object", index.string());
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string())
        fail_invalid("{}: weight_map['{}'] must be a file name", index.string(), tensor);
      std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail_invalid("{}: weight_map['{}'] names '{}', not a file in the directory",
                     index.string(), tensor, s);
      by_shard[s].push_back(tensor);
    }
    if (by_shard.empty()) fail_invalid("{}: weight_map is empty", index.string());
    for (auto& [shard, names] : by_shard) {
      fs::path p = fs::path(dir) / shard;
      if (!fs::exists(p))
        throw Error(ErrorKind::kNotFound,
                    fmt::format("{}: shard '{}' is missing (it holds {} tensors, e.g. '{}')",
                                index.string(), shard, names.size(), names.front()));
      auto f = std::make_unique<SafetensorsFile>(SafetensorsFile::open(p.string()));
      for (auto& n : names)
        if (!f->find(n))
          fail_invalid("{}: tensor '{}' is listed in the index but not present in the shard",
                       p.string(), n);
      m.add_file(std::move(f));
    }
    for (auto& [name, t] : m.by_name_)
      if (!wm->contains(name))
        fail_invalid("{}: tensor '{}' is not listed in {}", t->file, name, index.string());
  } else if (fs::exists(single)) {
    m.add_file(std::make_unique<SafetensorsFile>(SafetensorsFile::open(single.string())));
  } else {
    throw Error(ErrorKind::kNotFound,
                fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
  }
  return m;
}

void SafetensorsModel::add_file(std::unique_ptr<SafetensorsFile> f) {
  for (auto& t : f->tensors())
    if (!by_name_.emplace(t.name, &t).second)
      fail_invalid("{}: tensor '{}' also appears in {}", f->path(), t.name,
                   by_name_[t.name]->file);
  files_.push_back(std::move(f));
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsModel::tensors() const {
  std::vector<const SafetensorsTensor*> out;
  for (auto& f : files_)
    for (auto& t : f->tensors()) out.push_back(&t);
  return out;
}

}  // namespace tandem
