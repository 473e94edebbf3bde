// Every fixture file is read and described correctly: tensor names, shapes,
// dtypes and a dequantised checksum per tensor, compared with
// tests/data/fixture_checksums.tsv, which tools/fixture_checksums.py (an
// independent pure-Python reader and dequantiser) produced from the same files.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "common/formats/gguf.h"
#include "common/formats/safetensors.h"
#include "kernels/cpu/dequant.h"
#include "tests/fixture_support.h"

namespace tandem {
namespace {

struct Expected {
  std::string tensor, dtype, shape;
  uint64_t n;
  double sum, wsum;
};

std::map<std::string, std::vector<Expected>> load_expected() {
  std::ifstream in(testing::source_dir() / "tests" / "data" / "fixture_checksums.tsv");
  std::map<std::string, std::vector<Expected>> out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string file, n, sum, wsum;
    Expected e;
    std::getline(s, file, '\t');
    std::getline(s, e.tensor, '\t');
    std::getline(s, e.dtype, '\t');
    std::getline(s, e.shape, '\t');
    std::getline(s, n, '\t');
    std::getline(s, sum, '\t');
    std::getline(s, wsum, '\t');
    e.n = std::stoull(n);
    e.sum = std::stod(sum);
    e.wsum = std::stod(wsum);
    out[file].push_back(e);
  }
  return out;
}

struct Actual {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;
  uint64_t n;
};

// Same definition as the Python tool: left-to-right float64 sums in storage order.
std::pair<double, double> checksums(const Actual& t) {
  std::vector<float> v(t.n);
  kernels::dequantize_generic(t.dtype, t.data.data(), v.data(), t.n);
  double sum = 0, wsum = 0;
  for (uint64_t i = 0; i < t.n; ++i) {
    sum += v[i];
    wsum += double(v[i]) * double((i % 1021) + 1);
  }
  return {sum, wsum};
}

void compare(const std::string& file, const std::vector<Actual>& actual,
             const std::vector<Expected>& expected) {
  ASSERT_EQ(actual.size(), expected.size()) << file;
  for (size_t i = 0; i < actual.size(); ++i) {
    const Actual& a = actual[i];
    const Expected& e = expected[i];
    SCOPED_TRACE(file + ": " + e.tensor);
    EXPECT_EQ(a.name, e.tensor);
    EXPECT_EQ(std::string(name(a.dtype)), e.dtype);
    EXPECT_EQ(fmt::format("{}", fmt::join(a.shape, ",")), e.shape);
    EXPECT_EQ(a.n, e.n);
    auto [sum, wsum] = checksums(a);
    // Same float32 values summed in the same order: equal up to the last bits.
    EXPECT_NEAR(sum, e.sum, 1e-9 * (1 + std::fabs(e.sum)));
    EXPECT_NEAR(wsum, e.wsum, 1e-9 * (1 + std::fabs(e.wsum)));
  }
}

TEST(FixtureFiles, EveryTensorOfEveryFileMatchesTheIndependentReader) {
  TANDEM_REQUIRE_FIXTURES();
  auto expected = load_expected();
  ASSERT_GE(expected.size(), 15u) << "tests/data/fixture_checksums.tsv is incomplete";
  size_t tensors = 0;
  for (auto& [file, exp] : expected) {
    std::string path = (testing::fixtures_dir() / file).string();
    std::vector<Actual> actual;
    if (file.ends_with(".gguf")) {
      GgufFile f = GgufFile::open(path);
      std::vector<const GgufTensor*> by_offset;
      for (auto& t : f.tensors()) by_offset.push_back(&t);
      std::sort(by_offset.begin(), by_offset.end(),
                [](auto* a, auto* b) { return a->offset < b->offset; });
      for (auto* t : by_offset) actual.push_back({t->name, t->dtype, t->shape, t->data, t->n_elems});
      compare(file, actual, exp);
    } else {
      SafetensorsFile f = SafetensorsFile::open(path);
      for (auto& t : f.tensors()) actual.push_back({t.name, t.dtype, t.shape, t.data, t.n_elems});
      compare(file, actual, exp);
    }
    tensors += actual.size();
  }
  EXPECT_EQ(tensors, 955u);
}

}  // namespace
}  // namespace tandem
