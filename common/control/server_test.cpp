// The server's side: the socket file, handshakes refused, peers lost by
// SIGKILL, Dying, epoch replacement, and requests both ways.
#include "common/control/server.h"

#include <sys/stat.h>

#include "common/control/test_support.h"

namespace tandem::control {
namespace {
using namespace testing;

TEST_F(ControlTest, SocketIsPrivateInTheRunDirAndRemovedWithTheServer) {
  zmq::context_t context(1);
  std::string path;
  {
    ControlServer server = ControlServer::bind(context, run_);
    path = server.socket_path();
    EXPECT_EQ(path, run_.file("control.sock"));
    EXPECT_EQ(server.endpoint(), "ipc://" + path);
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // A second server of the run must not steal the socket.
    try {
      ControlServer second = ControlServer::bind(context, run_);
      FAIL() << "bound twice";
    } catch (const Error& e) {
      EXPECT_EQ(e.sys_errno(), EEXIST) << e.what();
    }
    EXPECT_EQ(::lstat(path.c_str(), &st), 0);
    ControlServer moved = std::move(server);  // the file goes with the owner
    EXPECT_EQ(::lstat(path.c_str(), &st), 0);
  }
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(ControlTest, HandshakeWelcomesAndReportsTheJoin) {
  zmq::context_t context(1);
  ServerOptions options;
  options.heartbeat_interval = 200ms;
  options.peer_timeout = 5s;
  ServerThread server(ControlServer::bind(context, run_, options));
  auto opts = as(proto::Role::GPU, 0, 3);
  opts.capabilities = "prefill,decode";
  ControlClient client =
      ControlClient::connect(context, endpoint(), opts, self_process(), Clock::now() + kPatience);
  EXPECT_EQ(client.run_name(), run_.name());
  EXPECT_EQ(client.server_process(), self_process());
  EXPECT_EQ(client.heartbeat_interval(), 200ms);
  EXPECT_EQ(client.peer_timeout(), 5s);
  EXPECT_TRUE(server.wait_for(ServerEvent::Kind::kJoined, opts.identity));
}

TEST_F(ControlTest, RejectsAProtocolMismatch) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  auto opts = as(proto::Role::EXPERT, 0, 0);
  opts.protocol_version = proto::CONTROL_PROTOCOL_VERSION + 1;
  try {
    ControlClient::connect(context, endpoint(), opts, self_process(), Clock::now() + kPatience);
    FAIL() << "a client of another protocol version joined";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("protocol mismatch"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(server.wait_for(ServerEvent::Kind::kJoined, opts.identity, 200ms));
}

// A raw DEALER that never reconnects, for peers that misbehave.
zmq::socket_t raw_dealer(zmq::context_t& context, const std::string& endpoint,
                         const std::string& routing_id) {
  zmq::socket_t s = make_dealer(context, routing_id);
  s.set(zmq::sockopt::reconnect_ivl, -1);
  s.set(zmq::sockopt::immediate, 0);  // queue the Hello until connected
  s.connect(endpoint);
  return s;
}

// Sends a Hello for `said` (from `process`) on `s` and returns the reply.
std::optional<DecodedFrame> raw_hello(zmq::socket_t& s, const PeerIdentity& said,
                                      const ProcessId& process) {
  capnp::MallocMessageBuilder m;
  auto h = m.initRoot<proto::Envelope>().initHello();
  h.setRole(said.role);
  h.setIndex(said.index);
  h.setEpoch(said.epoch);
  set_process(h.initProcess(), process);
  h.setProtocolVersion(proto::CONTROL_PROTOCOL_VERSION);
  s.send(encode_frame(m), zmq::send_flags::none);
  if (!wait_readable(s, std::chrono::duration_cast<std::chrono::milliseconds>(kPatience))) {
    return std::nullopt;
  }
  zmq::message_t reply;
  (void)s.recv(reply);
  return DecodedFrame::decode(std::move(reply));
}

std::optional<DecodedFrame> raw_hello(zmq::context_t& context, const std::string& endpoint,
                                      const std::string& routing_id, const PeerIdentity& said) {
  zmq::socket_t s = raw_dealer(context, endpoint, routing_id);
  return raw_hello(s, said, self_process());
}

TEST_F(ControlTest, RejectsAMalformedOrMismatchedIdentity) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  PeerIdentity expert{proto::Role::EXPERT, 1, 0};
  for (const char* bad : {"bogus", "expert/01/0", "wizard/1/0"}) {
    auto reply = raw_hello(context, endpoint(), bad, expert);
    ASSERT_TRUE(reply) << bad;
    auto env = reply->envelope();
    ASSERT_EQ(env.which(), proto::Envelope::REJECT) << bad;
    EXPECT_EQ(env.getReject().getCode(), proto::RejectCode::MALFORMED_IDENTITY);
    EXPECT_NE(std::string(env.getReject().getReason().cStr()).find(bad), std::string::npos);
  }
  // Well-formed, but the Hello claims another identity.
  auto reply = raw_hello(context, endpoint(), "expert/2/0", expert);
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->envelope().which(), proto::Envelope::REJECT);
  EXPECT_EQ(reply->envelope().getReject().getCode(), proto::RejectCode::MALFORMED_IDENTITY);
  EXPECT_TRUE(server.seen().empty());
}

TEST_F(ControlTest, RejectsAnIdentityHeldByAnotherLiveProcess) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  const PeerIdentity id{proto::Role::EXPERT, 3, 0};
  zmq::socket_t first = raw_dealer(context, endpoint(), to_string(id));
  auto welcome = raw_hello(first, id, self_process());
  ASSERT_TRUE(welcome);
  ASSERT_EQ(welcome->envelope().which(), proto::Envelope::WELCOME);
  // Another live process (our parent) claims the same identity.
  auto other = find_process(::getppid());
  ASSERT_TRUE(other);
  zmq::socket_t second = raw_dealer(context, endpoint(), to_string(id));
  auto reply = raw_hello(second, id, *other);
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->envelope().which(), proto::Envelope::REJECT);
  EXPECT_EQ(reply->envelope().getReject().getCode(), proto::RejectCode::DUPLICATE_IDENTITY);
  EXPECT_NE(std::string(reply->envelope().getReject().getReason().cStr())
                .find(tandem::to_string(self_process())),
            std::string::npos);
  EXPECT_FALSE(server.wait_for(ServerEvent::Kind::kLost, id, 100ms));
}

