#include "common/mapped_file.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"

namespace tandem {
namespace {

TEST(MappedFile, MapsWholeFileReadOnly) {
  std::string path = ::testing::TempDir() + "/mapped_file_test.bin";
  { std::ofstream(path, std::ios::binary) << "hello tandem"; }
  MappedFile m = MappedFile::open(path);
  ASSERT_EQ(m.size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), "hello tandem");
  EXPECT_GT(m.mtime_ns(), 0);
  MappedFile moved = std::move(m);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(moved.size(), 12u);
  std::remove(path.c_str());
}

TEST(MappedFile, EmptyFileAndErrors) {
  std::string path = ::testing::TempDir() + "/mapped_file_empty.bin";
  { std::ofstream(path, std::ios::binary); }
  EXPECT_EQ(MappedFile::open(path).size(), 0u);
  std::remove(path.c_str());
  try {
    MappedFile::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  EXPECT_THROW(MappedFile::open(::testing::TempDir()), Error);  // a directory
}

}  // namespace
}  // namespace tandem
