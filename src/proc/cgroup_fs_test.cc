#include "proc/cgroup_fs.h"

#include <gtest/gtest.h>

namespace gpureap::proc {
namespace {

TEST(Cgroup2Mount, HybridHostAndEscapes) {
  auto m = parse_cgroup2_mount(
      "25 24 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "36 35 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m->root, "/");
  auto spaced = parse_cgroup2_mount("29 23 0:26 / /my\\040cgroups rw - cgroup2 none rw\n");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(spaced->mount_point, "/my cgroups");
  EXPECT_FALSE(parse_cgroup2_mount("41 35 0:38 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"));
  EXPECT_FALSE(parse_cgroup2_mount(""));
}

TEST(Cgroup2Mount, DirectoryOfACgroupPath) {
  Cgroup2Mount whole{"/", "/sys/fs/cgroup"};
  EXPECT_EQ(whole.dir_of("/system.slice/x.service"), "/sys/fs/cgroup/system.slice/x.service");
  // A bind mount of a subtree (a container's view): paths outside it have no directory here.
  Cgroup2Mount sub{"/lxc/129", "/sys/fs/cgroup"};
  EXPECT_EQ(sub.dir_of("/lxc/129/app"), "/sys/fs/cgroup/app");
  EXPECT_EQ(sub.dir_of("/system.slice/x.service"), "");
}

}  // namespace
}  // namespace gpureap::proc
