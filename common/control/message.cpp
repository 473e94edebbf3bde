#include "common/control/message.h"

#include <capnp/any.h>
#include <fmt/format.h>

namespace tandem::control {

proto::ErrorCode to_proto(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput: return proto::ErrorCode::INVALID_INPUT;
    case ErrorKind::kUnsupported: return proto::ErrorCode::UNSUPPORTED;
    case ErrorKind::kNotFound: return proto::ErrorCode::NOT_FOUND;
    case ErrorKind::kSystem: return proto::ErrorCode::SYSTEM;
    case ErrorKind::kTimeout: return proto::ErrorCode::TIMEOUT;
    case ErrorKind::kPeerLost: return proto::ErrorCode::PEER_LOST;
    case ErrorKind::kInternal: return proto::ErrorCode::INTERNAL;
  }
  return proto::ErrorCode::INTERNAL;
}

ErrorKind from_proto(proto::ErrorCode code) {
  switch (code) {
    case proto::ErrorCode::INVALID_INPUT: return ErrorKind::kInvalidInput;
    case proto::ErrorCode::UNSUPPORTED: return ErrorKind::kUnsupported;
    case proto::ErrorCode::NOT_FOUND: return ErrorKind::kNotFound;
    case proto::ErrorCode::SYSTEM: return ErrorKind::kSystem;
    case proto::ErrorCode::TIMEOUT: return ErrorKind::kTimeout;
    case proto::ErrorCode::PEER_LOST: return ErrorKind::kPeerLost;
    case proto::ErrorCode::INTERNAL: return ErrorKind::kInternal;
  }
  return ErrorKind::kInternal;
}

proto::ProcessRef::Builder set_process(proto::ProcessRef::Builder ref, const ProcessId& id) {
  ref.setPid(id.pid);
  ref.setStartTicks(id.start_ticks);
  return ref;
}

ProcessId get_process(proto::ProcessRef::Reader ref) {
  return ProcessId{static_cast<pid_t>(ref.getPid()), ref.getStartTicks()};
}

std::string message_name(proto::Envelope::Reader envelope) {
  switch (envelope.which()) {
    case proto::Envelope::HELLO: return "hello";
    case proto::Envelope::WELCOME: return "welcome";
    case proto::Envelope::REJECT: return "reject";
    case proto::Envelope::HEARTBEAT: return "heartbeat";
    case proto::Envelope::DYING: return "dying";
    case proto::Envelope::ERROR: return "error";
    case proto::Envelope::MANIFEST_REQUEST: return "manifestRequest";
    case proto::Envelope::MANIFEST_REPLY: return "manifestReply";
    case proto::Envelope::SHUTDOWN: return "shutdown";
    case proto::Envelope::STEP_REQUEST: return "stepRequest";
    case proto::Envelope::STEP_REPLY: return "stepReply";
  }
  return fmt::format("unknown({})", static_cast<unsigned>(envelope.which()));
}

RemoteError::RemoteError(std::string peer, proto::Error::Reader error)
    : Error(from_proto(error.getKind()),
            fmt::format("request {} failed at {}: {}", error.getRequestId(), peer,
                        error.getMessage().cStr())),
      request_id_(error.getRequestId()),
      peer_(std::move(peer)),
      remote_message_(error.getMessage().cStr()) {}

void build_error(capnp::MessageBuilder& message, uint64_t request_id, ErrorKind kind,
                 std::string_view text) {
  auto env = message.initRoot<proto::Envelope>();
  env.setReplyTo(request_id);
  auto err = env.initError();
  err.setRequestId(request_id);
  err.setKind(to_proto(kind));
  err.setMessage(std::string(text));
}

proto::Envelope::Builder outgoing_envelope(capnp::MessageBuilder& message) {
  try {
    // An unset root would read as an all-default Envelope, i.e. a Hello.
    if (message.getRoot<capnp::AnyPointer>().isNull()) {
      fail_invalid("control message: nothing to send (the message has no root)");
    }
    return message.getRoot<proto::Envelope>();
  } catch (const kj::Exception& e) {
    fail_invalid("control message: root is not an Envelope: {}", e.getDescription().cStr());
  }
}

}  // namespace tandem::control
