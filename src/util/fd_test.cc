#include "util/fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace gpureap {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

TEST(UniqueFd, ClosesAndMoves) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  {
    UniqueFd a(raw);
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, MoveAssignmentClosesTheDescriptorItReplaces) {
  int first = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int second = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  UniqueFd a(first);
  a = UniqueFd(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(a.get(), second);
  int released = a.release();
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(is_open(released));
  ::close(released);
}

}  // namespace
}  // namespace gpureap
