// What both ends of the control plane share: the ErrorKind ↔ wire mapping,
// the error a failed request turns into, and stamping of outgoing envelopes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <capnp/message.h>

#include "common/error.h"
#include "common/shm/process.h"
#include "proto/control.capnp.h"

namespace tandem::control {

proto::ErrorCode to_proto(ErrorKind kind);
// A code this build does not know (a newer peer's) becomes kInternal.
ErrorKind from_proto(proto::ErrorCode code);

proto::ProcessRef::Builder set_process(proto::ProcessRef::Builder ref, const ProcessId& id);
ProcessId get_process(proto::ProcessRef::Reader ref);

// The name of the message an envelope holds ("hello", ...; "unknown(N)").
std::string message_name(proto::Envelope::Reader envelope);

// An Error message received from a peer, as an exception: the kind it
// carried, and the request id and peer it came from. what() reads
// "request 42 failed at coordinator/0/0: <message>".
class RemoteError : public Error {
 public:
  RemoteError(std::string peer, proto::Error::Reader error);
  uint64_t request_id() const { return request_id_; }
  const std::string& peer() const { return peer_; }
  const std::string& remote_message() const { return remote_message_; }

 private:
  uint64_t request_id_;
  std::string peer_;
  std::string remote_message_;
};

// Fills an Error envelope in `message` (which must be fresh).
void build_error(capnp::MessageBuilder& message, uint64_t request_id, ErrorKind kind,
                 std::string_view text);

// The root Envelope of an outgoing message; throws kInvalidInput if the
// message has no root yet (nothing to send).
proto::Envelope::Builder outgoing_envelope(capnp::MessageBuilder& message);

}  // namespace tandem::control
