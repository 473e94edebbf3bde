#include "common/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/error.h"
#include "common/formats/byte_reader.h"

namespace tandem {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kMaxNameLen = 4096;

// Smallest encoding of one value of a type, to bound counts before allocating.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

class Parser {
 public:
  Parser(std::span<const std::byte> bytes, const std::string& label, const GgufLimits& limits)
      : r_(bytes, label), label_(label), limits_(limits) {}

  GgufValue read_value(GgufType type, const std::string& key, uint32_t depth) {
    GgufValue v{type, uint64_t{0}};
    switch (type) {
      case GgufType::kU8: v.value = uint64_t{r_.read<uint8_t>(key)}; break;
      case GgufType::kI8: v.value = int64_t{r_.read<int8_t>(key)}; break;
      case GgufType::kU16: v.value = uint64_t{r_.read<uint16_t>(key)}; break;
      case GgufType::kI16: v.value = int64_t{r_.read<int16_t>(key)}; break;
      case GgufType::kU32: v.value = uint64_t{r_.read<uint32_t>(key)}; break;
      case GgufType::kI32: v.value = int64_t{r_.read<int32_t>(key)}; break;
      case GgufType::kU64: v.value = r_.read<uint64_t>(key); break;
      case GgufType::kI64: v.value = r_.read<int64_t>(key); break;
      case GgufType::kF32: v.value = double{r_.read<float>(key)}; break;
      case GgufType::kF64: v.value = r_.read<double>(key); break;
      case GgufType::kBool: {
        uint8_t b = r_.read<uint8_t>(key);
        if (b > 1) fail_invalid("{}: metadata '{}' has bool value {} (not 0 or 1)", label_, key, b);
        v.value = b == 1;
        break;
      }
      case GgufType::kString: v.value = std::string(r_.read_string(key, limits_.max_string)); break;
      case GgufType::kArray: v.value = read_array(key, depth); break;
    }
    return v;
  }

  std::shared_ptr<GgufArray> read_array(const std::string& key, uint32_t depth) {
    if (depth >= limits_.max_array_depth)
      fail_invalid("{}: metadata '{}' nests arrays deeper than {}", label_, key,
                   limits_.max_array_depth);
    uint32_t et = r_.read<uint32_t>(key + " (array element type)");
    if (!valid_type(et))
      fail_invalid("{}: metadata '{}' is an array of unknown value type {}", label_, key, et);
    uint64_t n = r_.read<uint64_t>(key + " (array length)");
    auto elem = static_cast<GgufType>(et);
    if (n > limits_.max_array)
      fail_invalid("{}: metadata '{}' is an array of {} elements, more than the limit {}", label_,
                   key, n, limits_.max_array);
    if (n > r_.remaining() / min_encoded_size(elem))
      fail_invalid("{}: metadata '{}' claims {} array elements of type {} but only {} bytes remain",
                   label_, key, n, to_string(elem), r_.remaining());
    auto arr = std::make_shared<GgufArray>();
    arr->elem_type = elem;
    arr->items.reserve(n);
    for (uint64_t i = 0; i < n; ++i) arr->items.push_back(read_value(elem, key, depth + 1));
    return arr;
  }

  ByteReader r_;
  const std::string& label_;
  const GgufLimits& limits_;
};

}  // namespace

