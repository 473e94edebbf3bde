#include "common/control/frame.h"

#include <cstdint>
#include <cstring>
#include <optional>

#include <capnp/dynamic.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include "common/error.h"

namespace tandem::control {

namespace {

void check_value(const capnp::DynamicValue::Reader& value);

// Reads every field of the struct through its schema. A pointer walk alone
// (targetSize) checks bounds and depth but not typed rules such as Text's
// NUL terminator, which a getter would otherwise throw on later.
void check_struct(const capnp::DynamicStruct::Reader& s) {
  for (auto field : s.getSchema().getNonUnionFields()) check_value(s.get(field));
  KJ_IF_MAYBE(member, s.which()) { check_value(s.get(*member)); }
  // No member: none, or a member from a newer schema; the receiver decides.
}

void check_value(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::STRUCT: check_struct(value.as<capnp::DynamicStruct>()); break;
    case capnp::DynamicValue::LIST:
      for (auto element : value.as<capnp::DynamicList>()) check_value(element);
      break;
    default: break;  // scalars, Text and Data are checked by get() itself
  }
}

}  // namespace

struct DecodedFrame::State {
  zmq::message_t frame;
  kj::Array<capnp::word> aligned;  // empty when the frame is read in place
  std::optional<capnp::FlatArrayMessageReader> reader;
};

capnp::ReaderOptions frame_reader_options() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 8 * (kMaxFrameBytes / sizeof(capnp::word));
  options.nestingLimit = 32;
  return options;
}

zmq::message_t encode_frame(capnp::MessageBuilder& message) {
  size_t words = capnp::computeSerializedSizeInWords(message);
  zmq::message_t frame(words * sizeof(capnp::word));
  kj::ArrayOutputStream out(
      kj::arrayPtr(static_cast<kj::byte*>(frame.data()), frame.size()));
  capnp::writeMessage(out, message);
  if (out.getArray().size() != frame.size()) {
    fail(ErrorKind::kInternal, "control frame: wrote {} bytes, sized {}", out.getArray().size(),
         frame.size());
  }
  return frame;
}

DecodedFrame::DecodedFrame(std::unique_ptr<State> state) : state_(std::move(state)) {}
DecodedFrame::DecodedFrame(DecodedFrame&&) noexcept = default;
DecodedFrame& DecodedFrame::operator=(DecodedFrame&&) noexcept = default;
DecodedFrame::~DecodedFrame() = default;

DecodedFrame DecodedFrame::decode(zmq::message_t frame) {
  const size_t size = frame.size();
  if (size == 0) fail_invalid("control frame: empty");
  if (size % sizeof(capnp::word) != 0) {
    // A flat Cap'n Proto message is whole words; anything else is truncated
    // or not ours, so it is refused rather than zero-padded.
    fail_invalid("control frame: {} bytes is not a whole number of 8-byte words", size);
  }
  if (size > kMaxFrameBytes) {
    fail_invalid("control frame: {} bytes exceeds the limit of {}", size, kMaxFrameBytes);
  }
  auto state = std::make_unique<State>();
  state->frame = std::move(frame);
  const auto* data = static_cast<const capnp::word*>(state->frame.data());
  kj::ArrayPtr<const capnp::word> words(data, size / sizeof(capnp::word));
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0) {
    state->aligned = kj::heapArray<capnp::word>(words.size());
    std::memcpy(state->aligned.begin(), state->frame.data(), size);
    words = kj::arrayPtr(static_cast<const capnp::word*>(state->aligned.begin()), state->aligned.size());
  }
  try {
    state->reader.emplace(words, frame_reader_options());
    if (state->reader->getEnd() != words.end()) {
      fail_invalid("control frame: {} trailing bytes after the message",
                   (words.end() - state->reader->getEnd()) * sizeof(capnp::word));
    }
    // Walks every pointer once: bounds, nesting and traversal limits are all
    // checked here, so later getters on this message cannot throw.
    (void)state->reader->getRoot<capnp::AnyPointer>().targetSize();
    check_struct(state->reader->getRoot<proto::Envelope>());
  } catch (const kj::Exception& e) {
    fail_invalid("control frame: malformed Cap'n Proto message ({} bytes): {}", size,
                 e.getDescription().cStr());
  }
  return DecodedFrame(std::move(state));
}

proto::Envelope::Reader DecodedFrame::envelope() const {
  return state_->reader->getRoot<proto::Envelope>();
}

bool DecodedFrame::copied() const { return state_->aligned != nullptr; }
size_t DecodedFrame::size_bytes() const { return state_->frame.size(); }

}  // namespace tandem::control
