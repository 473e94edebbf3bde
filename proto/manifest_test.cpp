// The generated schema code builds, links and round-trips through a flat
// byte buffer, as manifests will travel between processes.
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include "proto/manifest.capnp.h"

namespace tandem {
namespace {

TEST(Manifest, RoundTripsThroughFlatBytes) {
  capnp::MallocMessageBuilder b;
  auto m = b.initRoot<proto::Manifest>();
  m.setVersion(1);
  m.setArchitecture("deepseek_v3");
  auto files = m.initIdentity().initFiles(1);
  files[0].setPath("/models/ds3/model.safetensors");
  files[0].setSize(123456789);
  auto tensors = m.initTensors(2);
  tensors[0].setName("blk.1.ffn_up_exps.weight");
  tensors[0].setDtype(proto::DType::Q4_K);
  auto shape = tensors[0].initShape(3);
  shape.set(0, 16);
  shape.set(1, 256);
  shape.set(2, 7168);
  tensors[0].setNumaNode(1);
  tensors[1].setName("output_norm.weight");
  tensors[1].setNumaNode(-1);

  kj::Array<capnp::word> flat = capnp::messageToFlatArray(b);
  capnp::FlatArrayMessageReader r(flat);
  auto got = r.getRoot<proto::Manifest>();
  EXPECT_EQ(got.getArchitecture(), "deepseek_v3");
  EXPECT_EQ(got.getIdentity().getFiles()[0].getSize(), 123456789u);
  ASSERT_EQ(got.getTensors().size(), 2u);
  EXPECT_EQ(got.getTensors()[0].getDtype(), proto::DType::Q4_K);
  EXPECT_EQ(got.getTensors()[0].getShape()[2], 7168u);
  EXPECT_EQ(got.getTensors()[1].getNumaNode(), -1);
}

}  // namespace
}  // namespace tandem
