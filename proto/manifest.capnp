@0xd52d1b0e2c74abfe;
# The weight arena's manifest: what the loader publishes so that every other
# process can find each tensor without re-reading the model files.
# It lives inside the arena file itself (see common/arena/arena_format.h).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::proto");

enum DType {
  f32 @0; f16 @1; bf16 @2; f8E4m3 @3; i8 @4; u8 @5; i32 @6;
  q40 @7; q80 @8; q50 @9; q4K @10; q5K @11; q6K @12; q8K @13;
}

struct ModelIdentity {
  # Hash of the source files' names, sizes and mtimes: an arena whose
  # identity matches can be adopted without a rebuild.
  hash @0 :UInt64;
  files @1 :List(SourceFile);
  struct SourceFile {
    path @0 :Text;
    size @1 :UInt64;
    mtimeNs @2 :Int64;
  }
}

struct TensorEntry {
  name @0 :Text;          # canonical name, e.g. "blk.3.ffn_up_exps.weight"
  dtype @1 :DType;
  shape @2 :List(UInt64); # row-major
  offset @3 :UInt64;      # byte offset in the arena
  bytes @4 :UInt64;
  layout @5 :Text;        # kernel layout name ("rowmajor", or a repacked layout)
  numaNode @6 :Int32;     # -1: not bound to a node
  # For a tensor-parallel slice of routed experts: the rows (gate/up) or
  # columns (down) of the full tensor this slice holds.
  sliceBegin @7 :UInt64;
  sliceEnd @8 :UInt64;
  # The expert worker this slice belongs to; -1 for dense tensors, which are
  # stored once and read by the attention side.
  worker @9 :Int32;
}

enum SourceFormat { gguf @0; huggingFace @1; }

struct Manifest {
  version @0 :UInt32;
  identity @1 :ModelIdentity;
  architecture @2 :Text;
  configJson @3 :Text;    # not filled yet: processes read the config from sourcePath
  tensors @4 :List(TensorEntry);
  sourcePath @5 :Text;    # the model as the user named it
  sourceFormat @6 :SourceFormat;
  # Physical NUMA node of each expert worker (index = worker). Several
  # workers may share a node (virtual nodes on one socket).
  workerNodes @7 :List(Int32);
  # Kernel layout generation: an arena built for other kernels is rebuilt.
  layoutVersion @8 :UInt32;
}
