#include "common/control/client.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/control/message.h"
#include "common/control/socket.h"

namespace tandem::control {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using Clock = ControlClient::Clock;

long long ms_since(Clock::time_point t) {
  return duration_cast<milliseconds>(Clock::now() - t).count();
}

ErrorKind reject_kind(proto::RejectCode code) {
  switch (code) {
    case proto::RejectCode::PROTOCOL_MISMATCH: return ErrorKind::kUnsupported;
    case proto::RejectCode::MALFORMED_IDENTITY:
    case proto::RejectCode::MALFORMED_HELLO:
    case proto::RejectCode::PROCESS_NOT_ALIVE: return ErrorKind::kInvalidInput;
    case proto::RejectCode::DUPLICATE_IDENTITY:
    case proto::RejectCode::STALE_EPOCH:
    case proto::RejectCode::NOT_JOINED: return ErrorKind::kPeerLost;
  }
  return ErrorKind::kInvalidInput;
}

const char* reject_name(proto::RejectCode code) {
  switch (code) {
    case proto::RejectCode::PROTOCOL_MISMATCH: return "protocol mismatch";
    case proto::RejectCode::MALFORMED_IDENTITY: return "malformed identity";
    case proto::RejectCode::MALFORMED_HELLO: return "malformed hello";
    case proto::RejectCode::PROCESS_NOT_ALIVE: return "process not alive";
    case proto::RejectCode::DUPLICATE_IDENTITY: return "duplicate identity";
    case proto::RejectCode::STALE_EPOCH: return "stale epoch";
    case proto::RejectCode::NOT_JOINED: return "not joined";
  }
  return "unknown reject code";
}

[[noreturn]] void fail_rejected(const std::string& endpoint, const std::string& identity,
                                proto::Reject::Reader r) {
  throw Error(reject_kind(r.getCode()),
              fmt::format("control server at {} rejected {} ({}): {}", endpoint, identity,
                          reject_name(r.getCode()), r.getReason().cStr()));
}

// Decodes a frame from the server; a malformed one is logged and dropped.
std::optional<DecodedFrame> decode_from_server(std::vector<zmq::message_t>& parts,
                                               const std::string& endpoint) {
  if (parts.size() != 1) {
    spdlog::warn("control: dropped a message of {} parts from {}", parts.size(), endpoint);
    return std::nullopt;
  }
  try {
    DecodedFrame f = DecodedFrame::decode(std::move(parts[0]));
    (void)f.envelope();
    return f;
  } catch (const Error& e) {
    spdlog::warn("control: malformed frame from {}: {}", endpoint, e.what());
    return std::nullopt;
  }
}

}  // namespace

