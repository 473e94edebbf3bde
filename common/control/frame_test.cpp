#include "common/control/frame.h"

#include <cstring>
#include <random>
#include <vector>

#include <capnp/any.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "common/control/message.h"
#include "common/error.h"

namespace tandem::control {
namespace {

void build_reply(capnp::MallocMessageBuilder& b) {
  auto env = b.initRoot<proto::Envelope>();
  env.setMessageId(3);
  env.setReplyTo(9);
  auto r = env.initManifestReply();
  r.setArenaPath("/dev/shm/tandem-1000/run-1-2-abc/arena");
  r.setArenaSize(123456789);
  r.setManifestVersion(4);
}

std::vector<std::byte> flat_bytes(capnp::MallocMessageBuilder& b) {
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(b);
  auto bytes = flat.asBytes();
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.begin(), bytes.size());
  return out;
}

void no_free(void*, void*) {}

// A frame over caller-owned bytes (no copy, no free), like one pointing into
// ZeroMQ's receive buffer.
zmq::message_t frame_over(std::byte* data, size_t size) {
  return zmq::message_t(data, size, no_free, nullptr);
}

void expect_invalid(zmq::message_t frame, const char* what) {
  try {
    DecodedFrame f = DecodedFrame::decode(std::move(frame));
    FAIL() << what << ": decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << what << ": " << e.what();
  }
}

TEST(Frame, RoundTrips) {
  capnp::MallocMessageBuilder b;
  build_reply(b);
  DecodedFrame f = DecodedFrame::decode(encode_frame(b));
  auto env = f.envelope();
  EXPECT_EQ(env.getMessageId(), 3u);
  EXPECT_EQ(env.getReplyTo(), 9u);
  ASSERT_EQ(env.which(), proto::Envelope::MANIFEST_REPLY);
  EXPECT_EQ(env.getManifestReply().getArenaPath(), "/dev/shm/tandem-1000/run-1-2-abc/arena");
  EXPECT_EQ(env.getManifestReply().getArenaSize(), 123456789u);
  // Moving the DecodedFrame keeps readers valid: the bytes stay put.
  DecodedFrame moved = std::move(f);
  EXPECT_EQ(env.getManifestReply().getManifestVersion(), 4u);
  EXPECT_EQ(moved.envelope().getManifestReply().getManifestVersion(), 4u);
}

TEST(Frame, MisalignedFrameIsCopiedAndDecoded) {
  capnp::MallocMessageBuilder b;
  build_reply(b);
  auto bytes = flat_bytes(b);
  // 8-byte aligned storage, then the message at offset +1: misaligned.
  std::vector<capnp::word> storage(bytes.size() / sizeof(capnp::word) + 2);
  std::byte* base = reinterpret_cast<std::byte*>(storage.data()) + 1;
  std::memcpy(base, bytes.data(), bytes.size());
  ASSERT_NE(reinterpret_cast<uintptr_t>(base) % 8, 0u);

  DecodedFrame f = DecodedFrame::decode(frame_over(base, bytes.size()));
  EXPECT_TRUE(f.copied());
  auto env = f.envelope();
  ASSERT_EQ(env.which(), proto::Envelope::MANIFEST_REPLY);
  EXPECT_EQ(env.getManifestReply().getArenaPath(), "/dev/shm/tandem-1000/run-1-2-abc/arena");
  EXPECT_EQ(env.getManifestReply().getArenaSize(), 123456789u);
  // The copy does not depend on the original bytes any more.
  std::memset(base, 0xff, bytes.size());
  EXPECT_EQ(env.getManifestReply().getManifestVersion(), 4u);
}

TEST(Frame, AlignedFrameIsReadInPlace) {
  capnp::MallocMessageBuilder b;
  build_reply(b);
  auto bytes = flat_bytes(b);
  std::vector<capnp::word> storage(bytes.size() / sizeof(capnp::word));
  std::memcpy(storage.data(), bytes.data(), bytes.size());
  DecodedFrame f = DecodedFrame::decode(
      frame_over(reinterpret_cast<std::byte*>(storage.data()), bytes.size()));
  EXPECT_FALSE(f.copied());
  EXPECT_EQ(f.envelope().getManifestReply().getManifestVersion(), 4u);
}

TEST(Frame, RejectsEmptyPartialWordAndTrailingBytes) {
  expect_invalid(zmq::message_t(), "empty");
  capnp::MallocMessageBuilder b;
  build_reply(b);
  auto bytes = flat_bytes(b);
  expect_invalid(zmq::message_t(bytes.data(), bytes.size() - 3), "partial word");
  std::vector<std::byte> longer = bytes;
  longer.resize(bytes.size() + 8);
  expect_invalid(zmq::message_t(longer.data(), longer.size()), "trailing word");
}

TEST(Frame, EveryTruncationIsInvalidInput) {
  capnp::MallocMessageBuilder b;
  build_reply(b);
  auto bytes = flat_bytes(b);
  for (size_t n = 1; n < bytes.size(); ++n) {
    try {
      DecodedFrame f = DecodedFrame::decode(zmq::message_t(bytes.data(), n));
      ADD_FAILURE() << "a prefix of " << n << " of " << bytes.size() << " bytes decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput) << e.what();
    }
  }
}

// Reads everything a receiver might read; must not throw on a decoded frame.
void read_all(const DecodedFrame& f) {
  auto env = f.envelope();
  (void)message_name(env);
  switch (env.which()) {
    case proto::Envelope::HELLO: (void)env.getHello().getCapabilities().size(); break;
    case proto::Envelope::WELCOME: (void)env.getWelcome().getRunName().size(); break;
    case proto::Envelope::REJECT: (void)env.getReject().getReason().size(); break;
    case proto::Envelope::DYING: (void)env.getDying().getReason().size(); break;
    case proto::Envelope::ERROR: (void)env.getError().getMessage().size(); break;
    case proto::Envelope::MANIFEST_REPLY: (void)env.getManifestReply().getArenaPath().size(); break;
    case proto::Envelope::SHUTDOWN: (void)env.getShutdown().getReason().size(); break;
    default: break;
  }
}

// Random bytes and random corruptions of a valid message: each either decodes
// (and then reads without throwing) or is kInvalidInput. Never a crash.
TEST(Frame, GarbageAndBitFlipsNeverCrash) {
  std::mt19937_64 rng(12345);
  capnp::MallocMessageBuilder b;
  build_reply(b);
  const auto valid = flat_bytes(b);
  int decoded = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> bytes;
    if (i % 2 == 0) {
      bytes.resize(8 * (1 + rng() % 16));
      for (auto& x : bytes) x = static_cast<std::byte>(rng());
    } else {
      bytes = valid;
      for (int flips = 1 + rng() % 4; flips > 0; --flips) {
        bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
      }
    }
    try {
      DecodedFrame f = DecodedFrame::decode(zmq::message_t(bytes.data(), bytes.size()));
      read_all(f);
      ++decoded;
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::kInvalidInput) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);  // most single-byte flips land in data, still valid
}

TEST(Frame, RootThatIsNotAStructIsInvalidInput) {
  capnp::MallocMessageBuilder b;
  b.getRoot<capnp::AnyPointer>().initAs<capnp::List<uint32_t>>(3);
  expect_invalid(encode_frame(b), "a list root");
}

TEST(Frame, TooDeepNestingIsInvalidInput) {
  capnp::MallocMessageBuilder b;
  auto s = b.getRoot<capnp::AnyPointer>().initAsAnyStruct(0, 1);
  for (int depth = 0; depth < 100; ++depth) {
    s = s.getPointerSection()[0].initAsAnyStruct(0, 1);
  }
  expect_invalid(encode_frame(b), "100 nested structs");
}

}  // namespace
}  // namespace tandem::control
