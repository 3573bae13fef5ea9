#include "proc/cgroup_fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "proc/test_children.h"

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

TEST(Cgroup2Path, TheV2LineOfProcPidCgroup) {
  EXPECT_EQ(parse_cgroup2_path("9:name=systemd:/\n4:memory:/x\n0::/user.slice/session-3.scope\n"),
            "/user.slice/session-3.scope");
  EXPECT_EQ(parse_cgroup2_path("0::/a:b\n"), "/a:b");  // a path may contain ':'
  EXPECT_EQ(parse_cgroup2_path("4:memory:/x\n"), std::nullopt);
  EXPECT_EQ(cgroup2_path_of(::getpid(), "/proc"), own_cgroup2_path("/proc"));
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

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Children;
using testing::spawn_parked;

// A cgroup of the test's own on the real cgroup2 file system, beneath this
// process's cgroup or at the mount's root; nullopt (the test skips) where
// cgroup v2 is absent or not writable. Removed, subtree first, at the end.
class TestCgroup {
 public:
  static std::optional<TestCgroup> make(const std::string& name) {
    auto mount = cgroup2_mount("/proc");
    if (!mount) return std::nullopt;
    std::vector<std::string> parents;
    if (std::string own = mount->dir_of(own_cgroup2_path("/proc")); !own.empty()) parents.push_back(own);
    parents.push_back(mount->mount_point);
    for (const auto& parent : parents) {
      std::string dir = parent + "/gpureap-cgfs-test-" + name + "-" + std::to_string(::getpid());
      if (::mkdir(dir.c_str(), 0755) == 0) return TestCgroup(dir);
    }
    return std::nullopt;
  }
  TestCgroup(TestCgroup&& o) noexcept : dir_(std::exchange(o.dir_, "")) {}
  ~TestCgroup() {
    if (dir_.empty()) return;
    if (auto dirs = cgroup_subtree_dirs(dir_))
      for (auto it = dirs->rbegin(); it != dirs->rend(); ++it) ::rmdir(it->c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  explicit TestCgroup(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

void move_into(const std::string& dir, pid_t pid) {
  std::ofstream(dir + "/cgroup.procs") << pid << std::flush;
}

TEST(CgroupFs, MembersFreezeKillAndWaitEmptyOnARealCgroup) {
  auto cg = TestCgroup::make("kill");
  if (!cg) GTEST_SKIP() << "cgroup v2 is not writable here";
  const std::string sub = cg->dir() + "/sub";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  EXPECT_FALSE(cgroup_populated(cg->dir()));

  Children children;
  pid_t top = spawn_parked(children);
  pid_t below = spawn_parked(children);
  move_into(cg->dir(), top);
  move_into(sub, below);
  EXPECT_TRUE(cgroup_populated(cg->dir()));
  EXPECT_EQ(cgroup_members(cg->dir()).value_or(std::vector<pid_t>{}), std::vector<pid_t>{top});
  EXPECT_EQ(cgroup_subtree_dirs(cg->dir()).value_or(std::vector<std::string>{}),
            (std::vector<std::string>{cg->dir(), sub}));
  auto members = cgroup_subtree_members(cg->dir());
  ASSERT_TRUE(members);
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].pid, top);
  EXPECT_EQ((*members)[1].pid, below);
  EXPECT_EQ((*members)[1].dir, sub);

  // Not frozen: the wait ends at its deadline.
  auto start = Clock::now();
  EXPECT_FALSE(cgroup_wait_frozen(cg->dir(), start + 100ms));
  EXPECT_GE(Clock::now() - start, 100ms);
  ASSERT_TRUE(cgroup_freeze(cg->dir(), true));
  EXPECT_TRUE(cgroup_freeze_requested(cg->dir()));
  EXPECT_TRUE(cgroup_wait_frozen(cg->dir(), Clock::now() + 5s));
  ASSERT_TRUE(cgroup_freeze(cg->dir(), false));
  EXPECT_FALSE(cgroup_freeze_requested(cg->dir()));

  // A live member: the wait for "empty" ends at its deadline.
  EXPECT_FALSE(cgroup_wait_empty(cg->dir(), Clock::now() + 50ms));
  ASSERT_TRUE(cgroup_kill_all(cg->dir(), Clock::now() + 5s, "/proc"));
  EXPECT_TRUE(cgroup_wait_empty(cg->dir(), Clock::now() + 5s));
  EXPECT_FALSE(cgroup_populated(cg->dir()));
  for (pid_t pid : {top, below}) {
    int status = children.reap(pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << pid;
  }
}

}  // namespace
}  // namespace gpureap::proc
