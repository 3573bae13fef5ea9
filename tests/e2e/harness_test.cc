// The harness itself: what a failing test leaves behind.

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "harness.h"

namespace gpureap::e2e {
namespace {

// A test that aborts (a failed nlohmann assertion, std::terminate) skips SimNode's
// destructor, and so does one stopped by a signal (Ctrl-C on `make test` reaches every
// test of the terminal's process group; SIGTERM from a supervisor); the harness's handler
// still runs `gpureap-sim cleanup` on its node, so a detached simulated holder does not
// outlive the test. (Without the handler this test fails by its timeout: the holder keeps
// the death test's pipe open.)
void a_test_ended_by(void (*end)(), const char* how) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  EXPECT_DEATH(
      {
        ::close(fds[0]);
        SimNode node({"--gpus", "1"});
        auto held = node.hold({"--gpu", "0", "--bytes", "1GiB"});
        const pid_t pid = held.holders.empty() ? 0 : held.holders.front().first;
        const std::string line = std::to_string(pid) + " " +
                                 std::to_string(start_time_of(pid)) + " " + node.dir() + "\n";
        (void)!::write(fds[1], line.data(), line.size());
        end();
      },
      "");
  ::close(fds[1]);
  char buf[512] = {};
  const ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  ASSERT_GT(n, 0) << "the " << how << " test started no holder";
  long pid = 0;
  unsigned long long start = 0;
  char dir[400] = {};
  ASSERT_EQ(std::sscanf(buf, "%ld %llu %399s", &pid, &start, dir), 3);
  ASSERT_GT(pid, 0);
  ASSERT_GT(start, 0u);
  const bool gone = SimNode::eventually(
      [&] { return start_time_of(static_cast<pid_t>(pid)) != start; });
  if (!gone && start_time_of(static_cast<pid_t>(pid)) == start)
    ::kill(static_cast<pid_t>(pid), SIGKILL);  // the holder this test started, same start time
  EXPECT_TRUE(gone) << "the " << how << " test's holder " << pid << " outlived it";
  // The handler stops the node's holders; its directory is this test's to remove (it
  // was left in /tmp at every run before).
  const std::string node_dir = dir;
  if (gone && std::filesystem::path(node_dir).filename().string().starts_with("gpureap-e2e-")) {
    std::error_code ec;
    std::filesystem::remove_all(node_dir, ec);
    EXPECT_FALSE(ec) << node_dir << ": " << ec.message();
  }
}

TEST(HarnessDeathTest, AnAbortingTestLeavesNoSimulatedHolderBehind) {
  a_test_ended_by([] { std::abort(); }, "aborted");
}

TEST(HarnessDeathTest, AnInterruptedTestLeavesNoSimulatedHolderBehind) {
  a_test_ended_by([] { ::raise(SIGINT); }, "interrupted");
}

TEST(HarnessDeathTest, ATerminatedTestLeavesNoSimulatedHolderBehind) {
  a_test_ended_by([] { ::raise(SIGTERM); }, "terminated");
}

}  // namespace
}  // namespace gpureap::e2e
