#include "services/coordinator/remote_stepper.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include "common/control/message.h"
#include "common/error.h"
#include "services/gpu_worker/step_message.h"

namespace tandem::coordinator {

using namespace std::chrono;

RemoteStepper::RemoteStepper(control::ControlServer& server, ModelConfig config, uint32_t index,
                             std::function<void(control::ServerEvent&)> other)
    : server_(server), config_(std::move(config)), index_(index), other_(std::move(other)) {}

bool RemoteStepper::accept(control::ServerEvent& ev) {
  if (ev.peer.role != proto::Role::GPU || ev.peer.index != index_) return false;
  switch (ev.kind) {
    case control::ServerEvent::Kind::kJoined:
      if (worker_ && worker_->epoch != ev.peer.epoch) lost_ = true;
      requeue_releases();
      spdlog::info("gpu worker {} joined", control::to_string(ev.peer));
      worker_ = ev.peer;
      has_worker_ = true;
      // Releases are kept: the new worker may have adopted those sequences'
      // KV files, which the releases remove.
      break;
    case control::ServerEvent::Kind::kLost:
    case control::ServerEvent::Kind::kDying:
      spdlog::warn("gpu worker {} {}: {}", control::to_string(ev.peer),
                   ev.kind == control::ServerEvent::Kind::kLost ? "lost" : "dying", ev.reason);
      if (worker_ && worker_->epoch == ev.peer.epoch) {
        worker_.reset();
        has_worker_ = false;
        lost_ = true;
        requeue_releases();
      }
      break;
    case control::ServerEvent::Kind::kMessage: {
      auto env = ev.message->envelope();
      if (in_flight_ != 0 && env.getReplyTo() == in_flight_) reply_ = std::move(ev.message);
      else if (env.which() == proto::Envelope::ERROR)
        spdlog::warn("gpu worker {}: {}", control::to_string(ev.peer), env.getError().getMessage().cStr());
      break;
    }
  }
  return true;
}

void RemoteStepper::requeue_releases() {
  releases_.insert(releases_.end(), unacked_releases_.begin(), unacked_releases_.end());
  unacked_releases_.clear();
}

void RemoteStepper::pump(milliseconds timeout) {
  for (control::ServerEvent& ev : server_.poll(timeout)) {
    try {
      if (!accept(ev) && other_) other_(ev);
    } catch (const std::exception& e) {  // the rest of this batch still counts
      spdlog::warn("control event from {}: {}", control::to_string(ev.peer), e.what());
    }
  }
}

void RemoteStepper::begin(gpu::StepCall call) {
  if (in_flight_ != 0 || send_failure_) fail(ErrorKind::kInternal, "gpu worker {}: a step is in flight", index_);
  pump(milliseconds(0));
  in_flight_items_ = call.items.size();
  reply_.reset();
  if (!worker_) {
    send_failure_ = Error(ErrorKind::kPeerLost, fmt::format("no gpu worker {} is connected", index_));
    return;
  }
  capnp::MallocMessageBuilder b;
  gpu::encode_step_request(b.initRoot<proto::Envelope>().initStepRequest(), call.items, releases_, call.imports,
                           call.exports);
  lost_ = false;
  in_flight_to_ = *worker_;
  try {
    in_flight_ = server_.send_request(in_flight_to_, b);
  } catch (const Error& e) {
    // Gone before the server noticed (it is dropped), or not reading yet:
    // wait_ready() gives the server time to tell which.
    if (!server_.find(in_flight_to_)) {
      worker_.reset();
      has_worker_ = false;
    }
    unreachable_ = control::to_string(in_flight_to_);
    unreachable_since_ = steady_clock::now();
    send_failure_ = Error(ErrorKind::kPeerLost, fmt::format("gpu worker {} cannot be reached: {}", index_, e.what()));
    return;
  }
  unacked_releases_.insert(unacked_releases_.end(), releases_.begin(), releases_.end());
  releases_.clear();
}

std::vector<gpu::SampledToken> RemoteStepper::finish() {
  if (send_failure_) {
    Error e = std::move(*send_failure_);
    send_failure_.reset();
    throw e;
  }
  if (in_flight_ == 0) fail(ErrorKind::kInternal, "gpu worker {}: finish() without begin()", index_);
  struct Done {
    RemoteStepper& s;
    ~Done() {
      s.in_flight_ = 0;
      s.reply_.reset();
    }
  } done{*this};
  const std::string to = control::to_string(in_flight_to_);
  for (;;) {
    if (reply_) {
      // The worker reads its messages in order: everything sent before this
      // step, releases included, has been handled.
      unacked_releases_.clear();
      auto env = reply_->envelope();
      if (env.which() == proto::Envelope::ERROR) throw control::RemoteError(to, env.getError());
      if (env.which() != proto::Envelope::STEP_REPLY)
        fail(ErrorKind::kInternal, "gpu worker {} answered a step with {}", to, control::message_name(env));
      return gpu::decode_step_reply(env.getStepReply(), in_flight_items_);
    }
    if (lost_)
      fail(ErrorKind::kPeerLost, "gpu worker {} was lost during a step of {} sequence(s)", to, in_flight_items_);
    pump(milliseconds(100));
  }
}

void RemoteStepper::idle() {
  pump(milliseconds(0));
  if (!worker_ || releases_.empty()) return;
  // Free the caches now rather than at the next step; the reply is not awaited.
  capnp::MallocMessageBuilder b;
  gpu::encode_step_request(b.initRoot<proto::Envelope>().initStepRequest(), {}, releases_);
  server_.send_request(*worker_, b);  // a failure is logged by the caller; the releases go with the next try
  unacked_releases_.insert(unacked_releases_.end(), releases_.begin(), releases_.end());
  releases_.clear();
}

bool RemoteStepper::wait_ready(steady_clock::time_point deadline) {
  for (;;) {
    if (!worker_)  // one that joined while this object had dropped it
      for (const auto& [slot, peer] : server_.peers())
        if (peer.identity.role == proto::Role::GPU && peer.identity.index == index_) {
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
    pump(milliseconds(100));
  }
}

}  // namespace tandem::coordinator
