// The one table of watch options: each row names one option once and says where its text
// goes; the defaults --help shows are the defaults the options start from (a reload line
// takes its words and its "applies now" from the same row: option_changes_test).

#include "agent/option_table.h"

#include <gtest/gtest.h>

#include <set>


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

}  // namespace
}  // namespace gpureap::agent
