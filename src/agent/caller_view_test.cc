#include "agent/caller_view.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace gpureap::agent {
namespace {

// W2-16: the caller's /proc decides what the agent may tell it.
TEST(CallerView, W2_16_TheProcMountedLastAtProcDecides) {
  const std::string mountinfo =
      "21 26 0:20 / /sys rw,nosuid - sysfs sysfs rw\n"
      "22 26 0:21 / /proc rw,relatime shared:12 - proc proc rw\n"
      "40 22 0:35 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n"
      "61 22 0:48 / /proc rw,relatime - proc proc rw,hidepid=invisible,gid=27\n";
  EXPECT_EQ(proc_mount_options(mountinfo, "/proc"), "rw,hidepid=invisible,gid=27");
  EXPECT_EQ(proc_mount_options("22 26 0:21 / /proc rw - proc proc rw\n", "/proc"), "rw");
  EXPECT_FALSE(proc_mount_options("22 26 0:21 / /proc rw - tmpfs none rw\n", "/proc"))
      << "something else over /proc: no procfs to read";
  EXPECT_FALSE(proc_mount_options("21 26 0:20 / /sys rw - sysfs sysfs rw\n", "/proc"));
  EXPECT_FALSE(proc_mount_options("", "/proc"));
}

TEST(CallerView, W2_16_HidepidHidesOtherUsersButFromItsGroup) {
  EXPECT_TRUE(proc_shows_other_users("rw", {1000}));
  EXPECT_TRUE(proc_shows_other_users("rw,hidepid=0", {1000}));
  EXPECT_TRUE(proc_shows_other_users("rw,hidepid=off", {1000}));
  for (const char* hidden : {"rw,hidepid=1", "rw,hidepid=2", "rw,hidepid=invisible",
                             "rw,hidepid=noaccess", "rw,hidepid=ptraceable", "rw,hidepid=4"}) {
    EXPECT_FALSE(proc_shows_other_users(hidden, {1000})) << hidden;
    EXPECT_TRUE(proc_shows_other_users(std::string(hidden) + ",gid=27", {1000, 27})) << hidden;
    EXPECT_FALSE(proc_shows_other_users(std::string(hidden) + ",gid=27", {1000})) << hidden;
  }
}

TEST(CallerView, W2_16_AnUnreadableCallerSeesNoOtherUser) {
  EXPECT_FALSE(peer_sees_other_users(Peer{0, 1000, 1000}, "/proc"));
  EXPECT_FALSE(peer_sees_other_users(Peer{::getpid(), 1000, 1000}, "/nonexistent"));
}

}  // namespace
}  // namespace gpureap::agent
