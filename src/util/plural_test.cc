#include "util/plural.h"

#include <gtest/gtest.h>

namespace gpureap {
namespace {

TEST(CountOf, TheNounAgreesWithTheCount) {
  EXPECT_EQ(count_of(1, "process", "processes"), "1 process");
  EXPECT_EQ(count_of(8, "process", "processes"), "8 processes");
  EXPECT_EQ(count_of(0, "process", "processes"), "0 processes");
  EXPECT_EQ(count_of(1, "GPU"), "1 GPU");
  EXPECT_EQ(count_of(2, "GPU"), "2 GPUs");
  EXPECT_EQ(agreeing(1, "holds", "hold"), "holds");
  EXPECT_EQ(agreeing(4, "holds", "hold"), "hold");
}

}  // namespace
}  // namespace gpureap
