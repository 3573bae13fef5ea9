#include "proc/spawn.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

namespace gpureap::proc {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

TEST(SpawnCaptured, CapturesStdoutAndStderrAndTheExitStatus) {
  auto run = spawn_captured({"sh", "-c", "echo out; echo err >&2; exit 3"}, steady_clock::now() + 10s);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->output, "out\nerr\n");
  EXPECT_FALSE(run->timed_out);
  EXPECT_EQ(run->exit.how, ChildExit::How::exited);
  EXPECT_EQ(run->exit.exit_code(), 3);
}

TEST(SpawnCaptured, ReportsTheSignalThatEndedIt) {
  auto run = spawn_captured({"sh", "-c", "kill -TERM $$"}, steady_clock::now() + 10s);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_FALSE(run->timed_out);
  EXPECT_EQ(run->exit.how, ChildExit::How::killed);
  EXPECT_EQ(run->exit.status, SIGTERM);
  EXPECT_EQ(run->exit.exit_code(), 128 + SIGTERM);
}

TEST(SpawnCaptured, KillsWhatStillRunsAtTheDeadline) {
  auto start = steady_clock::now();
  auto run = spawn_captured({"sh", "-c", "echo started; exec sleep 60"}, start + 300ms);
  auto took = steady_clock::now() - start;
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->timed_out);
  EXPECT_EQ(run->output, "started\n");
  EXPECT_EQ(run->exit.how, ChildExit::How::killed);
  EXPECT_EQ(run->exit.status, SIGKILL);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 30s) << "not killed at the deadline: sleep 60 ran on";
}

// D11: the output ends (EOF) before the program exits; one that exits within
// the deadline is reported with its own status, not as killed.
TEST(SpawnCaptured, AProgramThatClosesItsOutputEarlyIsWaitedFor) {
  auto run = spawn_captured({"sh", "-c", "echo bye; exec >&- 2>&-; sleep 0.3; exit 5"},
                            steady_clock::now() + 10s);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_FALSE(run->timed_out);
  EXPECT_EQ(run->output, "bye\n");
  EXPECT_EQ(run->exit.exit_code(), 5);
}

TEST(SpawnCaptured, AFailedExecSaysWhyWithStatus127) {
  auto run = spawn_captured({"gpureap-no-such-program-xyz"}, steady_clock::now() + 10s);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->output, "cannot run gpureap-no-such-program-xyz: No such file or directory\n");
  EXPECT_EQ(run->exit.exit_code(), 127);
  EXPECT_FALSE(spawn_captured({}, steady_clock::now() + 1s));
}

}  // namespace
}  // namespace gpureap::proc
