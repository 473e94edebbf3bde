#include "common/shm/shm_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/shm/run_dir.h"

namespace tandem {
namespace {
namespace fs = std::filesystem;

TEST(SharedFile, CreateMapShareAndRefuse) {
  RunDirectory run = RunDirectory::create();
  std::string path = run.file("seg");
  FileDescriptor fd = create_shared_file(path, 8192, /*reserve=*/true);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(file_size(fd.get(), path), 8192u);
  EXPECT_THROW(create_shared_file(path, 8192, false), Error);  // exclusive

  Mapping rw = Mapping::map_shared(fd.get(), 8192, Access::kReadWrite, path);
  std::memcpy(rw.data() + 100, "hello", 5);
  FileDescriptor ro_fd = open_shared_file(path, Access::kReadOnly);
  Mapping ro = Mapping::map_shared(ro_fd.get(), 8192, Access::kReadOnly, path);
  EXPECT_EQ(std::memcmp(ro.data() + 100, "hello", 5), 0);  // same pages
  Mapping moved = std::move(ro);
  EXPECT_FALSE(ro);
  EXPECT_TRUE(moved);

  ::chmod(path.c_str(), 0644);
  EXPECT_THROW(open_shared_file(path, Access::kReadOnly), Error);
  fs::create_symlink(path, run.file("link"));
  EXPECT_THROW(open_shared_file(run.file("link"), Access::kReadOnly), Error);
  try {
    open_shared_file(run.file("missing"), Access::kReadOnly);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
  run.remove();
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace tandem
