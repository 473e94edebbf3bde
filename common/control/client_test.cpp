// The client's side: bounded handshakes (timeout, dead server found at once),
// a server that dies after the handshake, and messages kept during call().
#include "common/control/client.h"

#include "common/control/test_support.h"

namespace tandem::control {
namespace {
using namespace testing;

TEST_F(ControlTest, HandshakeTimesOutWhenNobodyBinds) {
  zmq::context_t context(1);
  const auto start = Clock::now();
  const auto wait = 500ms;
  try {
    ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 0, 0), self_process(),
                           start + wait);
    FAIL() << "connected to nobody";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(endpoint()), std::string::npos) << what;
    EXPECT_NE(what.find(" ms"), std::string::npos) << what;
    EXPECT_NE(what.find("nobody bound"), std::string::npos) << what;
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, wait);
  EXPECT_LT(took, wait + 5s) << "the handshake overran its deadline";
}

TEST_F(ControlTest, HandshakeFailsAtOnceWhenTheWatchedProcessIsNotTheServer) {
  zmq::context_t context(1);
  ProcessId gone = self_process();
  gone.start_ticks += 1;  // this pid, another start: a process that no longer exists
  const auto start = Clock::now();
  try {
    ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 0, 0), gone,
                           start + 60s);
    FAIL() << "connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find(tandem::to_string(gone)), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, kPatience);
}

// A child binds the endpoint but never answers, and is SIGKILLed while the
// handshake waits: the client gives up at once, long before its deadline.
TEST_F(ControlTest, HandshakeFailsFastWhenTheServerIsKilledBeforeAnswering) {
  const std::string path = run_.file("control.sock");
  ReadyPipe ready;
  pid_t child = fork_child([&](zmq::context_t& ctx) -> int {
    zmq::socket_t mute = make_router(ctx);
    mute.bind(ipc_endpoint(path));
    ready.signal();
    for (;;) ::pause();
  });
  ASSERT_TRUE(ready.wait());
  auto server = find_process(child);
  ASSERT_TRUE(server);
  std::thread killer([child] {
    std::this_thread::sleep_for(300ms);
    ::kill(child, SIGKILL);
  });
  zmq::context_t context(1);
  const auto start = Clock::now();
  try {
    ControlClient::connect(context, endpoint(), as(proto::Role::GPU, 1, 0), *server,
                           start + 120s);
    ADD_FAILURE() << "connected to a mute server";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find("not running"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, kPatience);
  killer.join();
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
}

// A child serves; once the client has joined, the child is SIGKILLed and the
// client's next poll() says so.
TEST_F(ControlTest, PollReportsAServerKilledAfterTheHandshake) {
  RunDirectory& run = run_;
  ReadyPipe bound;
  pid_t child = fork_child([&](zmq::context_t& ctx) -> int {
    ServerOptions options;
    options.heartbeat_interval = 100ms;
    ControlServer server = ControlServer::bind(ctx, run, options);
    bound.signal();
    for (;;) server.poll(1s);
  });
  ASSERT_TRUE(bound.wait());
  auto server = find_process(child);
  ASSERT_TRUE(server);
  zmq::context_t context(1);
  ControlClient client = ControlClient::connect(context, endpoint(), as(proto::Role::EXPERT, 2, 0),
                                                *server, Clock::now() + kPatience);
  EXPECT_EQ(client.server_process(), *server);
  for (auto until = Clock::now() + 300ms; Clock::now() < until;) client.poll(50ms);
  ::kill(child, SIGKILL);
  const auto killed = Clock::now();
  try {
    while (Clock::now() - killed < kPatience) client.poll(100ms);
    ADD_FAILURE() << "the server's death went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost) << e.what();
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
}

// Messages that arrive while call() waits for its reply are not lost: poll()
// returns them afterwards, in order.
TEST_F(ControlTest, CallKeepsOtherMessagesForPoll) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_), [](ControlServer& s, ServerEvent& e) {
    if (e.kind != ServerEvent::Kind::kMessage) return;
    auto env = e.message->envelope();
    if (env.which() != proto::Envelope::MANIFEST_REQUEST) return;
    s.send_shutdown(e.peer, "first");  // before the reply
    capnp::MallocMessageBuilder m;
    m.initRoot<proto::Envelope>().initManifestReply().setManifestVersion(1);
    s.reply(e.peer, env.getRequestId(), m);
  });
  const auto deadline = Clock::now() + kPatience;
  ControlClient client = ControlClient::connect(context, endpoint(), as(proto::Role::GPU, 0, 0),
                                                self_process(), deadline);
  capnp::MallocMessageBuilder m;
  m.initRoot<proto::Envelope>().initManifestRequest();
  DecodedFrame reply = client.call(m, deadline);
  EXPECT_EQ(reply.envelope().which(), proto::Envelope::MANIFEST_REPLY);
  auto kept = client.poll(0ms);
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->envelope().which(), proto::Envelope::SHUTDOWN);
  EXPECT_EQ(kept->envelope().getShutdown().getReason(), "first");
}

TEST_F(ControlTest, CallTimesOutNamingTheRequest) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));  // never answers requests
  ControlClient client = ControlClient::connect(context, endpoint(), as(proto::Role::GPU, 0, 0),
                                                self_process(), Clock::now() + kPatience);
  capnp::MallocMessageBuilder m;
  m.initRoot<proto::Envelope>().initManifestRequest();
  try {
    client.call(m, Clock::now() + 300ms);
    FAIL() << "no reply, yet call() returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(std::string(e.what()).find("request 1 (manifestRequest)"), std::string::npos)
        << e.what();
  }
}

TEST_F(ControlTest, AClosedClientRefusesToSend) {
  zmq::context_t context(1);
  ServerThread server(ControlServer::bind(context, run_));
  ControlClient client = ControlClient::connect(context, endpoint(), as(proto::Role::LAUNCHER, 0, 0),
                                                self_process(), Clock::now() + kPatience);
  client.send_dying("test over", ErrorKind::kInternal);
  client.send_dying("twice is harmless");
  EXPECT_TRUE(server.wait_for(ServerEvent::Kind::kDying, client.identity()));
  try {
    client.poll(0ms);
    FAIL() << "a closed client polled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPeerLost);
  }
}

}  // namespace
}  // namespace tandem::control
