#include "common/control/message.h"

#include <gtest/gtest.h>

namespace tandem::control {
namespace {

TEST(Message, EveryErrorKindCrossesTheWire) {
  for (auto kind : {ErrorKind::kInvalidInput, ErrorKind::kUnsupported, ErrorKind::kNotFound,
                    ErrorKind::kSystem, ErrorKind::kTimeout, ErrorKind::kPeerLost,
                    ErrorKind::kInternal}) {
    EXPECT_EQ(from_proto(to_proto(kind)), kind) << to_string(kind);
  }
  EXPECT_EQ(from_proto(static_cast<proto::ErrorCode>(77)), ErrorKind::kInternal);
}

TEST(Message, ErrorsNameTheirRequest) {
  capnp::MallocMessageBuilder m;
  build_error(m, 42, ErrorKind::kNotFound, "no such tensor");
  auto env = m.getRoot<proto::Envelope>().asReader();
  EXPECT_EQ(env.getReplyTo(), 42u);
  EXPECT_EQ(message_name(env), "error");
  RemoteError e("coordinator/0/0", env.getError());
  EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  EXPECT_EQ(e.request_id(), 42u);
  EXPECT_EQ(e.peer(), "coordinator/0/0");
  EXPECT_STREQ(e.what(), "request 42 failed at coordinator/0/0: no such tensor");
}

TEST(Message, AnEmptyBuilderIsNotSentAsAHello) {
  capnp::MallocMessageBuilder m;
  EXPECT_THROW(outgoing_envelope(m), Error);
}

}  // namespace
}  // namespace tandem::control
