// The coordinator's end of the control plane: a ZeroMQ ROUTER bound to
// ipc://<run dir>/control.sock (mode 0600 inside the 0700 run directory).
//
// Peers join with a Hello sent from a DEALER whose routing id is
// "role/index/epoch"; the server answers Welcome or Reject, then tracks each
// peer by its slot (role/index): process, state, last time heard from. A
// newer epoch at the same slot replaces the older peer, which is reported
// lost. A peer is lost when its process is gone (checked with is_alive, so a
// SIGKILL is seen within a liveness-check interval) or when it has been silent
// longer than the peer timeout (a hung process). There is no thread: the
// owner calls poll() from its loop, and poll() does all of this.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <capnp/message.h>
#include <zmq.hpp>

#include "common/control/frame.h"
#include "common/control/identity.h"
#include "common/error.h"
#include "common/shm/process.h"
#include "common/shm/run_dir.h"

namespace tandem::control {

struct ServerOptions {
  std::string socket_name = "control.sock";  // inside the run directory
  std::chrono::milliseconds heartbeat_interval{500};
  // Silence longer than this means lost (a live but hung process). SIGKILLed
  // peers are found sooner, by the process check.
  std::chrono::milliseconds peer_timeout{2500};
  // How often poll() looks at every peer's process.
  std::chrono::milliseconds liveness_check_interval{100};
  uint32_t protocol_version = proto::CONTROL_PROTOCOL_VERSION;
};

struct PeerInfo {
  PeerIdentity identity;
  ProcessId process;
  proto::PeerState state = proto::PeerState::STARTING;
  std::string capabilities;
  std::chrono::steady_clock::time_point last_heard;
  uint64_t heartbeat_seq = 0;
};

struct ServerEvent {
  enum class Kind {
    kJoined,   // a peer was welcomed
    kMessage,  // a message other than Hello/Heartbeat/Dying from a joined peer
    kLost,     // a peer is gone: process exited, silent too long, or replaced
    kDying,    // a peer said it is dying, and why; it is no longer tracked
  };
  Kind kind;
  PeerIdentity peer;
  std::string reason;                     // kLost, kDying
  ErrorKind code = ErrorKind::kPeerLost;  // kDying: the code the peer sent
  std::optional<DecodedFrame> message;    // kMessage
};

const char* to_string(ServerEvent::Kind kind);

// Removes a socket file once; move-only.
class SocketFile {
 public:
  SocketFile() = default;
  explicit SocketFile(std::string path) : path_(std::move(path)) {}
  SocketFile(SocketFile&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  SocketFile& operator=(SocketFile&& o) noexcept;
  SocketFile(const SocketFile&) = delete;
  SocketFile& operator=(const SocketFile&) = delete;
  ~SocketFile();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ControlServer {
 public:
  ControlServer(ControlServer&&) noexcept = default;
  ControlServer& operator=(ControlServer&&) noexcept = default;
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  // Closes the socket and removes the socket file.
  ~ControlServer() = default;

  // Binds <run dir>/<socket_name>; throws tandem::Error (with errno) if the
  // path is too long for a Unix socket, already exists, or cannot be bound.
  // The context is owned by the caller (main) and must outlive the server.
  static ControlServer bind(zmq::context_t& context, const RunDirectory& run,
                            ServerOptions options = {});

  const std::string& endpoint() const { return endpoint_; }
  const std::string& socket_path() const { return file_.path(); }
  const ProcessId& process() const { return self_; }

  // Handles what has arrived, answers handshakes and heartbeats, checks the
  // peers, and returns the events; waits up to `timeout` while there are
  // none. Malformed frames are logged and answered, never thrown.
  std::vector<ServerEvent> poll(std::chrono::milliseconds timeout);

  // Sends to a joined peer (the exact epoch). Throws kPeerLost if it has not
  // joined or is no longer connected, kTimeout if its queue is full.
  void send(const PeerIdentity& to, capnp::MessageBuilder& message);
  // As send(), stamping a fresh request id, which it returns.
  uint64_t send_request(const PeerIdentity& to, capnp::MessageBuilder& message);
  void reply(const PeerIdentity& to, uint64_t request_id, capnp::MessageBuilder& message);
  void send_error(const PeerIdentity& to, uint64_t request_id, ErrorKind kind,
                  std::string_view text);
  void send_shutdown(const PeerIdentity& to, std::string_view reason);

  // Joined peers by slot ("role/index").
  const std::map<std::string, PeerInfo>& peers() const { return peers_; }
  const PeerInfo* find(const PeerIdentity& id) const;

 private:
  ControlServer() = default;
  void handle(std::vector<zmq::message_t>& parts, std::vector<ServerEvent>& events);
  void handle_hello(const std::string& routing_id, const PeerIdentity& id,
                    proto::Hello::Reader hello, std::vector<ServerEvent>& events);
  void check_peers(std::chrono::steady_clock::time_point now, std::vector<ServerEvent>& events);
  void reject(const std::string& routing_id, proto::RejectCode code, const std::string& reason);
  // Stamps and sends to a routing id; throws as send() does.
  void send_raw(const std::string& routing_id, capnp::MessageBuilder& message);
  // As send_raw(), but logs failures instead of throwing (replies to
  // strangers, notices to peers that may be gone).
  void send_best_effort(const std::string& routing_id, capnp::MessageBuilder& message);

  ServerOptions options_;
  std::string run_name_;
  std::string endpoint_;
  ProcessId self_;
  // Declared before the socket, so the socket closes first and the file is
  // removed after.
  SocketFile file_;
  zmq::socket_t socket_;
  std::map<std::string, PeerInfo> peers_;
  uint64_t next_message_id_ = 1;
  uint64_t next_request_id_ = 1;
  std::chrono::steady_clock::time_point next_liveness_check_{};
};

}  // namespace tandem::control
