// Who a control-plane peer is: role/index/epoch. The text form is the DEALER
// socket's ZeroMQ routing id, so the server knows the sender of every frame
// without trusting the frame's contents. The epoch grows each time the
// launcher restarts the process at that role/index; a newer epoch replaces
// the older peer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proto/control.capnp.h"

namespace tandem::control {

struct PeerIdentity {
  proto::Role role = proto::Role::COORDINATOR;
  uint32_t index = 0;
  uint32_t epoch = 0;
  bool operator==(const PeerIdentity&) const = default;
  // The slot the peer occupies, whatever its epoch: "role/index".
  std::string slot() const;
};

// "loader", "expert", "gpu", "coordinator", "launcher".
const char* role_name(proto::Role role);
std::optional<proto::Role> parse_role(std::string_view name);
const char* state_name(proto::PeerState state);

// "role/index/epoch", e.g. "expert/1/0".
std::string to_string(const PeerIdentity& id);
// The canonical text form only (known role, decimal numbers without signs or
// leading zeros, each fitting 32 bits), so that text and identity map one to
// one; nullopt otherwise.
std::optional<PeerIdentity> parse_identity(std::string_view text);

}  // namespace tandem::control
