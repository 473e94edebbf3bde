#include "common/control/identity.h"

#include <gtest/gtest.h>

namespace tandem::control {
namespace {

TEST(Identity, FormatsAndParses) {
  PeerIdentity id{proto::Role::EXPERT, 1, 7};
  EXPECT_EQ(to_string(id), "expert/1/7");
  EXPECT_EQ(id.slot(), "expert/1");
  EXPECT_EQ(parse_identity("expert/1/7"), id);
  for (auto role : {proto::Role::LOADER, proto::Role::EXPERT, proto::Role::GPU,
                    proto::Role::COORDINATOR, proto::Role::LAUNCHER}) {
    PeerIdentity r{role, 4294967295u, 0};
    EXPECT_EQ(parse_identity(to_string(r)), r) << to_string(r);
  }
}

TEST(Identity, RefusesAnythingButTheCanonicalForm) {
  for (const char* bad :
       {"", "expert", "expert/1", "expert/1/", "expert//0", "/1/0", "bogus/1/0", "Expert/1/0",
        "expert/01/0", "expert/1/00", "expert/-1/0", "expert/+1/0", "expert/1/0/2",
        "expert/4294967296/0", "expert/1/0 ", " expert/1/0", "expert/1/x"}) {
    EXPECT_FALSE(parse_identity(bad)) << '"' << bad << '"';
  }
}

}  // namespace
}  // namespace tandem::control
