// Every control message round-trips through flat bytes inside an Envelope,
// and a reader that meets a union member it does not know (a newer peer)
// sees an unknown which() rather than garbage.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "proto/control.capnp.h"

namespace tandem {
namespace {

// Builds an envelope with fill(), flattens it and hands the reader to check().
template <typename Fill, typename Check>
void round_trip(Fill fill, Check check) {
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::Envelope>();
  env.setMessageId(7);
  env.setRequestId(42);
  env.setReplyTo(5);
  fill(env);
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(b);
  capnp::FlatArrayMessageReader r(flat);
  auto got = r.getRoot<proto::Envelope>();
  EXPECT_EQ(got.getMessageId(), 7u);
  EXPECT_EQ(got.getRequestId(), 42u);
  EXPECT_EQ(got.getReplyTo(), 5u);
  check(got);
}

TEST(Control, HelloWelcomeReject) {
  round_trip(
      [](proto::Envelope::Builder e) {
        auto h = e.initHello();
        h.setRole(proto::Role::EXPERT);
        h.setIndex(3);
        h.setEpoch(2);
        h.initProcess().setPid(1234);
        h.getProcess().setStartTicks(987654321);
        h.setProtocolVersion(proto::CONTROL_PROTOCOL_VERSION);
        h.setCapabilities("numa=1");
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::HELLO);
        auto h = e.getHello();
        EXPECT_EQ(h.getRole(), proto::Role::EXPERT);
        EXPECT_EQ(h.getIndex(), 3u);
        EXPECT_EQ(h.getEpoch(), 2u);
        EXPECT_EQ(h.getProcess().getPid(), 1234);
        EXPECT_EQ(h.getProcess().getStartTicks(), 987654321u);
        EXPECT_EQ(h.getProtocolVersion(), proto::CONTROL_PROTOCOL_VERSION);
        EXPECT_EQ(h.getCapabilities(), "numa=1");
      });
  round_trip(
      [](proto::Envelope::Builder e) {
        auto w = e.initWelcome();
        w.setRunName("run-1-2-abc");
        w.initServer().setPid(99);
        w.setHeartbeatIntervalMs(250);
        w.setPeerTimeoutMs(1500);
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::WELCOME);
        EXPECT_EQ(e.getWelcome().getRunName(), "run-1-2-abc");
        EXPECT_EQ(e.getWelcome().getServer().getPid(), 99);
        EXPECT_EQ(e.getWelcome().getHeartbeatIntervalMs(), 250u);
        EXPECT_EQ(e.getWelcome().getPeerTimeoutMs(), 1500u);
      });
  round_trip(
      [](proto::Envelope::Builder e) {
        auto r = e.initReject();
        r.setCode(proto::RejectCode::PROTOCOL_MISMATCH);
        r.setReason("version 9, server speaks 1");
        r.setServerProtocolVersion(1);
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::REJECT);
        EXPECT_EQ(e.getReject().getCode(), proto::RejectCode::PROTOCOL_MISMATCH);
        EXPECT_EQ(e.getReject().getReason(), "version 9, server speaks 1");
      });
}

TEST(Control, HeartbeatDyingErrorShutdown) {
  round_trip(
      [](proto::Envelope::Builder e) {
        e.initHeartbeat().setSeq(17);
        e.getHeartbeat().setState(proto::PeerState::DRAINING);
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::HEARTBEAT);
        EXPECT_EQ(e.getHeartbeat().getSeq(), 17u);
        EXPECT_EQ(e.getHeartbeat().getState(), proto::PeerState::DRAINING);
      });
  round_trip(
      [](proto::Envelope::Builder e) {
        e.initDying().setReason("arena mapping failed: ENOMEM");
        e.getDying().setCode(proto::ErrorCode::SYSTEM);
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::DYING);
        EXPECT_EQ(e.getDying().getReason(), "arena mapping failed: ENOMEM");
        EXPECT_EQ(e.getDying().getCode(), proto::ErrorCode::SYSTEM);
      });
  round_trip(
      [](proto::Envelope::Builder e) {
        auto err = e.initError();
        err.setRequestId(42);
        err.setKind(proto::ErrorCode::NOT_FOUND);
        err.setMessage("no arena yet");
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::ERROR);
        EXPECT_EQ(e.getError().getRequestId(), 42u);
        EXPECT_EQ(e.getError().getKind(), proto::ErrorCode::NOT_FOUND);
        EXPECT_EQ(e.getError().getMessage(), "no arena yet");
      });
  round_trip([](proto::Envelope::Builder e) { e.initShutdown().setReason("operator asked"); },
             [](proto::Envelope::Reader e) {
               ASSERT_EQ(e.which(), proto::Envelope::SHUTDOWN);
               EXPECT_EQ(e.getShutdown().getReason(), "operator asked");
             });
}

TEST(Control, ManifestRequestAndReply) {
  round_trip([](proto::Envelope::Builder e) { e.initManifestRequest().setMinVersion(3); },
             [](proto::Envelope::Reader e) {
               ASSERT_EQ(e.which(), proto::Envelope::MANIFEST_REQUEST);
               EXPECT_EQ(e.getManifestRequest().getMinVersion(), 3u);
             });
  round_trip(
      [](proto::Envelope::Builder e) {
        auto r = e.initManifestReply();
        r.setArenaPath("/dev/shm/tandem-1000/run-1-2-x/arena");
        r.setArenaSize(uint64_t{1} << 40);
        r.setManifestVersion(3);
      },
      [](proto::Envelope::Reader e) {
        ASSERT_EQ(e.which(), proto::Envelope::MANIFEST_REPLY);
        EXPECT_EQ(e.getManifestReply().getArenaPath(), "/dev/shm/tandem-1000/run-1-2-x/arena");
        EXPECT_EQ(e.getManifestReply().getArenaSize(), uint64_t{1} << 40);
        EXPECT_EQ(e.getManifestReply().getManifestVersion(), 3u);
      });
}

TEST(Control, UnknownUnionMemberFromANewerPeerIsNotOneWeKnow) {
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<proto::Envelope>();
  env.initShutdown().setReason("x");
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(b);
  // The discriminant is the first 16 bits after messageId, requestId and replyTo in
  // the data section; set it past the last member, as a newer schema's would
  // be. Offsets: segment table (8 bytes), root pointer (8), three UInt64s (24).
  auto bytes = flat.asBytes();
  const uint16_t shutdown = static_cast<uint16_t>(proto::Envelope::SHUTDOWN);
  size_t at = 8 + 8 + 24;
  ASSERT_EQ(bytes[at] | (bytes[at + 1] << 8), shutdown);
  bytes[at] = 200;
  capnp::FlatArrayMessageReader r(flat);
  auto got = r.getRoot<proto::Envelope>();
  EXPECT_EQ(static_cast<uint16_t>(got.which()), 200u);
  EXPECT_FALSE(got.isShutdown());
}

}  // namespace
}  // namespace tandem
