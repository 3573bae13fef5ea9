#include "util/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpureap {
namespace {

TEST(Trim, RemovesAsciiWhitespaceAtBothEnds) {
  EXPECT_EQ(trim("  20 GiB\t"), "20 GiB");
  EXPECT_EQ(trim("\n\r\v\fx\n"), "x");
  EXPECT_EQ(trim("a b"), "a b");
  EXPECT_EQ(trim(" \t\n"), "");
  EXPECT_EQ(trim(""), "");
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  for_each_line(text, [&](std::string_view line) { out.emplace_back(line); });
  return out;
}

TEST(ForEachLine, PassesEveryLineWithoutItsNewline) {
  EXPECT_EQ(lines_of("a\nbb\n"), (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(lines_of("a\n\nc"), (std::vector<std::string>{"a", "", "c"}));
  EXPECT_EQ(lines_of("\n"), (std::vector<std::string>{""}));
  EXPECT_TRUE(lines_of("").empty());
}

}  // namespace
}  // namespace gpureap
