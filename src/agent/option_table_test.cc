// The one table of watch options: each row names one option once and says where its text
// goes; the defaults --help shows are the defaults the options start from; a reload line
// takes its words and its "applies now" from the same row.

#include "agent/option_table.h"

#include <gtest/gtest.h>

#include <set>

#include "agent/option_changes.h"

namespace gpureap::agent {
namespace {

TEST(OptionTable, EachOptionIsOneRowWithOneTarget) {
  std::set<std::string> keys;
  for (const auto& row : watch_option_table()) {
    EXPECT_TRUE(keys.insert(row.key).second) << row.key;
    EXPECT_EQ((row.text != nullptr) + (row.flag != nullptr) + (row.list != nullptr), 1) << row.key;
    EXPECT_EQ(row.type_name.empty(), row.flag != nullptr) << row.key;
    EXPECT_FALSE(row.help.empty()) << row.key;
  }
  EXPECT_EQ(watch_option_keys().size(), watch_option_table().size());
}

TEST(OptionTable, TheDefaultsHelpShowsAreTheTextsDefaults) {
  const OptionTexts texts;
  for (const auto& row : watch_option_table()) {
    if (!row.text || row.default_text.empty()) continue;
    EXPECT_EQ(texts.*(row.text), row.default_text) << row.key;
  }
}

TEST(OptionTable, AReloadLineTakesItsWordsAndWhenItAppliesFromTheRow) {
  AgentOptions before, after;
  after.reap_orphans_after = std::chrono::minutes(15);
  after.listen = "0.0.0.0:9847";
  auto changes = option_changes(before, after);
  ASSERT_EQ(changes.size(), 2u);
  // What is set at start comes first.
  EXPECT_EQ(changes[0].key, "listen");
  EXPECT_FALSE(changes[0].applies_now);
  EXPECT_EQ(changes[1].key, "reap-orphans-after");
  EXPECT_EQ(changes[1].after, "15m");
  EXPECT_EQ(changes[1].words, "reaping orphans");
  EXPECT_TRUE(changes[1].applies_now);
  apply_reloadable(before, after);
  EXPECT_EQ(before.reap_orphans_after, after.reap_orphans_after);
  EXPECT_FALSE(before.listen.has_value()) << "bound at start: waits for the next one";
}

}  // namespace
}  // namespace gpureap::agent