ControlClient ControlClient::connect(zmq::context_t& context, const std::string& endpoint,
                                     ClientOptions options, const ProcessId& server,
                                     Clock::time_point deadline) {
  const auto start = Clock::now();
  ControlClient c;
  c.options_ = std::move(options);
  c.endpoint_ = endpoint;
  c.watched_ = server;
  const std::string me = to_string(c.options_.identity);
  c.socket_ = make_dealer(context, me);
  try {
    c.socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorKind::kSystem,
                fmt::format("connecting {} to {}: {} (errno {})", me, endpoint, e.what(), e.num()),
                e.num());
  }

  capnp::MallocMessageBuilder hello_msg;
  auto hello = hello_msg.initRoot<proto::Envelope>().initHello();
  hello.setRole(c.options_.identity.role);
  hello.setIndex(c.options_.identity.index);
  hello.setEpoch(c.options_.identity.epoch);
  set_process(hello.initProcess(), self_process());
  hello.setProtocolVersion(c.options_.protocol_version);
  hello.setCapabilities(c.options_.capabilities);

  bool hello_sent = false;
  Clock::time_point last_hello{};
  for (;;) {
    if (!is_alive(server)) {
      throw Error(ErrorKind::kPeerLost,
                  fmt::format("control server process {} for {} is not running (handshake of {} "
                              "gave up after {} ms)",
                              tandem::to_string(server), endpoint, me, ms_since(start)));
    }
    auto now = Clock::now();
    if (now >= deadline) {
      throw Error(ErrorKind::kTimeout,
                  fmt::format("no Welcome from control server at {} for {} after {} ms ({})",
                              endpoint, me, ms_since(start),
                              hello_sent ? "connected and sent Hello, no answer; is another live "
                                           "connection using this identity?"
                                         : "could not connect: nobody bound the endpoint?"));
    }
    if (!hello_sent || now - last_hello >= c.options_.hello_resend) {
      // Under ZMQ_IMMEDIATE this fails (EAGAIN) until the connection is up.
      uint64_t before = c.next_message_id_;
      c.send_stamped(hello_msg);
      if (c.next_message_id_ != before) {
        hello_sent = true;
        last_hello = now;
      }
    }
    auto slice = std::min(c.options_.handshake_slice,
                          duration_cast<milliseconds>(deadline - now) + milliseconds(1));
    if (!wait_readable(c.socket_, slice)) continue;
    while (auto parts = try_receive(c.socket_)) {
      auto frame = decode_from_server(*parts, endpoint);
      if (!frame) continue;
      auto env = frame->envelope();
      // NOT_JOINED never answers a Hello: it answers a message that an
      // earlier connection with this identity sent (a replaced epoch's last
      // heartbeat, routed to us by identity), so it says nothing about ours.
      if (env.which() == proto::Envelope::REJECT &&
          env.getReject().getCode() != proto::RejectCode::NOT_JOINED)
        fail_rejected(endpoint, me, env.getReject());
      if (env.which() != proto::Envelope::WELCOME) {
        spdlog::debug("control: ignored {} before the Welcome", message_name(env));
        continue;
      }
      auto w = env.getWelcome();
      c.run_name_ = w.getRunName().cStr();
      c.server_ = get_process(w.getServer());
      c.heartbeat_interval_ = milliseconds(std::max<uint32_t>(w.getHeartbeatIntervalMs(), 1));
      c.peer_timeout_ = milliseconds(std::max<uint32_t>(w.getPeerTimeoutMs(), 1));
      c.last_heard_ = Clock::now();
      c.next_beat_ = c.last_heard_;  // the first heartbeat goes with the first poll()
      spdlog::info("control: {} joined run {} at {} (server process {}, heartbeat {} ms)", me,
                   c.run_name_, endpoint, tandem::to_string(c.server_),
                   c.heartbeat_interval_.count());
      return c;
    }
  }
}

void ControlClient::require_open() const {
  if (!socket_) {
    throw Error(ErrorKind::kPeerLost,
                fmt::format("control client {} is closed", to_string(options_.identity)));
  }
}

void ControlClient::send_stamped(capnp::MessageBuilder& message) {
  require_open();
  outgoing_envelope(message).setMessageId(next_message_id_);
  std::vector<zmq::message_t> parts;
  parts.push_back(encode_frame(message));
  if (try_send(socket_, parts, "sending to control server at " + endpoint_)) ++next_message_id_;
}

void ControlClient::send(capnp::MessageBuilder& message) {
  uint64_t before = next_message_id_;
  send_stamped(message);
  if (next_message_id_ == before) {
    throw Error(ErrorKind::kTimeout,
                fmt::format("control server at {} is not reading (send queue full or not "
                            "connected)",
                            endpoint_));
  }
}

uint64_t ControlClient::send_request(capnp::MessageBuilder& message) {
  uint64_t id = next_request_id_++;
  outgoing_envelope(message).setRequestId(id);
  send(message);
  return id;
}

void ControlClient::reply(uint64_t request_id, capnp::MessageBuilder& message) {
  outgoing_envelope(message).setReplyTo(request_id);
  send(message);
}

void ControlClient::send_error(uint64_t request_id, ErrorKind kind, std::string_view text) {
  capnp::MallocMessageBuilder m;
  build_error(m, request_id, kind, text);
  send(m);
}

void ControlClient::set_state(proto::PeerState state) {
  state_ = state;
  beat(Clock::now());
}

