#include "proc/device_nodes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "proc/proc_parse.h"
#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using testing::SimulatedDevDir;

const DeviceNode* find_node(const DeviceSet& set, const std::string& suffix) {
  for (const auto& e : set.entries())
    if (e.node.path.ends_with("/" + suffix)) return &e.node;
  return nullptr;
}

TEST(DiscoverDevices, FindsEveryKindAndIgnoresOthers) {
  SimulatedDevDir dev({"nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                       "nvidia-modeset", "nvidia0x", "nvidiafoo", "README", "nvidia"});
  ::mkdir(dev.path("nvidia-caps").c_str(), 0755);  // a directory on real hosts
  ::mkdir(dev.path("nvidia3").c_str(), 0755);      // a directory, not a node

  auto set = discover_devices(dev.dir());
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->size(), 6u);
  const DeviceNode* gpu7 = find_node(*set, "nvidia7");
  ASSERT_NE(gpu7, nullptr);
  EXPECT_EQ(gpu7->kind, NodeKind::gpu);
  EXPECT_EQ(gpu7->minor, 7u);
  EXPECT_EQ(gpu7->path, dev.path("nvidia7"));
  EXPECT_EQ(find_node(*set, "nvidiactl")->kind, NodeKind::ctl);
  EXPECT_FALSE(find_node(*set, "nvidiactl")->minor);
  EXPECT_EQ(find_node(*set, "nvidia-uvm")->kind, NodeKind::uvm);
  EXPECT_EQ(find_node(*set, "nvidia-uvm-tools")->kind, NodeKind::uvm_tools);
  EXPECT_EQ(find_node(*set, "nvidia-modeset")->kind, NodeKind::modeset);
}

TEST(DiscoverDevices, MissingOrEmptyDirectoryIsAnEmptySet) {
  SimulatedDevDir dev(std::vector<std::string>{});
  auto empty = discover_devices(dev.dir());
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  auto missing = discover_devices(dev.path("does-not-exist"));
  ASSERT_TRUE(missing);
  EXPECT_TRUE(missing->empty());
}

TEST(DiscoverDevices, NotADirectoryIsAnError) {
  SimulatedDevDir dev({"nvidia0"});
  auto set = discover_devices(dev.path("nvidia0"));
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().sys_errno, ENOTDIR);
}

TEST(DeviceSet, MatchesAnOpenFileByIdentityNotPath) {
  SimulatedDevDir dev({"nvidia0", "nvidia1"});
  auto set = discover_devices(dev.dir());
  ASSERT_TRUE(set);
  // Another name for the same file (what a container's bind mount looks like) matches.
  ASSERT_EQ(::link(dev.path("nvidia0").c_str(), dev.path("elsewhere").c_str()), 0);
  int fd = ::open(dev.path("elsewhere").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::stat(("/proc/self/fd/" + std::to_string(fd)).c_str(), &st), 0);
  const DeviceNode* node = set->match_fd(st);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->minor, 0u);
  ::close(fd);

  // A copy with the name of a node does not.
  std::ofstream(dev.path("copy")) << "x";
  struct stat copy {};
  ASSERT_EQ(::stat(dev.path("copy").c_str(), &copy), 0);
  EXPECT_EQ(set->match_fd(copy), nullptr);
}

TEST(DeviceSet, MatchesAMappingByDeviceAndInode) {
  SimulatedDevDir dev({"nvidia1"});
  auto set = discover_devices(dev.dir());
  ASSERT_TRUE(set);
  int fd = ::open(dev.path("nvidia1").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  ::close(fd);

  std::ifstream maps("/proc/self/maps");
  const DeviceNode* found = nullptr;
  for (std::string line; std::getline(maps, line);) {
    auto e = parse_maps_line(line);
    ASSERT_TRUE(e) << line;
    if (e->start == reinterpret_cast<std::uintptr_t>(p))
      found = set->match_mapping(e->dev_major, e->dev_minor, e->inode);
  }
  ::munmap(p, 4096);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->minor, 1u);
  EXPECT_EQ(set->match_mapping(0, 0, 0), nullptr);  // anonymous memory
}

TEST(DeviceSet, CharacterDeviceMatchedByDeviceNumber) {
  // A symlink named like a GPU node pointing at /dev/null (char 1:3): the node
  // is a character device, its minor comes from st_rdev, and any fd of that
  // device matches wherever it was opened from.
  SimulatedDevDir dev(std::vector<std::string>{});
  ASSERT_EQ(::symlink("/dev/null", dev.path("nvidia9").c_str()), 0);
  auto set = discover_devices(dev.dir());
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 1u);
  EXPECT_TRUE(set->entries()[0].is_char);
  EXPECT_EQ(set->entries()[0].node.minor, 3u);  // minor(1:3), not the 9 of the name

  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_NE(set->match_fd(st), nullptr);
  struct stat zero {};
  ASSERT_EQ(::stat("/dev/zero", &zero), 0);
  EXPECT_EQ(set->match_fd(zero), nullptr);
}

}  // namespace
}  // namespace gpureap::proc