TEST_F(ControlTest, DetectsASigkilledClient) {
  const ProcessId me = self_process();
  const std::string ep = endpoint();
  ReadyPipe ready;
  const PeerIdentity id{proto::Role::EXPERT, 0, 0};
  pid_t child = fork_child([&](zmq::context_t& ctx) -> int {
    ControlClient c = ControlClient::connect(ctx, ep, as(id.role, id.index, id.epoch), me,
                                             Clock::now() + kPatience);
    ready.signal();
    for (;;) c.poll(1s);
  });
  zmq::context_t context(1);
  ServerOptions options;
  options.heartbeat_interval = 100ms;
  options.peer_timeout = 60s;  // so that only the process check can find it
  ServerThread server(ControlServer::bind(context, run_, options));
  ASSERT_TRUE(ready.wait());
  ASSERT_TRUE(server.wait_for(ServerEvent::Kind::kJoined, id));
  const auto killed = Clock::now();
  ::kill(child, SIGKILL);
  auto lost = server.wait_for(ServerEvent::Kind::kLost, id);
  ASSERT_TRUE(lost) << "SIGKILLed client not reported lost";
  EXPECT_LT(Clock::now() - killed, kPatience);
  EXPECT_NE(lost->reason.find("exited"), std::string::npos) << lost->reason;
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
}

