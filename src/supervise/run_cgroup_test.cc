// Parsers of the run cgroup: the cgroup2 mount, our own v2 path, run names.

#include "supervise/run_cgroup.h"

#include <gtest/gtest.h>

namespace gpureap::supervise {
namespace {

TEST(RunCgroup, FindsTheCgroup2MountOnAHybridHost) {
  constexpr std::string_view mountinfo =
      "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
      "35 25 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
      "41 35 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw\n"
      "42 35 0:39 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory\n";
  EXPECT_EQ(cgroup2_mount(mountinfo), "/sys/fs/cgroup/unified");
}

TEST(RunCgroup, ToleratesNoOptionalFieldsAndEscapes) {
  EXPECT_EQ(cgroup2_mount("29 23 0:26 / /my\\040cgroups rw - cgroup2 none rw\n"), "/my cgroups");
  EXPECT_EQ(cgroup2_mount("41 35 0:38 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"),
            std::nullopt);
  EXPECT_EQ(cgroup2_mount(""), std::nullopt);
}

TEST(RunCgroup, ReadsTheV2PathFromProcCgroup) {
  EXPECT_EQ(v2_cgroup_path("9:name=systemd:/\n4:memory:/x\n0::/user.slice/session-3.scope\n"),
            "/user.slice/session-3.scope");
  EXPECT_EQ(v2_cgroup_path("4:memory:/x\n"), std::nullopt);
}

TEST(RunCgroup, RunNamesCarryTheOwnerPid) {
  EXPECT_EQ(run_cgroup_owner("gpureap-run-sglang-4242"), 4242);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-my-server-17"), 17);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-4242"), std::nullopt);
  EXPECT_EQ(run_cgroup_owner("docker-4242"), std::nullopt);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-x-abc"), std::nullopt);
}

}  // namespace
}  // namespace gpureap::supervise
