#include "tests/corruption_util.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <typeinfo>

#include "common/formats/safetensors.h"
#include "common/formats/writers.h"

#ifndef TANDEM_FIXTURES_DEFAULT
#define TANDEM_FIXTURES_DEFAULT ""
#endif

namespace tandem::testing {
namespace fs = std::filesystem;

namespace {

::testing::AssertionResult check_error(const std::function<void()>& fn,
                                       const std::vector<std::vector<std::string>>& any_of,
                                       std::optional<ErrorKind> kind) {
  try {
    fn();
  } catch (const Error& e) {
    std::string what = e.what();
    if (kind && e.kind() != *kind)
      return ::testing::AssertionFailure() << "Error of kind '" << to_string(e.kind())
                                           << "' instead of '" << to_string(*kind) << "': " << what;
    for (const auto& needles : any_of) {
      bool all = true;
      for (const auto& n : needles) all = all && what.find(n) != std::string::npos;
      if (all) return ::testing::AssertionSuccess();
    }
    auto f = ::testing::AssertionFailure() << "message lacks the expected text; message:\n  "
                                           << what << "\nexpected all of one of:";
    for (const auto& needles : any_of) {
      f << "\n   ";
      for (const auto& n : needles) f << " [" << n << "]";
    }
    return f;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "threw an unrelated exception type " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw something that is not a std::exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace

::testing::AssertionResult ThrowsError(const std::function<void()>& fn,
                                       std::initializer_list<std::string_view> needles,
                                       std::optional<ErrorKind> kind) {
  std::vector<std::string> v;
  for (auto n : needles) v.emplace_back(n);
  return check_error(fn, {v}, kind);
}

::testing::AssertionResult ThrowsErrorAnyOf(const std::function<void()>& fn,
                                            const std::vector<std::vector<std::string>>& any_of) {
  return check_error(fn, any_of, std::nullopt);
}

std::string fixtures_dir() {
  const char* env = std::getenv("TANDEM_FIXTURES");
  std::string dir = env && *env ? env : TANDEM_FIXTURES_DEFAULT;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return "";
  return dir;
}

TempDir::TempDir(std::string_view name) {
  fs::path p = fs::path(::testing::TempDir()) /
               ("tandem_corruption_" + std::to_string(::getpid()) + "_" + std::string(name));
  fs::remove_all(p);
  fs::create_directories(p);
  path_ = p.string();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::operator/(std::string_view file) const {
  return (fs::path(path_) / file).string();
}

void copy_file_writable(const std::string& src, const std::string& dst) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
}

void copy_dir(const std::string& src, const std::string& dst) {
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src))
    if (e.is_regular_file())
      copy_file_writable(e.path().string(), (fs::path(dst) / e.path().filename()).string());
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, std::string_view text) {
  write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::string read_text(const std::string& path) {
  auto b = read_file(path);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

ExactBuffer::ExactBuffer(std::span<const std::byte> b)
    : data(new std::byte[b.size() ? b.size() : 1]), size(b.size()) {
  if (!b.empty()) std::memcpy(data.get(), b.data(), b.size());
}

RawGguf& RawGguf::put(const void* p, size_t n) {
  auto b = static_cast<const std::byte*>(p);
  bytes_.insert(bytes_.end(), b, b + n);
  return *this;
}

RawGguf& RawGguf::zeros(size_t n) {
  bytes_.resize(bytes_.size() + n);
  return *this;
}

RawGguf& RawGguf::pad(uint64_t alignment) {
  return zeros((alignment - bytes_.size() % alignment) % alignment);
}

RawGguf& RawGguf::header(uint64_t n_tensors, uint64_t n_kv, uint32_t version) {
  return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
}

RawGguf& RawGguf::tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type,
                         uint64_t offset) {
  str(name).u32(uint32_t(ne.size()));
  for (uint64_t n : ne) u64(n);
  return u32(type).u64(offset);
}

std::vector<std::byte> raw_safetensors(std::string_view header, size_t data_bytes,
                                       std::optional<uint64_t> claimed_len) {
  std::vector<std::byte> b(8 + header.size() + data_bytes);
  uint64_t n = claimed_len.value_or(header.size());
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void rewrite_safetensors(const std::string& src, const std::string& dst,
                         const std::function<bool(StEntry&)>& edit,
                         const std::vector<StEntry>& add) {
  SafetensorsFile f = SafetensorsFile::open(src);
  SafetensorsWriter w;
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  for (const auto& t : f.tensors()) {
    StEntry e{t.name, t.dtype, t.shape, std::vector<std::byte>(t.data.begin(), t.data.end())};
    if (!edit(e)) continue;
    w.add_tensor(e.name, e.dtype, e.shape, std::move(e.data));
  }
  for (const auto& e : add) w.add_tensor(e.name, e.dtype, e.shape, e.data);
  auto bytes = w.to_bytes();  // f's mapping must stay valid until written
  write_file(dst, bytes);
}

void rewrite_gguf(const std::string& src, const std::string& dst,
                  const std::function<bool(const std::string&, GgufValue&)>& edit_kv,
                  const std::function<bool(StEntry&)>& edit_tensor) {
  GgufFile f = GgufFile::open(src);
  GgufWriter w(uint32_t(f.alignment()));
  for (const auto& [k, v] : f.metadata()) {
    if (k == "general.alignment") continue;  // the writer emits it from its alignment
    GgufValue copy = v;
    if (edit_kv(k, copy)) w.set(k, std::move(copy));
  }
  for (const auto& t : f.tensors()) {
    StEntry e{t.name, t.dtype, t.shape, std::vector<std::byte>(t.data.begin(), t.data.end())};
    if (!edit_tensor(e)) continue;
    w.add_tensor(e.name, e.dtype, e.shape, std::move(e.data));
  }
  auto bytes = w.to_bytes();
  write_file(dst, bytes);
}

}  // namespace tandem::testing
