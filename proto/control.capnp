@0x93414b05b383bb3a;
# The control plane: every message between a process and the coordinator.
# One ZeroMQ frame carries one Envelope; the union says which message it is.
# The envelope grows by appending union members (the process-graph issue adds
# prefill/decode work and tokens) — a peer that receives a member it does not
# know sees an unknown `which()` (the endpoints hand such messages to their
# owner, who may answer with an Error of kind unsupported); it never crashes.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::proto");

# Bumped on any change that an older peer would misread. Hello carries it; the
# server rejects a different version instead of guessing.
const controlProtocolVersion :UInt32 = 1;

enum Role {
  loader @0;       # owns the weight arena, serves manifest requests
  expert @1;       # one expert worker per NUMA node
  gpu @2;          # prefill and/or decode (capabilities say which)
  coordinator @3;
  launcher @4;
}

# A process that survives pid reuse: its pid plus its start time in clock
# ticks since boot (tandem::ProcessId).
struct ProcessRef {
  pid @0 :Int32;
  startTicks @1 :UInt64;
}

enum PeerState {
  starting @0;
  ready @1;
  busy @2;
  draining @3;
}

# Mirrors tandem::ErrorKind (common/error.h); the two change together.
enum ErrorCode {
  invalidInput @0;
  unsupported @1;
  notFound @2;
  system @3;
  timeout @4;
  peerLost @5;
  internal @6;
}

enum RejectCode {
  protocolMismatch @0;   # Hello.protocolVersion differs from the server's
  malformedIdentity @1;  # routing id is not "role/index/epoch", or differs from the Hello
  duplicateIdentity @2;  # the identity is held by another live process
  staleEpoch @3;         # a newer epoch of this role/index has joined
  processNotAlive @4;    # Hello names a process that is not running
  notJoined @5;          # a message other than Hello from a peer that has not joined (or was dropped)
  malformedHello @6;
}

# Client → server, first message. The routing id of the DEALER socket is
# "role/index/epoch" and must agree with these fields.
struct Hello {
  role @0 :Role;
  index @1 :UInt32;
  epoch @2 :UInt32;
  process @3 :ProcessRef;
  protocolVersion @4 :UInt32;
  capabilities @5 :Text;   # free text, e.g. "prefill,decode"; empty if none
}

# Server → client: the handshake succeeded.
struct Welcome {
  runName @0 :Text;
  server @1 :ProcessRef;
  heartbeatIntervalMs @2 :UInt32;  # the client heartbeats at least this often
  peerTimeoutMs @3 :UInt32;        # silence longer than this means lost, both ways
  protocolVersion @4 :UInt32;
}

# Server → client: the handshake (or a later message) was refused.
struct Reject {
  code @0 :RejectCode;
  reason @1 :Text;
  serverProtocolVersion @2 :UInt32;
}

# Both ways: client → server at the Welcome's interval, server echoes it.
struct Heartbeat {
  seq @0 :UInt64;
  state @1 :PeerState;
}

# "Dying, because …": sent by a process that is about to exit on an error.
struct Dying {
  reason @0 :Text;
  code @1 :ErrorCode;
}

# A failed request; requestId names it (the requester's id, also the
# envelope's replyTo). 0 when the failure answers no request.
struct Error {
  requestId @0 :UInt64;
  kind @1 :ErrorCode;
  message @2 :Text;
}

# Where the weight arena is; the manifest itself lives in the arena.
struct ManifestRequest {
  minVersion @0 :UInt32;  # 0: any
}

struct ManifestReply {
  arenaPath @0 :Text;
  arenaSize @1 :UInt64;
  manifestVersion @2 :UInt32;
}

# Server → client: finish or drain and exit.
struct Shutdown {
  reason @0 :Text;
}

# Coordinator → gpu worker: one step of continuous batching
# (services/gpu_worker/step.h says what the fields mean).
struct Sampling {
  temperature @0 :Float32;
  topK @1 :Int32;
  topP @2 :Float32;
  minP @3 :Float32;
  repetitionPenalty @4 :Float32;
  repeatLastN @5 :Int32;
  seed @6 :UInt64;
}

struct StepSequence {
  id @0 :UInt64;
  position @1 :UInt64;        # tokens of the sequence the worker already holds
  tokens @2 :List(UInt32);    # appended at position
  sample @3 :Bool;            # sample the token after them
  # Read at position 0, where the item (re)opens the sequence:
  capacity @4 :UInt64;
  sampling @5 :Sampling;
  topLogprobs @6 :Int32;      # -1: none
  allLogits @7 :Bool;         # return every token's logits (tandem logits)
}

# A sequence handed from a prefill worker to a decode worker through a file
# in the run directory (its KV cache and token history).
struct SequenceTransfer {
  id @0 :UInt64;
  path @1 :Text;
  # An import's: the sequence's parameters, as at position 0.
  capacity @2 :UInt64;
  sampling @3 :Sampling;
  topLogprobs @4 :Int32;
}

struct StepRequest {
  sequences @0 :List(StepSequence);
  release @1 :List(UInt64);   # ended sequences, freed before the step runs
  imports @2 :List(SequenceTransfer);  # read (and their files removed) before the step runs
  exports @3 :List(SequenceTransfer);  # written after it, then freed here
}

struct SampledToken {
  sampled @0 :Bool;
  token @1 :UInt32;
  logprob @2 :Float32;
  topIds @3 :List(UInt32);
  topLogprobs @4 :List(Float32);
  logits @5 :List(Float32);   # allLogits: one vocabulary row per token
}

# Gpu worker → coordinator: one entry per StepRequest sequence, in order.
struct StepReply {
  results @0 :List(SampledToken);
}

struct Envelope {
  # Per-sender sequence number of this message, from 1.
  messageId @0 :UInt64;
  # Nonzero on a request: a fresh id in the sender's own id space.
  requestId @1 :UInt64;
  # Nonzero on a reply (or an Error): the requestId of the request it answers,
  # in the receiver's id space. Kept apart from requestId because both ends
  # issue requests and their ids may coincide.
  replyTo @2 :UInt64;

  union {
    hello @3 :Hello;
    welcome @4 :Welcome;
    reject @5 :Reject;
    heartbeat @6 :Heartbeat;
    dying @7 :Dying;
    error @8 :Error;
    manifestRequest @9 :ManifestRequest;
    manifestReply @10 :ManifestReply;
    shutdown @11 :Shutdown;
    stepRequest @12 :StepRequest;
    stepReply @13 :StepReply;
    # Append new messages here, with the next ordinal.
  }
}
