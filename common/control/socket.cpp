#include "common/control/socket.h"

#include "common/control/frame.h"
#include "common/error.h"

namespace tandem::control {
namespace {

[[noreturn]] void fail_zmq(const zmq::error_t& e, const std::string& what) {
  ErrorKind kind = e.num() == EHOSTUNREACH ? ErrorKind::kPeerLost : ErrorKind::kSystem;
  throw Error(kind, fmt::format("{}: {} (errno {})", what, e.what(), e.num()), e.num());
}

void set_common(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, kLingerMs);
  s.set(zmq::sockopt::sndhwm, kHighWaterMark);
  s.set(zmq::sockopt::rcvhwm, kHighWaterMark);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFrameBytes));
}

}  // namespace

zmq::socket_t make_router(zmq::context_t& context) {
  try {
    zmq::socket_t s(context, zmq::socket_type::router);
    set_common(s);
    s.set(zmq::sockopt::router_mandatory, 1);
    s.set(zmq::sockopt::router_handover, 1);
    return s;
  } catch (const zmq::error_t& e) {
    fail_zmq(e, "creating the control ROUTER socket");
  }
}

zmq::socket_t make_dealer(zmq::context_t& context, const std::string& routing_id) {
  try {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    set_common(s);
    s.set(zmq::sockopt::immediate, 1);
    s.set(zmq::sockopt::routing_id, routing_id);
    return s;
  } catch (const zmq::error_t& e) {
    fail_zmq(e, fmt::format("creating the control DEALER socket for {}", routing_id));
  }
}

std::string ipc_endpoint(const std::string& path) { return "ipc://" + path; }

bool try_send(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, const std::string& what) {
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < parts.size()) flags = flags | zmq::send_flags::sndmore;
      if (!socket.send(parts[i], flags)) {
        // Only the first part can hit a full queue: ZeroMQ accepts the rest
        // of a multipart message once its first part is in.
        return false;
      }
    }
    return true;
  } catch (const zmq::error_t& e) {
    fail_zmq(e, what);
  }
}

std::optional<std::vector<zmq::message_t>> try_receive(zmq::socket_t& socket) {
  try {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) return std::nullopt;
    bool more = part.more();
    parts.push_back(std::move(part));
    while (more) {
      zmq::message_t next;
      (void)socket.recv(next, zmq::recv_flags::none);  // the rest is already here
      more = next.more();
      parts.push_back(std::move(next));
    }
    return parts;
  } catch (const zmq::error_t& e) {
    fail_zmq(e, "receiving a control message");
  }
}

bool wait_readable(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  try {
    return zmq::poll(&item, 1, timeout) > 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    fail_zmq(e, "polling a control socket");
  }
}

}  // namespace tandem::control
