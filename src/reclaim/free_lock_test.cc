#include "reclaim/free_lock.h"

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "util/test_temp_dir.h"

namespace gpureap::reclaim {
namespace {

// A private temporary directory for one test.
class TempDir : public TestTempDir {
 public:
  TempDir() : TestTempDir("gpureap-lock-test") {}
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(FreeLock, WritesItsPidAndExcludesASecondFree) {
  TempDir t;
  auto first = FreeLock::acquire(t.dir());
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(read_all(t.path("free.lock")), std::to_string(::getpid()) + "\n");
  auto second = FreeLock::acquire(t.dir());
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("another gpureap free (pid " + std::to_string(::getpid())),
            std::string::npos)
      << second.error().message;
}

TEST(FreeLock, SymlinkIsRefusedAndItsTargetLeftAlone) {
  // The wave-1 plant: free.lock -> a victim's file, which was truncated and
  // overwritten with our pid.
  TempDir t;
  const std::string precious = "precious data of relu\n";
  std::ofstream(t.path("important.txt")) << precious;
  ASSERT_EQ(::mkdir(t.path("state").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(t.path("important.txt").c_str(), t.path("state/free.lock").c_str()), 0);
  auto lock = FreeLock::acquire(t.path("state"));
  ASSERT_FALSE(lock);
  EXPECT_NE(lock.error().message.find("free.lock is a symbolic link"), std::string::npos)
      << lock.error().message;
  EXPECT_EQ(read_all(t.path("important.txt")), precious);

  // A dangling link (to a file it would create) is refused as well.
  ASSERT_EQ(::symlink(t.path("created.txt").c_str(), t.path("free.lock").c_str()), 0);
  EXPECT_FALSE(FreeLock::acquire(t.dir()));
  EXPECT_FALSE(std::filesystem::exists(t.path("created.txt")));
}

TEST(FreeLock, SomethingOtherThanOurRegularFileIsRefused) {
  TempDir t;
  ASSERT_EQ(::mkfifo(t.path("free.lock").c_str(), 0600), 0);
  auto fifo = FreeLock::acquire(t.dir());
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().message.find("not a regular file"), std::string::npos);

  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another user";
  TempDir u;
  std::ofstream(u.path("free.lock")) << "theirs\n";
  ASSERT_EQ(::chown(u.path("free.lock").c_str(), 65534, 65534), 0);
  auto foreign = FreeLock::acquire(u.dir());
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message.find("owned by uid 65534"), std::string::npos);
  EXPECT_EQ(read_all(u.path("free.lock")), "theirs\n");
}

TEST(FreeLock, AWaitingFreeTakesTheLockWhenTheHolderLetsGo) {
  TempDir t;
  auto first = FreeLock::acquire(t.dir());
  ASSERT_TRUE(first) << first.error().message;
  // The holder lets go as soon as the waiter opens the lock file: the waiter
  // gets it by waiting, within its bound of 20 s, however the two interleave.
  int watch = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, t.path("free.lock").c_str(), IN_OPEN), 0);
  std::optional<FreeLock> held(std::move(*first));
  std::thread holder([&] {
    char event[4096];
    (void)!::read(watch, event, sizeof event);
    held.reset();
  });
  auto second =
      FreeLock::acquire(t.dir(), std::chrono::steady_clock::now() + std::chrono::seconds(20));
  holder.join();
  ::close(watch);
  EXPECT_TRUE(second) << second.error().message;
}

TEST(FreeLock, AWaitThatRunsOutSaysItWaited) {
  TempDir t;
  auto first = FreeLock::acquire(t.dir());
  ASSERT_TRUE(first);
  auto second = FreeLock::acquire(t.dir(), std::chrono::steady_clock::now() +
                                               std::chrono::milliseconds(300));
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("was still running after waiting"), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find("(pid " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.error().message;
  // A bound already past is no wait at all, and the message is the plain one.
  auto third = FreeLock::acquire(t.dir(), std::chrono::steady_clock::now());
  ASSERT_FALSE(third);
  EXPECT_NE(third.error().message.find("is running; wait for it to finish"), std::string::npos)
      << third.error().message;
}

}  // namespace
}  // namespace gpureap::reclaim
