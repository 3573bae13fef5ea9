#include "util/closest.h"

#include <gtest/gtest.h>

namespace gpureap {
namespace {

TEST(Closest, TheClosestNameWithinATypo) {
  const std::vector<std::string> names = {"--timeout", "--orphans", "--gpu", "--grace"};
  EXPECT_EQ(closest("--timout", names), "--timeout");
  EXPECT_EQ(closest("--orphan", names), "--orphans");
  EXPECT_EQ(closest("--gup", names), "--gpu");
  EXPECT_EQ(closest("--zzzzzzzz", names), "");
  EXPECT_EQ(closest("stauts", {"status", "free"}), "status");
  EXPECT_EQ(closest("x", {"status"}), "");
}

}  // namespace
}  // namespace gpureap