const char* to_string(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

GgufFile GgufFile::open(const std::string& path, const GgufLimits& limits) {
  GgufFile f;
  f.file_ = MappedFile::open(path);
  f.bytes_ = f.file_.bytes();
  f.label_ = path;
  f.parse_all(limits);
  return f;
}

GgufFile GgufFile::parse(std::span<const std::byte> bytes, const std::string& label,
                         const GgufLimits& limits) {
  GgufFile f;
  f.bytes_ = bytes;
  f.label_ = label;
  f.parse_all(limits);
  return f;
}

void GgufFile::parse_all(const GgufLimits& limits) {
  Parser p(bytes_, label_, limits);
  ByteReader& r = p.r_;
  uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kMagic) fail_invalid("{}: not a GGUF file (bad magic)", label_);
  version_ = r.read<uint32_t>("version");
  if (version_ == 0x02000000u || version_ == 0x03000000u)  // 2 or 3 byte-swapped
    fail(ErrorKind::kUnsupported, "{}: big-endian GGUF files are not supported", label_);
  if (version_ == 1)
    fail(ErrorKind::kUnsupported, "{}: GGUF version 1 is obsolete; convert the model again",
         label_);
  if (version_ != 2 && version_ != 3)
    fail(ErrorKind::kUnsupported, "{}: unknown GGUF version {} (supported: 2, 3)", label_,
         version_);
  uint64_t n_tensors = r.read<uint64_t>("tensor count");
  uint64_t n_kv = r.read<uint64_t>("metadata count");
  if (n_tensors > limits.max_tensors || n_tensors > r.remaining() / 32)
    fail_invalid("{}: header claims {} tensors, impossible for a file of {} bytes", label_,
                 n_tensors, bytes_.size());
  if (n_kv > limits.max_kv || n_kv > r.remaining() / 13)
    fail_invalid("{}: header claims {} metadata entries, impossible for a file of {} bytes",
                 label_, n_kv, bytes_.size());

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(r.read_string(fmt::format("metadata key #{}", i), kMaxNameLen));
    if (key.empty()) fail_invalid("{}: metadata key #{} is empty", label_, i);
    uint32_t t = r.read<uint32_t>(key + " (value type)");
    if (!valid_type(t)) fail_invalid("{}: metadata '{}' has unknown value type {}", label_, key, t);
    GgufValue v = p.read_value(static_cast<GgufType>(t), key, 0);
    if (!kv_index_.emplace(key, kv_.size()).second)
      fail_invalid("{}: metadata key '{}' appears twice", label_, key);
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    auto* u = std::get_if<uint64_t>(&a->value);
    if (!u || a->type != GgufType::kU32)
      fail_invalid("{}: general.alignment must be a u32 (found {})", label_, to_string(a->type));
    if (*u == 0 || !std::has_single_bit(*u) || *u > (1u << 20))
      fail_invalid("{}: general.alignment = {} is not a power of two up to 1 MiB", label_, *u);
    alignment_ = *u;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = r.read_string(fmt::format("name of tensor #{}", i), kMaxNameLen);
    if (t.name.empty()) fail_invalid("{}: tensor #{} has an empty name", label_, i);
    uint32_t nd = r.read<uint32_t>(t.name + " (dimension count)");
    if (nd == 0 || nd > kMaxDims)
      fail_invalid("{}: tensor '{}' has {} dimensions (must be 1..{})", label_, t.name, nd,
                   kMaxDims);
    t.n_elems = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = r.read<uint64_t>(t.name + " (dimension)");
      if (ne == 0) fail_invalid("{}: tensor '{}' has a zero dimension", label_, t.name);
      if (ne > uint64_t(std::numeric_limits<int64_t>::max()) / t.n_elems)
        fail_invalid("{}: tensor '{}' element count overflows", label_, t.name);
      t.n_elems *= ne;
      t.ne.push_back(ne);
    }
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    uint32_t type = r.read<uint32_t>(t.name + " (type)");
    auto dt = dtype_from_ggml(type);
    if (!dt)
      fail(ErrorKind::kUnsupported,
           "{}: tensor '{}' has GGML type {} ({}), which Tandem does not read (supported: F32, "
           "F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K, I8, I32)",
           label_, t.name, type, ggml_type_name(type));
    t.dtype = *dt;
    if (t.ne[0] % info(t.dtype).block_elems != 0)
      fail_invalid("{}: tensor '{}' row length {} is not a multiple of the {} block size {}",
                   label_, t.name, t.ne[0], name(t.dtype), info(t.dtype).block_elems);
    if (!bytes_for(t.dtype, t.n_elems))
      fail_invalid("{}: tensor '{}' byte size overflows ({} elements of {})", label_, t.name,
                   t.n_elems, name(t.dtype));
    t.offset = r.read<uint64_t>(t.name + " (offset)");
    if (t.offset % alignment_ != 0)
      fail_invalid("{}: tensor '{}' offset {} is not aligned to {}", label_, t.name, t.offset,
                   alignment_);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      fail_invalid("{}: tensor name '{}' appears twice", label_, t.name);
    tensors_.push_back(std::move(t));
  }

  uint64_t end_of_infos = r.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > bytes_.size())
    fail_invalid("{}: truncated: data section would start at {} but the file has {} bytes", label_,
                 data_offset_, bytes_.size());
  uint64_t data_size = bytes_.size() > data_offset_ ? bytes_.size() - data_offset_ : 0;

  std::vector<const GgufTensor*> by_offset;
  for (auto& t : tensors_) {
    uint64_t nbytes = *bytes_for(t.dtype, t.n_elems);  // divisibility checked above
    if (t.offset > data_size || nbytes > data_size - t.offset)
      fail_invalid("{}: tensor '{}' ({} bytes at data offset {}) extends past the end of the file "
                   "(data section holds {} bytes)",
                   label_, t.name, nbytes, t.offset, data_size);
    t.data = bytes_.subspan(data_offset_ + t.offset, nbytes);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor* a = by_offset[i - 1];
    if (a->offset + a->data.size() > by_offset[i]->offset)
      fail_invalid("{}: tensors '{}' and '{}' overlap in the data section", label_, a->name,
                   by_offset[i]->name);
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* u = std::get_if<uint64_t>(&v->value)) return *u;
  if (auto* s = std::get_if<int64_t>(&v->value)) {
    if (*s < 0) fail_invalid("{}: metadata '{}' is negative ({})", label_, key, *s);
    return uint64_t(*s);
  }
  fail_invalid("{}: metadata '{}' should be an integer but is {}", label_, key, to_string(v->type));
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* d = std::get_if<double>(&v->value)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v->value)) return double(*u);
  if (auto* s = std::get_if<int64_t>(&v->value)) return double(*s);
  fail_invalid("{}: metadata '{}' should be a number but is {}", label_, key, to_string(v->type));
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(&v->value)) return *b;
  fail_invalid("{}: metadata '{}' should be a bool but is {}", label_, key, to_string(v->type));
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&v->value)) return *s;
  fail_invalid("{}: metadata '{}' should be a string but is {}", label_, key, to_string(v->type));
}

const GgufArray* GgufFile::get_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v->value)) return a->get();
  fail_invalid("{}: metadata '{}' should be an array but is {}", label_, key, to_string(v->type));
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string format_value(const GgufValue& v, size_t max_items) {
  struct Visitor {
    size_t max_items;
    std::string operator()(uint64_t u) const { return std::to_string(u); }
    std::string operator()(int64_t s) const { return std::to_string(s); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const {
      std::string out = s.size() > 60 ? s.substr(0, 60) + "..." : s;
      for (auto& c : out)
        if (c == '\n') c = ' ';
      return "\"" + out + "\"";
    }
    std::string operator()(const std::shared_ptr<GgufArray>& a) const {
      std::string out = fmt::format("[{} x {}: ", a->items.size(), to_string(a->elem_type));
      for (size_t i = 0; i < a->items.size() && i < max_items; ++i)
        out += (i ? ", " : "") + format_value(a->items[i], max_items);
      if (a->items.size() > max_items) out += ", ...";
      return out + "]";
    }
  };
  return std::visit(Visitor{max_items}, v.value);
}

}  // namespace tandem
