#include "common/error.h"

#include <fcntl.h>

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(Error, ContextLinesAccumulateOutermostLast) {
  try {
    with_context([] { return std::string("while loading tensor blk.0.attn_q.weight"); },
                 [] { fail_invalid("bad block at {}", 42); });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_EQ(e.message(), "bad block at 42");
    EXPECT_STREQ(e.what(), "bad block at 42\n  while loading tensor blk.0.attn_q.weight");
  }
}

TEST(Error, ForeignExceptionsAreWrappedWithContext) {
  try {
    with_context([] { return std::string("in config.json"); },
                 []() -> int { throw std::out_of_range("key 'x' not found"); });
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'x' not found\n  in config.json"), std::string::npos);
  }
}

TEST(Error, SyscallMacroCarriesErrnoAndExpression) {
  try {
    TANDEM_SYSCALL(::open("/nonexistent/tandem", O_RDONLY));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSystem);
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("::open(\"/nonexistent/tandem\", O_RDONLY)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem
