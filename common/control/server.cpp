#include "common/control/server.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/control/message.h"
#include "common/control/socket.h"

namespace tandem::control {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// Messages handled per poll() before returning, so that a flood cannot
// starve the peer checks.
constexpr int kMaxMessagesPerPoll = 256;

}  // namespace

const char* to_string(ServerEvent::Kind kind) {
  switch (kind) {
    case ServerEvent::Kind::kJoined: return "joined";
    case ServerEvent::Kind::kMessage: return "message";
    case ServerEvent::Kind::kLost: return "lost";
    case ServerEvent::Kind::kDying: return "dying";
  }
  return "?";
}

SocketFile& SocketFile::operator=(SocketFile&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_ = std::exchange(o.path_, {});
  }
  return *this;
}

SocketFile::~SocketFile() {
  // ZeroMQ also unlinks the file, but later, from its I/O thread; removing it
  // here makes "the server object is gone" mean "the socket file is gone".
  if (!path_.empty()) ::unlink(path_.c_str());
}

ControlServer ControlServer::bind(zmq::context_t& context, const RunDirectory& run,
                                  ServerOptions options) {
  ControlServer s;
  s.options_ = std::move(options);
  s.run_name_ = run.name();
  s.self_ = self_process();
  const std::string path = run.file(s.options_.socket_name);
  s.endpoint_ = ipc_endpoint(path);
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    throw Error(ErrorKind::kInvalidInput,
                fmt::format("control socket path {} is {} bytes, longer than a Unix socket "
                            "allows ({}); use a shorter run base",
                            path, path.size(), sizeof(sockaddr_un::sun_path) - 1),
                ENAMETOOLONG);
  }
  // ZeroMQ unlinks whatever is at the path before binding, which would steal
  // the socket of another server of this run; refuse instead.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    throw Error(ErrorKind::kSystem,
                fmt::format("control socket {} already exists: another server in this run?", path),
                EEXIST);
  }
  s.socket_ = make_router(context);
  try {
    s.socket_.bind(s.endpoint_);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorKind::kSystem,
                fmt::format("binding control socket {}: {} (errno {})", s.endpoint_, e.what(), e.num()),
                e.num());
  }
  s.file_ = SocketFile(path);
  // The run directory (0700) already keeps other users out; the mode says so
  // too, for anyone who moves or links the file.
  TANDEM_SYSCALL(::chmod(path.c_str(), 0600));
  spdlog::info("control: listening on {}", s.endpoint_);
  return s;
}

const PeerInfo* ControlServer::find(const PeerIdentity& id) const {
  auto it = peers_.find(id.slot());
  if (it == peers_.end() || it->second.identity.epoch != id.epoch) return nullptr;
  return &it->second;
}

std::vector<ServerEvent> ControlServer::poll(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<ServerEvent> events;
  for (;;) {
    for (int i = 0; i < kMaxMessagesPerPoll; ++i) {
      auto parts = try_receive(socket_);
      if (!parts) break;
      handle(*parts, events);
    }
    auto now = Clock::now();
    if (now >= next_liveness_check_ || !events.empty()) check_peers(now, events);
    if (!events.empty() || now >= deadline) return events;
    auto wait = std::min(duration_cast<milliseconds>(deadline - now) + milliseconds(1),
                         options_.liveness_check_interval);
    wait_readable(socket_, wait);
  }
}

void ControlServer::check_peers(Clock::time_point now, std::vector<ServerEvent>& events) {
  next_liveness_check_ = now + options_.liveness_check_interval;
  for (auto it = peers_.begin(); it != peers_.end();) {
    const PeerInfo& p = it->second;
    std::string reason;
    if (!is_alive(p.process)) {
      reason = fmt::format("process {} exited", tandem::to_string(p.process));
    } else if (now - p.last_heard > options_.peer_timeout) {
      reason = fmt::format("no message for {} ms (peer timeout {} ms)",
                           duration_cast<milliseconds>(now - p.last_heard).count(),
                           options_.peer_timeout.count());
    }
    if (reason.empty()) {
      ++it;
      continue;
    }
    spdlog::warn("control: peer {} lost: {}", to_string(p.identity), reason);
    events.push_back(ServerEvent{ServerEvent::Kind::kLost, p.identity, reason,
                                 ErrorKind::kPeerLost, std::nullopt});
    it = peers_.erase(it);
  }
}

void ControlServer::handle(std::vector<zmq::message_t>& parts, std::vector<ServerEvent>& events) {
  if (parts.size() != 2) {
    spdlog::warn("control: dropped a message of {} parts (want routing id + one frame)",
                 parts.size());
    return;
  }
  const std::string routing_id = parts[0].to_string();
  auto id = parse_identity(routing_id);
  if (!id) {
    reject(routing_id, proto::RejectCode::MALFORMED_IDENTITY,
           fmt::format("routing id \"{}\" is not role/index/epoch (roles: loader, expert, gpu, "
                       "coordinator, launcher)",
                       routing_id));
    return;
  }
  std::optional<DecodedFrame> frame;
  proto::Envelope::Reader env;
  try {
    frame.emplace(DecodedFrame::decode(std::move(parts[1])));
    env = frame->envelope();
  } catch (const Error& e) {
    spdlog::warn("control: malformed frame from {}: {}", routing_id, e.what());
    if (find(*id)) {
      capnp::MallocMessageBuilder m;
      build_error(m, 0, ErrorKind::kInvalidInput, e.what());
      send_best_effort(routing_id, m);
    } else {
      reject(routing_id, proto::RejectCode::MALFORMED_HELLO, e.what());
    }
    return;
  }

  if (env.which() == proto::Envelope::HELLO) {
    handle_hello(routing_id, *id, env.getHello(), events);
    return;
  }
  auto it = peers_.find(id->slot());
  if (it == peers_.end() || it->second.identity.epoch != id->epoch) {
    reject(routing_id, proto::RejectCode::NOT_JOINED,
           fmt::format("{} from {}, which has not joined (or was dropped); send Hello first",
                       message_name(env), routing_id));
    return;
  }
  PeerInfo& peer = it->second;
  peer.last_heard = Clock::now();
  switch (env.which()) {
    case proto::Envelope::HEARTBEAT: {
      auto hb = env.getHeartbeat();
      peer.heartbeat_seq = hb.getSeq();
      peer.state = hb.getState();
      // The echo is the client's evidence that the server is not hung.
      capnp::MallocMessageBuilder m;
      auto echo = m.initRoot<proto::Envelope>().initHeartbeat();
      echo.setSeq(hb.getSeq());
      echo.setState(proto::PeerState::READY);
      send_best_effort(routing_id, m);
      return;
    }
    case proto::Envelope::DYING: {
      auto d = env.getDying();
      ServerEvent ev{ServerEvent::Kind::kDying, peer.identity, d.getReason().cStr(),
                     from_proto(d.getCode()), std::nullopt};
      spdlog::warn("control: peer {} is dying: {}", routing_id, ev.reason);
      peers_.erase(it);
      events.push_back(std::move(ev));
      return;
    }
    default:
      events.push_back(ServerEvent{ServerEvent::Kind::kMessage, peer.identity, {},
                                   ErrorKind::kPeerLost, std::move(frame)});
      return;
  }
}

