#include "util/answer_within.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

namespace gpureap {
namespace {

using std::chrono::steady_clock;

TEST(AnswerWithin, AnAnswerInTimeIsPrintedOnceAndTheWatchdogStaysQuiet) {
  std::string printed;
  {
    AnswerWithin a(
        steady_clock::now() + std::chrono::hours(1), "unknown: no answer",
        [&](std::string_view text) { printed += text; }, 3);
    a.answer("clean: 2 GPUs, no leak");
  }  // the watchdog is stopped and joined here, long before its deadline
  EXPECT_EQ(printed, "clean: 2 GPUs, no leak\n");
}

TEST(AnswerWithinDeathTest, NoAnswerByTheDeadlinePrintsTheLateLineAndExits) {
  EXPECT_EXIT(
      {
        AnswerWithin a(
            steady_clock::now(), "unknown: no answer within 0s",
            [](std::string_view text) { (void)!::write(STDERR_FILENO, text.data(), text.size()); },
            3);
        for (;;) ::pause();  // a command stuck in the kernel
      },
      ::testing::ExitedWithCode(3), "unknown: no answer within 0s");
}

}  // namespace
}  // namespace gpureap
