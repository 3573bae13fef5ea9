#include "proc/cgroup_fs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

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


// cgroup.kill acts on the whole subtree, so the subtree's members are what must be
// checked (D1): a plain directory tree with cgroup.procs files stands in for cgroupfs.
TEST(CgroupSubtree, MembersOfEveryCgroupBelowAreListed) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("gpureap-cg-" + std::to_string(::getpid()));
  fs::create_directories(root / "child" / "grandchild");
  fs::create_directories(root / "empty");
  std::ofstream(root / "cgroup.procs") << "10\n11\n";
  std::ofstream(root / "child" / "cgroup.procs") << "20\n";
  std::ofstream(root / "child" / "grandchild" / "cgroup.procs") << "30\n";
  std::ofstream(root / "empty" / "cgroup.procs") << "";
  auto members = cgroup_subtree_members(root.string());
  ASSERT_TRUE(members) << members.error().message;
  ASSERT_EQ(members->size(), 4u);
  EXPECT_EQ((*members)[0].pid, 10);  // the cgroup's own members first
  EXPECT_EQ((*members)[0].dir, root.string());
  auto find = [&](pid_t p) {
    return std::find_if(members->begin(), members->end(),
                        [&](const CgroupMember& m) { return m.pid == p; });
  };
  ASSERT_NE(find(30), members->end());
  EXPECT_EQ(find(30)->dir, (root / "child" / "grandchild").string());
  // A cgroup whose cgroup.procs cannot be read fails the whole answer: unknown members
  // must never count as "none".
  fs::create_directories(root / "unreadable");
  EXPECT_FALSE(cgroup_subtree_members(root.string()));
  fs::remove_all(root);
}

}  // namespace
}  // namespace gpureap::proc
