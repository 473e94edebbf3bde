#include "common/control/identity.h"

#include <charconv>

namespace tandem::control {
namespace {

std::optional<uint32_t> parse_u32(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string PeerIdentity::slot() const { return std::string(role_name(role)) + "/" + std::to_string(index); }

const char* role_name(proto::Role role) {
  switch (role) {
    case proto::Role::LOADER: return "loader";
    case proto::Role::EXPERT: return "expert";
    case proto::Role::GPU: return "gpu";
    case proto::Role::COORDINATOR: return "coordinator";
    case proto::Role::LAUNCHER: return "launcher";
  }
  return "unknown-role";  // a value from a newer schema
}

std::optional<proto::Role> parse_role(std::string_view name) {
  for (auto role : {proto::Role::LOADER, proto::Role::EXPERT, proto::Role::GPU,
                    proto::Role::COORDINATOR, proto::Role::LAUNCHER}) {
    if (name == role_name(role)) return role;
  }
  return std::nullopt;
}

const char* state_name(proto::PeerState state) {
  switch (state) {
    case proto::PeerState::STARTING: return "starting";
    case proto::PeerState::READY: return "ready";
    case proto::PeerState::BUSY: return "busy";
    case proto::PeerState::DRAINING: return "draining";
  }
  return "unknown-state";
}

std::string to_string(const PeerIdentity& id) {
  return id.slot() + "/" + std::to_string(id.epoch);
}

std::optional<PeerIdentity> parse_identity(std::string_view text) {
  size_t a = text.find('/');
  if (a == std::string_view::npos) return std::nullopt;
  size_t b = text.find('/', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  auto role = parse_role(text.substr(0, a));
  auto index = parse_u32(text.substr(a + 1, b - a - 1));
  auto epoch = parse_u32(text.substr(b + 1));
  if (!role || !index || !epoch) return std::nullopt;
  return PeerIdentity{*role, *index, *epoch};
}

}  // namespace tandem::control