TEST_F(ControlTest, DetectsASilentClientByHeartbeatTimeout) {
  zmq::context_t context(1);
  ServerOptions options;
  options.heartbeat_interval = 100ms;
  options.peer_timeout = 500ms;
  ServerThread server(ControlServer::bind(context, run_, options));
  const PeerIdentity id{proto::Role::LOADER, 0, 0};
  ControlClient client = ControlClient::connect(context, endpoint(), as(id.role, 0, 0),
                                                self_process(), Clock::now() + kPatience);
  ASSERT_TRUE(server.wait_for(ServerEvent::Kind::kJoined, id));
  // Heartbeating through poll() keeps it in for several timeouts...
  for (auto until = Clock::now() + 1500ms; Clock::now() < until;) client.poll(50ms);
  EXPECT_FALSE(server.wait_for(ServerEvent::Kind::kLost, id, 1ms));
  // ...silence (a live but stuck process) does not.
  auto lost = server.wait_for(ServerEvent::Kind::kLost, id);
  ASSERT_TRUE(lost);
  EXPECT_NE(lost->reason.find("no message for"), std::string::npos) << lost->reason;
}

TEST_F(ControlTest, DyingArrivesWithItsReasonFromAnExitingProcess) {
  const ProcessId me = self_process();
  const std::string ep = endpoint();
  const PeerIdentity id{proto::Role::EXPERT, 1, 4};
  // Fork before this process has threads (the server's, ZeroMQ's): a child
  // forked beside them could inherit a lock (the logger's) held forever.
  pid_t child = fork_child([&](zmq::context_t& ctx) -> int {
    ControlClient c = ControlClient::connect(ctx, ep, as(id.role, id.index, id.epoch), me,
                                             Clock::now() + kPatience);
    c.send_dying("cannot map the arena: ENOMEM", ErrorKind::kSystem);
    return 3;  // fork_child destroys the context (flushing Dying), then exits
  });
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  auto dying = server.wait_for(ServerEvent::Kind::kDying, id);
  ASSERT_TRUE(dying);
  EXPECT_EQ(dying->reason, "cannot map the arena: ENOMEM");
  EXPECT_EQ(dying->code, ErrorKind::kSystem);
  EXPECT_EQ(wait_child(child), 3);
  // A dying peer is not reported lost a second time when its process goes.
  EXPECT_FALSE(server.wait_for(ServerEvent::Kind::kLost, id, 500ms));
}

TEST_F(ControlTest, ANewerEpochReplacesTheOlderPeer) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  const auto deadline = Clock::now() + kPatience;
  ControlClient old = ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 0, 0),
                                             self_process(), deadline);
  ASSERT_TRUE(server.wait_for(ServerEvent::Kind::kJoined, old.identity()));
  ControlClient fresh = ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 0, 1),
                                               self_process(), deadline);
  auto lost = server.wait_for(ServerEvent::Kind::kLost, old.identity());
  ASSERT_TRUE(lost);
  EXPECT_NE(lost->reason.find("replaced by epoch 1"), std::string::npos) << lost->reason;
  EXPECT_TRUE(server.wait_for(ServerEvent::Kind::kJoined, fresh.identity()));

  // The old one is told, then dropped: its next heartbeat is refused.
  std::optional<DecodedFrame> shutdown;
  while (!shutdown && Clock::now() < deadline) shutdown = old.poll(100ms);
  ASSERT_TRUE(shutdown);
  ASSERT_EQ(shutdown->envelope().which(), proto::Envelope::SHUTDOWN);
  EXPECT_NE(std::string(shutdown->envelope().getShutdown().getReason().cStr()).find("replaced"),
            std::string::npos);
  old.set_state(proto::PeerState::READY);
  try {
    while (Clock::now() < deadline) old.poll(100ms);
    FAIL() << "the replaced peer was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find("not joined"), std::string::npos) << e.what();
  }
  // And the old epoch cannot come back, even while its first connection is
  // still open.
  try {
    ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 0, 0), self_process(),
                           deadline);
    FAIL() << "a stale epoch joined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stale epoch"), std::string::npos) << e.what();
  }
}

