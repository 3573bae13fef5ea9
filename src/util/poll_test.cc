#include "util/poll.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include "util/fd.h"

namespace gpureap {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(PollTimeout, RoundsUpAndStaysInRange) {
  EXPECT_EQ(poll_timeout_ms(Clock::now() - milliseconds(5)), 0);
  EXPECT_GE(poll_timeout_ms(Clock::now() + std::chrono::microseconds(10)), 1);
  const int far = poll_timeout_ms(Clock::time_point::max());
  EXPECT_EQ(far, 24 * 3600 * 1000);
}

TEST(PollUntil, ReturnsTheEventOrZeroAtTheDeadline) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd reader(fds[0]);
  UniqueFd writer(fds[1]);
  const auto start = Clock::now();
  EXPECT_EQ(poll_until(reader.get(), POLLIN, start + milliseconds(30)), 0);
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  ASSERT_EQ(::write(writer.get(), "x", 1), 1);
  EXPECT_TRUE(poll_until(reader.get(), POLLIN, Clock::now() + std::chrono::seconds(5)) & POLLIN);
  writer.reset();
  char c;
  ASSERT_EQ(::read(reader.get(), &c, 1), 1);
  EXPECT_TRUE(poll_until(reader.get(), POLLIN, Clock::now() + std::chrono::seconds(5)) & POLLHUP);
}

}  // namespace
}  // namespace gpureap
