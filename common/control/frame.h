// One Cap'n Proto message per ZeroMQ frame, both ways.
//
// Encoding writes the message's flat form straight into a zmq::message_t.
// Decoding is where untrusted bytes enter: ZeroMQ hands out frames at any
// address (small frames live inside the zmq_msg_t itself, large ones may point
// into a shared receive buffer at an odd offset), while Cap'n Proto reads
// words in place and needs 8-byte alignment. A misaligned frame is copied into
// an aligned word array; an aligned one is read in place. The whole message
// is validated once at decode time (every pointer, then every field through
// the Envelope's schema), so malformed bytes become
// tandem::Error(kInvalidInput) there, never a crash or a throw from a getter.
#pragma once

#include <cstddef>
#include <memory>

#include <capnp/message.h>
#include <zmq.hpp>

#include "proto/control.capnp.h"

namespace tandem::control {

// Largest frame a control socket accepts (ZMQ_MAXMSGSIZE) and decodes.
inline constexpr size_t kMaxFrameBytes = size_t{16} << 20;

// Limits for reading untrusted messages: a traversal budget of a few passes
// over the largest frame (decode validates once, the caller reads again) and
// a nesting depth far above what control messages use.
capnp::ReaderOptions frame_reader_options();

// The message's flat bytes (segment table + segments) in a new frame.
zmq::message_t encode_frame(capnp::MessageBuilder& message);

// A received frame and a validated reader over it. Move-only; moving does not
// move the bytes (they live behind a pointer), so readers taken from it stay
// valid as long as the DecodedFrame lives.
class DecodedFrame {
 public:
  DecodedFrame(DecodedFrame&&) noexcept;
  DecodedFrame& operator=(DecodedFrame&&) noexcept;
  DecodedFrame(const DecodedFrame&) = delete;
  DecodedFrame& operator=(const DecodedFrame&) = delete;
  ~DecodedFrame();

  // Takes the frame and validates it as an Envelope; throws
  // tandem::Error(kInvalidInput) if it is empty, not whole 8-byte words,
  // larger than kMaxFrameBytes, has a bad segment table or trailing bytes,
  // any out-of-bounds or too deep pointer, a root that is not a struct, or a
  // field that does not read as its type (e.g. Text without its NUL).
  static DecodedFrame decode(zmq::message_t frame);

  // The validated root; reading any of its fields does not throw.
  proto::Envelope::Reader envelope() const;
  // True if the bytes were copied to get 8-byte alignment (for tests).
  bool copied() const;
  size_t size_bytes() const;

 private:
  struct State;
  explicit DecodedFrame(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tandem::control
