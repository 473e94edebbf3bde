#include "services/coordinator/remote_stepper.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include "common/control/message.h"
#include "common/error.h"
#include "services/gpu_worker/step_message.h"

namespace tandem::coordinator {

using namespace std::chrono;

RemoteStepper::RemoteStepper(control::ControlServer& server, ModelConfig config,
                             std::function<void(control::ServerEvent&)> other)
    : server_(server), config_(std::move(config)), other_(std::move(other)) {}

std::optional<control::DecodedFrame> RemoteStepper::pump(milliseconds timeout, uint64_t waiting_for) {
  std::optional<control::DecodedFrame> reply;
  for (control::ServerEvent& ev : server_.poll(timeout)) {
    if (ev.peer.role != proto::Role::GPU) {
      try {
        if (other_) other_(ev);
      } catch (const std::exception& e) {  // the gpu events in this batch still count
        spdlog::warn("control event from {}: {}", control::to_string(ev.peer), e.what());
      }
      continue;
    }
    switch (ev.kind) {
      case control::ServerEvent::Kind::kJoined:
        if (worker_ && worker_->epoch != ev.peer.epoch) lost_ = true;
        spdlog::info("gpu worker {} joined", control::to_string(ev.peer));
        worker_ = ev.peer;
        has_worker_ = true;
        releases_.clear();  // a new worker holds no sequences
        break;
      case control::ServerEvent::Kind::kLost:
      case control::ServerEvent::Kind::kDying:
        spdlog::warn("gpu worker {} {}: {}", control::to_string(ev.peer),
                     ev.kind == control::ServerEvent::Kind::kLost ? "lost" : "dying", ev.reason);
        if (worker_ && worker_->epoch == ev.peer.epoch) {
          worker_.reset();
          has_worker_ = false;
          lost_ = true;
        }
        break;
      case control::ServerEvent::Kind::kMessage: {
        auto env = ev.message->envelope();
        if (waiting_for != 0 && env.getReplyTo() == waiting_for) reply = std::move(ev.message);
        else if (env.which() == proto::Envelope::ERROR)
          spdlog::warn("gpu worker: {}", env.getError().getMessage().cStr());
        break;
      }
    }
  }
  return reply;
}

std::vector<gpu::SampledToken> RemoteStepper::step(std::span<const gpu::StepItem> items) {
  pump(milliseconds(0), 0);
  if (!worker_) fail(ErrorKind::kPeerLost, "no gpu worker is connected");
  capnp::MallocMessageBuilder b;
  gpu::encode_step_request(b.initRoot<proto::Envelope>().initStepRequest(), items, releases_);
  lost_ = false;
  const control::PeerIdentity to = *worker_;
  uint64_t id = 0;
  try {
    id = server_.send_request(to, b);
  } catch (const Error& e) {
    // Gone before the server noticed (it is dropped), or not reading yet:
    // wait_ready() gives the server time to tell which.
    if (!server_.find(to)) {
      worker_.reset();
      has_worker_ = false;
    }
    unreachable_ = control::to_string(to);
    unreachable_since_ = steady_clock::now();
    fail(ErrorKind::kPeerLost, "the gpu worker cannot be reached: {}", e.what());
  }
  releases_.clear();
  for (;;) {
    std::optional<control::DecodedFrame> reply = pump(milliseconds(100), id);
    if (reply) {
      auto env = reply->envelope();
      if (env.which() == proto::Envelope::ERROR) throw control::RemoteError(control::to_string(to), env.getError());
      if (env.which() != proto::Envelope::STEP_REPLY)
        fail(ErrorKind::kInternal, "the gpu worker answered a step with {}", control::message_name(env));
      return gpu::decode_step_reply(env.getStepReply(), items.size());
    }
    if (lost_) fail(ErrorKind::kPeerLost, "the gpu worker was lost during a step of {} sequence(s)", items.size());
  }
}

void RemoteStepper::idle() {
  pump(milliseconds(0), 0);
  if (!worker_ || releases_.empty()) return;
  // Free the caches now rather than at the next step; the reply is not awaited.
  capnp::MallocMessageBuilder b;
  gpu::encode_step_request(b.initRoot<proto::Envelope>().initStepRequest(), {}, releases_);
  server_.send_request(*worker_, b);  // a failure is logged by the caller; the releases go with the next try
  releases_.clear();
}

bool RemoteStepper::wait_ready(steady_clock::time_point deadline) {
  for (;;) {
    if (!worker_)  // one that joined while this object had dropped it
      for (const auto& [slot, peer] : server_.peers())
        if (peer.identity.role == proto::Role::GPU) {
          worker_ = peer.identity;
          has_worker_ = true;
        }
    // One that could not be reached is trusted again only after a while
    // (by then the server has noticed if its process is gone).
    const bool suspect = worker_ && control::to_string(*worker_) == unreachable_ &&
                         steady_clock::now() < unreachable_since_ + milliseconds(1000);
    if (worker_ && !suspect) {
      const control::PeerInfo* p = server_.find(*worker_);
      if (p && p->state == proto::PeerState::READY) return true;
    }
    if (steady_clock::now() >= deadline) return false;
    pump(milliseconds(100), 0);
  }
}

}  // namespace tandem::coordinator
