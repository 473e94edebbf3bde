// ZeroMQ sockets set up for the control plane, and send/receive calls that
// turn ZeroMQ failures into tandem::Error with errno and context.
//
// Options every control socket gets, and why:
//  - ZMQ_LINGER bounded (kLingerMs): pending frames (a Dying) are flushed
//    when the context terminates, but no exit waits longer than this.
//  - ZMQ_SNDHWM/ZMQ_RCVHWM: control traffic is small; a peer that stops
//    reading fills its queue and sends fail (EAGAIN) instead of growing memory.
//  - ZMQ_MAXMSGSIZE: a peer cannot make us allocate more than kMaxFrameBytes.
//  - ROUTER: ZMQ_ROUTER_MANDATORY, so a send to an unknown identity fails
//    (EHOSTUNREACH) rather than being dropped silently; and
//    ZMQ_ROUTER_HANDOVER, so a new connection with a routing id still held by
//    an old one (a process restarted before the ROUTER saw the old connection
//    close) takes it over instead of being ignored until its deadline. Who
//    may hold an identity is then decided by the Hello (see server.h).
//  - DEALER: ZMQ_IMMEDIATE, so frames queue only on a completed connection
//    and the handshake can tell "nobody bound this" from "no answer".
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace tandem::control {

inline constexpr int kLingerMs = 1000;
inline constexpr int kHighWaterMark = 1000;

zmq::socket_t make_router(zmq::context_t& context);
zmq::socket_t make_dealer(zmq::context_t& context, const std::string& routing_id);

// "ipc://<path>".
std::string ipc_endpoint(const std::string& path);

// Sends one multipart message without blocking; false if the queue is full
// (EAGAIN). Throws tandem::Error on anything else: kPeerLost for
// EHOSTUNREACH (no such peer on a ROUTER), kSystem otherwise.
bool try_send(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, const std::string& what);

// Receives one whole multipart message without blocking; nullopt if none.
std::optional<std::vector<zmq::message_t>> try_receive(zmq::socket_t& socket);

// Waits until the socket is readable or `timeout` passes; true if readable.
bool wait_readable(zmq::socket_t& socket, std::chrono::milliseconds timeout);

}  // namespace tandem::control