void ControlClient::beat(Clock::time_point now) {
  capnp::MallocMessageBuilder m;
  auto hb = m.initRoot<proto::Envelope>().initHeartbeat();
  hb.setSeq(++heartbeat_seq_);
  hb.setState(state_);
  // A full queue is not fatal here: the server is slow, and silence is what
  // the peer timeout is for.
  send_stamped(m);
  next_beat_ = now + heartbeat_interval_;
}

void ControlClient::check_server(Clock::time_point now) {
  if (now >= next_liveness_check_) {
    next_liveness_check_ = now + options_.liveness_check_interval;
    for (const ProcessId* p : {&server_, &watched_}) {
      if (!is_alive(*p)) {
        throw Error(ErrorKind::kPeerLost,
                    fmt::format("control server process {} ({}) is gone",
                                tandem::to_string(*p), endpoint_));
      }
    }
  }
  if (now - last_heard_ > peer_timeout_) {
    throw Error(ErrorKind::kTimeout,
                fmt::format("control server at {} silent for {} ms (peer timeout {} ms)",
                            endpoint_, duration_cast<milliseconds>(now - last_heard_).count(),
                            peer_timeout_.count()));
  }
}

std::optional<DecodedFrame> ControlClient::receive_until(Clock::time_point until) {
  require_open();
  for (;;) {
    auto now = Clock::now();
    if (now >= next_beat_) beat(now);
    check_server(now);
    while (auto parts = try_receive(socket_)) {
      auto frame = decode_from_server(*parts, endpoint_);
      if (!frame) continue;
      last_heard_ = Clock::now();
      auto env = frame->envelope();
      switch (env.which()) {
        case proto::Envelope::HEARTBEAT:
          continue;  // the server's echo: last_heard_ is all it is for
        case proto::Envelope::REJECT:
          fail_rejected(endpoint_, to_string(options_.identity), env.getReject());
        default:
          return frame;
      }
    }
    now = Clock::now();
    if (now >= until) return std::nullopt;
    auto wait = std::min({until - now, next_beat_ - now,
                          Clock::duration(options_.liveness_check_interval)});
    wait = std::max(wait, Clock::duration::zero());  // a negative wait would be forever
    wait_readable(socket_, duration_cast<milliseconds>(wait) + milliseconds(1));
  }
}

std::optional<DecodedFrame> ControlClient::poll(milliseconds timeout) {
  if (!pending_.empty()) {
    DecodedFrame f = std::move(pending_.front());
    pending_.pop_front();
    return f;
  }
  return receive_until(Clock::now() + timeout);
}

DecodedFrame ControlClient::call(capnp::MessageBuilder& message, Clock::time_point deadline) {
  const auto start = Clock::now();
  const uint64_t id = send_request(message);
  const std::string what = message_name(outgoing_envelope(message).asReader());
  for (;;) {
    auto frame = receive_until(deadline);
    if (!frame) {
      throw Error(ErrorKind::kTimeout,
                  fmt::format("request {} ({}) to {}: no reply after {} ms", id, what, endpoint_,
                              ms_since(start)));
    }
    auto env = frame->envelope();
    if (env.getReplyTo() != id) {
      pending_.push_back(std::move(*frame));
      continue;
    }
    if (env.which() == proto::Envelope::ERROR) {
      throw RemoteError("control server at " + endpoint_, env.getError());
    }
    return std::move(*frame);
  }
}

void ControlClient::send_dying(std::string_view reason, ErrorKind code) noexcept {
  if (!socket_) return;
  try {
    capnp::MallocMessageBuilder m;
    auto d = m.initRoot<proto::Envelope>().initDying();
    d.setReason(std::string(reason));
    d.setCode(to_proto(code));
    send_stamped(m);
    spdlog::error("control: {} dying: {}", to_string(options_.identity), reason);
  } catch (const std::exception& e) {
    spdlog::error("control: could not send Dying ({}): {}", reason, e.what());
  }
  // Closing hands the frame to the context, which flushes it within the linger.
  socket_.close();
}

}  // namespace tandem::control