void ControlServer::handle_hello(const std::string& routing_id, const PeerIdentity& id,
                                 proto::Hello::Reader hello, std::vector<ServerEvent>& events) {
  PeerIdentity said{hello.getRole(), hello.getIndex(), hello.getEpoch()};
  if (said != id) {
    reject(routing_id, proto::RejectCode::MALFORMED_IDENTITY,
           fmt::format("routing id {} but the Hello says {}", routing_id, to_string(said)));
    return;
  }
  if (hello.getProtocolVersion() != options_.protocol_version) {
    reject(routing_id, proto::RejectCode::PROTOCOL_MISMATCH,
           fmt::format("{} speaks control protocol {}, this server speaks {}", routing_id,
                       hello.getProtocolVersion(), options_.protocol_version));
    return;
  }
  const ProcessId process = get_process(hello.getProcess());
  if (!is_alive(process)) {
    reject(routing_id, proto::RejectCode::PROCESS_NOT_ALIVE,
           fmt::format("{} names process {}, which is not running here", routing_id,
                       tandem::to_string(process)));
    return;
  }

  auto it = peers_.find(id.slot());
  if (it != peers_.end()) {
    PeerInfo& old = it->second;
    if (old.identity.epoch > id.epoch) {
      reject(routing_id, proto::RejectCode::STALE_EPOCH,
             fmt::format("{} is stale: epoch {} of {} has joined", routing_id, old.identity.epoch,
                         id.slot()));
      return;
    }
    if (old.identity.epoch == id.epoch && old.process == process) {
      // The same process again: a Hello resent before our Welcome arrived.
      // Fall through to welcome it again, without a second kJoined.
    } else if (old.identity.epoch == id.epoch && is_alive(old.process)) {
      reject(routing_id, proto::RejectCode::DUPLICATE_IDENTITY,
             fmt::format("{} is held by live process {}", routing_id,
                         tandem::to_string(old.process)));
      return;
    } else {
      std::string reason =
          old.identity.epoch == id.epoch
              ? fmt::format("process {} exited; {} rejoined from process {}",
                            tandem::to_string(old.process), routing_id, tandem::to_string(process))
              : fmt::format("replaced by epoch {}", id.epoch);
      // Tell the old process, in case it is still there and listening.
      capnp::MallocMessageBuilder m;
      m.initRoot<proto::Envelope>().initShutdown().setReason(reason);
      send_best_effort(to_string(old.identity), m);
      spdlog::warn("control: peer {} lost: {}", to_string(old.identity), reason);
      events.push_back(ServerEvent{ServerEvent::Kind::kLost, old.identity, reason,
                                   ErrorKind::kPeerLost, std::nullopt});
      peers_.erase(it);
    }
  }

  capnp::MallocMessageBuilder m;
  auto w = m.initRoot<proto::Envelope>().initWelcome();
  w.setRunName(run_name_);
  set_process(w.initServer(), self_);
  w.setHeartbeatIntervalMs(static_cast<uint32_t>(options_.heartbeat_interval.count()));
  w.setPeerTimeoutMs(static_cast<uint32_t>(options_.peer_timeout.count()));
  w.setProtocolVersion(options_.protocol_version);
  try {
    send_raw(routing_id, m);
  } catch (const Error& e) {
    spdlog::warn("control: could not welcome {}: {}", routing_id, e.what());
    peers_.erase(id.slot());
    return;
  }
  auto [slot, inserted] = peers_.try_emplace(id.slot());
  PeerInfo& p = slot->second;
  p.last_heard = Clock::now();
  if (!inserted) return;  // the resent-Hello case
  p.identity = id;
  p.process = process;
  p.capabilities = hello.getCapabilities().cStr();
  spdlog::info("control: {} joined (process {}{}{})", routing_id, tandem::to_string(process),
               p.capabilities.empty() ? "" : ", ", p.capabilities);
  events.push_back(
      ServerEvent{ServerEvent::Kind::kJoined, id, {}, ErrorKind::kPeerLost, std::nullopt});
}

void ControlServer::reject(const std::string& routing_id, proto::RejectCode code,
                           const std::string& reason) {
  spdlog::warn("control: rejecting \"{}\": {}", routing_id, reason);
  capnp::MallocMessageBuilder m;
  auto r = m.initRoot<proto::Envelope>().initReject();
  r.setCode(code);
  r.setReason(reason);
  r.setServerProtocolVersion(options_.protocol_version);
  send_best_effort(routing_id, m);
}

void ControlServer::send_raw(const std::string& routing_id, capnp::MessageBuilder& message) {
  outgoing_envelope(message).setMessageId(next_message_id_++);
  std::vector<zmq::message_t> parts;
  parts.emplace_back(routing_id.data(), routing_id.size());
  parts.push_back(encode_frame(message));
  if (!try_send(socket_, parts, "sending to control peer " + routing_id)) {
    throw Error(ErrorKind::kTimeout,
                fmt::format("control peer {} is not reading: its send queue is full", routing_id));
  }
}

void ControlServer::send_best_effort(const std::string& routing_id,
                                     capnp::MessageBuilder& message) {
  try {
    send_raw(routing_id, message);
  } catch (const Error& e) {
    spdlog::debug("control: {}", e.what());
  }
}

void ControlServer::send(const PeerIdentity& to, capnp::MessageBuilder& message) {
  if (!find(to)) {
    throw Error(ErrorKind::kPeerLost, fmt::format("control peer {} has not joined", to_string(to)));
  }
  send_raw(to_string(to), message);
}

uint64_t ControlServer::send_request(const PeerIdentity& to, capnp::MessageBuilder& message) {
  uint64_t id = next_request_id_++;
  outgoing_envelope(message).setRequestId(id);
  send(to, message);
  return id;
}

void ControlServer::reply(const PeerIdentity& to, uint64_t request_id,
                          capnp::MessageBuilder& message) {
  outgoing_envelope(message).setReplyTo(request_id);
  send(to, message);
}

void ControlServer::send_error(const PeerIdentity& to, uint64_t request_id, ErrorKind kind,
                               std::string_view text) {
  capnp::MallocMessageBuilder m;
  build_error(m, request_id, kind, text);
  send(to, m);
}

void ControlServer::send_shutdown(const PeerIdentity& to, std::string_view reason) {
  capnp::MallocMessageBuilder m;
  m.initRoot<proto::Envelope>().initShutdown().setReason(std::string(reason));
  send(to, m);
}

}  // namespace tandem::control
