// Signals named once, over libc's table: names and numbers both ways.

#include "util/signal_name.h"

#include <gtest/gtest.h>

#include <csignal>

namespace gpureap {

TEST(SignalName, SignalsAreNamedAsTheKernelNamesThem) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGCONT), "SIGCONT");
  EXPECT_EQ(signal_name(SIGWINCH), "SIGWINCH");
  EXPECT_EQ(signal_name(0), "signal 0");
  EXPECT_EQ(signal_number("SIGCONT"), SIGCONT);
  EXPECT_EQ(signal_number("KILL"), SIGKILL);
  EXPECT_EQ(signal_number(signal_name(SIGUSR1)), SIGUSR1);
  EXPECT_FALSE(signal_number("SIGFOO"));
}

}  // namespace gpureap
