// A process's end of the control plane: a ZeroMQ DEALER whose routing id is
// its identity "role/index/epoch", connected to the coordinator's ROUTER.
//
// connect() performs the handshake with a bounded wait, watching the server's
// process meanwhile: a dead server is kPeerLost at once, not at the deadline.
// After the Welcome there is no thread: the owner calls poll() (or call())
// from its loop at least every heartbeat interval, and those calls send the
// heartbeats, watch the server (process gone → kPeerLost; silent longer than
// the peer timeout → kTimeout; dropped by the server → kPeerLost) and hand
// back every other message. One socket, one thread; nothing global.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include <capnp/message.h>
#include <zmq.hpp>

#include "common/control/frame.h"
#include "common/control/identity.h"
#include "common/error.h"
#include "common/shm/process.h"

namespace tandem::control {

struct ClientOptions {
  PeerIdentity identity;
  std::string capabilities;  // free text for the Hello, e.g. "prefill,decode"
  uint32_t protocol_version = proto::CONTROL_PROTOCOL_VERSION;
  // The handshake waits in slices this long, checking the server's process
  // between them.
  std::chrono::milliseconds handshake_slice{50};
  // Resends the Hello this often while unanswered (a reconnect may lose it).
  std::chrono::milliseconds hello_resend{1000};
  // How often the server's process is checked after the handshake.
  std::chrono::milliseconds liveness_check_interval{100};
};

class ControlClient {
 public:
  using Clock = std::chrono::steady_clock;

  ControlClient(ControlClient&&) noexcept = default;
  ControlClient& operator=(ControlClient&&) noexcept = default;
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  ~ControlClient() = default;

  // Connects to `endpoint` as options.identity and waits for the Welcome
  // until `deadline`. `server` is the process expected to answer (the
  // coordinator; for a pid only, see find_process()). Throws tandem::Error:
  //  - kPeerLost as soon as `server` is not running;
  //  - kTimeout at the deadline, naming the endpoint and the time waited;
  //  - on a Reject: kUnsupported (protocol mismatch), kInvalidInput (identity
  //    or Hello refused), kPeerLost (identity held by a live process or a
  //    newer epoch), each with the server's reason.
  // The context is owned by the caller (main) and must outlive the client.
  static ControlClient connect(zmq::context_t& context, const std::string& endpoint,
                               ClientOptions options, const ProcessId& server,
                               Clock::time_point deadline);

  const PeerIdentity& identity() const { return options_.identity; }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& run_name() const { return run_name_; }
  const ProcessId& server_process() const { return server_; }
  std::chrono::milliseconds heartbeat_interval() const { return heartbeat_interval_; }
  std::chrono::milliseconds peer_timeout() const { return peer_timeout_; }

  // Keeps the connection alive and returns the next message for the owner
  // (requests, replies not claimed by call(), Error, Shutdown, anything new),
  // waiting up to `timeout`; nullopt if none came. Heartbeats and their
  // echoes are handled inside. Throws as described at the top.
  std::optional<DecodedFrame> poll(std::chrono::milliseconds timeout);

  // The state reported in heartbeats; a change is sent at once.
  void set_state(proto::PeerState state);
  proto::PeerState state() const { return state_; }

  // One-way message (stamps the envelope's messageId).
  void send(capnp::MessageBuilder& message);
  // Stamps a fresh request id, sends, returns the id.
  uint64_t send_request(capnp::MessageBuilder& message);
  // Answers the server's request `request_id`.
  void reply(uint64_t request_id, capnp::MessageBuilder& message);
  void send_error(uint64_t request_id, ErrorKind kind, std::string_view text);
  // Sends a request and waits for its reply until `deadline`, heartbeating
  // meanwhile; other messages are kept for poll(). An Error reply throws
  // RemoteError (its kind, naming the request id); no reply → kTimeout.
  DecodedFrame call(capnp::MessageBuilder& message, Clock::time_point deadline);

  // "Dying, because …": sends Dying and closes the socket. The frame leaves
  // the process when the caller's zmq::context_t is destroyed, which waits for
  // it at most ZMQ_LINGER (socket.h) — so destroy the context before exiting
  // (return from main, not _exit). Never throws; the client is closed after.
  void send_dying(std::string_view reason, ErrorKind code = ErrorKind::kInternal) noexcept;

 private:
  ControlClient() = default;
  // Heartbeats, watches the server, and returns the first message for the
  // owner, or nullopt once `until` has passed.
  std::optional<DecodedFrame> receive_until(Clock::time_point until);
  void beat(Clock::time_point now);
  void check_server(Clock::time_point now);
  void send_stamped(capnp::MessageBuilder& message);
  void require_open() const;

  ClientOptions options_;
  std::string endpoint_;
  std::string run_name_;
  ProcessId server_;
  ProcessId watched_;
  std::chrono::milliseconds heartbeat_interval_{500};
  std::chrono::milliseconds peer_timeout_{2500};
  zmq::socket_t socket_;
  proto::PeerState state_ = proto::PeerState::STARTING;
  std::deque<DecodedFrame> pending_;  // messages that arrived during call()
  uint64_t next_message_id_ = 1;
  uint64_t next_request_id_ = 1;
  uint64_t heartbeat_seq_ = 0;
  Clock::time_point next_beat_{};
  Clock::time_point next_liveness_check_{};
  Clock::time_point last_heard_{};
};

}  // namespace tandem::control
