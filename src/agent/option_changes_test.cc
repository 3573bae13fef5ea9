#include "agent/option_changes.h"

#include <gtest/gtest.h>

#include "agent/agent.h"

namespace gpureap::agent {
namespace option_changes_test {

TEST(OptionChanges, SaysWhatChangedAndWhatApplies) {
  AgentOptions before, after;
  before.listen = "127.0.0.1:9847";
  after = before;
  EXPECT_TRUE(option_changes(before, after).empty());
  after.reap_orphans_after = std::chrono::minutes(15);
  after.listen = "0.0.0.0:9847";
  auto changes = option_changes(before, after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "listen");
  EXPECT_FALSE(changes[0].applies_now);
  EXPECT_EQ(changes[1].key, "reap-orphans-after");
  EXPECT_EQ(changes[1].before, "");
  EXPECT_EQ(changes[1].after, "15m");
  EXPECT_TRUE(changes[1].applies_now);
  EXPECT_EQ(changes[1].words, "reaping orphans") << "the option table's words";

  apply_reloadable(before, after);
  EXPECT_EQ(before.reap_orphans_after, std::chrono::minutes(15)) << "applied now";
  EXPECT_EQ(*before.listen, "127.0.0.1:9847") << "bound at start: not applied";
}

}  // namespace option_changes_test
}  // namespace gpureap::agent