TEST_F(ControlTest, RequestsAndErrorsCarryRequestIds) {
  zmq::context_t context(1);
  // The server answers ManifestRequests: version 0 → a reply, else an Error.
  ServerThread server(ControlServer::bind(context, run_), [](ControlServer& s, ServerEvent& e) {
    if (e.kind != ServerEvent::Kind::kMessage) return;
    auto env = e.message->envelope();
    if (env.which() != proto::Envelope::MANIFEST_REQUEST) return;
    if (env.getManifestRequest().getMinVersion() == 0) {
      capnp::MallocMessageBuilder m;
      auto r = m.initRoot<proto::Envelope>().initManifestReply();
      r.setArenaPath("/dev/shm/arena");
      r.setArenaSize(4096);
      r.setManifestVersion(2);
      s.reply(e.peer, env.getRequestId(), m);
    } else {
      s.send_error(e.peer, env.getRequestId(), ErrorKind::kNotFound,
                   "no manifest of that version");
    }
  });
  const auto deadline = Clock::now() + kPatience;
  ControlClient client = ControlClient::connect(context, endpoint(), as(proto::Role::GPU, 0, 0),
                                                self_process(), deadline);
  {
    capnp::MallocMessageBuilder m;
    m.initRoot<proto::Envelope>().initManifestRequest();
    DecodedFrame reply = client.call(m, deadline);
    ASSERT_EQ(reply.envelope().which(), proto::Envelope::MANIFEST_REPLY);
    EXPECT_EQ(reply.envelope().getReplyTo(), 1u);
    EXPECT_EQ(reply.envelope().getManifestReply().getArenaPath(), "/dev/shm/arena");
    EXPECT_EQ(reply.envelope().getManifestReply().getManifestVersion(), 2u);
  }
  {
    capnp::MallocMessageBuilder m;
    m.initRoot<proto::Envelope>().initManifestRequest().setMinVersion(9);
    try {
      client.call(m, deadline);
      FAIL() << "an Error reply did not throw";
    } catch (const RemoteError& e) {
      EXPECT_EQ(e.request_id(), 2u);
      EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
      EXPECT_EQ(e.remote_message(), "no manifest of that version");
      EXPECT_NE(std::string(e.what()).find("request 2 failed"), std::string::npos) << e.what();
    }
  }
}

TEST_F(ControlTest, TheServerAsksAPeerAndGetsTheReplyAsAnEvent) {
  zmq::context_t context(1);
  const PeerIdentity loader{proto::Role::LOADER, 0, 0};
  std::atomic<uint64_t> asked{0};
  ServerThread server(ControlServer::bind(context, run_), [&](ControlServer& s, ServerEvent& e) {
    if (e.kind != ServerEvent::Kind::kJoined) return;
    capnp::MallocMessageBuilder m;
    m.initRoot<proto::Envelope>().initManifestRequest();
    asked = s.send_request(e.peer, m);
  });
  const auto deadline = Clock::now() + kPatience;
  ControlClient client =
      ControlClient::connect(context, endpoint(), as(loader.role, 0, 0), self_process(), deadline);
  std::optional<DecodedFrame> request;
  while (!request && Clock::now() < deadline) request = client.poll(100ms);
  ASSERT_TRUE(request);
  ASSERT_EQ(request->envelope().which(), proto::Envelope::MANIFEST_REQUEST);
  capnp::MallocMessageBuilder m;
  m.initRoot<proto::Envelope>().initManifestReply().setManifestVersion(5);
  client.reply(request->envelope().getRequestId(), m);
  auto got = server.wait_for([&](const SeenEvent& e) {
    return e.kind == ServerEvent::Kind::kMessage && e.message == "manifestReply";
  });
  ASSERT_TRUE(got);
  // (Read only now: the request may arrive before send_request() returns.)
  EXPECT_EQ(request->envelope().getRequestId(), asked.load());
  EXPECT_EQ(got->reply_to, asked.load());
  EXPECT_EQ(got->peer, loader);
}

}  // namespace
}  // namespace tandem::control
