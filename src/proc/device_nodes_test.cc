#include "proc/device_nodes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "proc/proc_parse.h"
#include "proc/sim_node_marker.h"
#include "proc/test_children.h"
#include "util/fd.h"

namespace gpureap::proc {
namespace {

using testing::SimulatedDevDir;

const DeviceNode* find_node(const DeviceSet& set, const std::string& suffix) {
  for (const auto& e : set.entries())
    if (e.node.path.ends_with("/" + suffix)) return &e.node;
  return nullptr;
}

// The warning that names `path`, or "" when there is none.
std::string warning_for(const DeviceSet& set, const std::string& path) {
  for (const auto& w : set.warnings())
    if (w.starts_with(path + " ") || w.starts_with(path + ":")) return w;
  return "";
}

// A /proc stand-in with only a `devices` file (the fixture of a GPU host, where
// nvidia-uvm has major 511), removed on destruction.
class FakeProcRoot {
 public:
  explicit FakeProcRoot(bool with_uvm = true) {
    char tmpl[] = "/tmp/gpureap-proc-root-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    std::ifstream in(std::string(GPUREAP_FIXTURES) + "/proc/devices_nvidia");
    std::ofstream out(dir_ + "/devices");
    for (std::string line; std::getline(in, line);)
      if (with_uvm || !line.ends_with(" nvidia-uvm")) out << line << "\n";
  }
  ~FakeProcRoot() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

TEST(DiscoverDevices, FindsEveryKindAndIgnoresOthers) {
  SimulatedDevDir dev({"nvidia0", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                       "nvidia-modeset", "nvidia0x", "nvidiafoo", "README", "nvidia"});
  ::mkdir(dev.path("nvidia-caps").c_str(), 0755);  // a directory on real hosts
  ::mkdir(dev.path("nvidia3").c_str(), 0755);      // a directory, not a node

  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->size(), 6u);
  // Names that are not ours pass silently; one of ours that is no node is named.
  ASSERT_EQ(set->warnings().size(), 1u);
  EXPECT_NE(warning_for(*set, dev.path("nvidia3")).find("is a directory"), std::string::npos);
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

// Issue 25: MIG capability nodes count when mig-minors names them; nvidia-cap1 and
// nvidia-cap2 (config, monitor: on every MIG-capable GPU, MIG on or off) never do, so
// the driver's table (4,322 lines, 5.4 ms a read on the H200) is not read for them. The
// table here maps minor 1 on purpose: the regression counted it as a MIG device's.
TEST(DiscoverDevices, MigCapabilitiesAreThoseTheTableNamesBeyondConfigAndMonitor) {
  SimulatedDevDir dev({"nvidia0", "nvidiactl"});
  ::mkdir(dev.path("nvidia-caps").c_str(), 0755);
  for (const char* cap : {"nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"})
    std::ofstream(dev.path(cap)) << "";
  std::ofstream(dev.path("nvidia-caps/mig-minors"))
      << "config 1\nmonitor 2\ngpu0/gi1/access 1\ngpu0/gi1/ci0/access 13\n";
  auto only_config = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(only_config) << only_config.error().message;
  for (const auto& e : only_config->entries()) EXPECT_NE(e.node.kind, NodeKind::mig_cap) << e.node.path;

  std::ofstream(dev.path("nvidia-caps/nvidia-cap13")) << "";
  auto with_mig = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(with_mig) << with_mig.error().message;
  const DeviceNode* cap = find_node(*with_mig, "nvidia-cap13");
  ASSERT_NE(cap, nullptr);
  EXPECT_EQ(cap->kind, NodeKind::mig_cap);
  EXPECT_EQ(cap->mig, (MigAccess{0, 1, 0u}));
  EXPECT_EQ(find_node(*with_mig, "nvidia-cap1"), nullptr);
}

// Issue 25: a driver loaded without nv_cap_enable_devfs=1 gives MIG capabilities as
// files (/proc/driver/nvidia/capabilities/gpu<M>/mig/gi<G>[/ci<C>]/access); in a
// simulated node they are in its nvidia-capabilities/ directory, trusted like its
// mig-minors. An open one is matched by identity, as a simulated node is.
TEST(DiscoverDevices, MigCapabilityFilesAreFoundUnderEachGpusMigDirectory) {
  SimulatedDevDir dev({"nvidia0", "nvidiactl"});
  namespace fs = std::filesystem;
  const fs::path root = dev.path("nvidia-capabilities");
  fs::create_directories(root / "gpu0/mig/gi1/ci0");
  fs::create_directories(root / "gpu0/mig/gi2/ci0");
  fs::create_directories(root / "gpu1/mig");  // a GPU with MIG off: no GPU instance
  fs::create_directories(root / "mig");       // the node-wide config and monitor
  for (const char* f : {"gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access", "gpu0/mig/gi2/access",
                        "mig/config"})
    std::ofstream(root / f) << "";
  fs::create_symlink(root / "gpu0/mig/gi1/ci0/access", root / "gpu0/mig/gi2/ci0/access");

  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set) << set.error().message;
  std::vector<std::pair<std::string, MigAccess>> found;
  for (const auto& e : set->entries())
    if (e.node.kind == NodeKind::mig_cap) {
      ASSERT_TRUE(e.node.mig) << e.node.path;
      found.emplace_back(e.node.path.substr(dev.dir().size()), *e.node.mig);
      EXPECT_FALSE(e.procfs_capability) << "a simulated node's files are not the driver's /proc";
    }
  const std::vector<std::pair<std::string, MigAccess>> expected = {
      {"/nvidia-capabilities/gpu0/mig/gi1/access", {0, 1, std::nullopt}},
      {"/nvidia-capabilities/gpu0/mig/gi1/ci0/access", {0, 1, 0u}},
      {"/nvidia-capabilities/gpu0/mig/gi2/access", {0, 2, std::nullopt}},
  };
  EXPECT_EQ(found, expected);
  EXPECT_NE(warning_for(*set, (root / "gpu0/mig/gi2/ci0/access").string()), "")
      << "a symlink is no capability file";
  EXPECT_FALSE(set->has_procfs_capabilities());

  UniqueFd fd(::open((root / "gpu0/mig/gi1/ci0/access").c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  ASSERT_EQ(::fstat(fd.get(), &st), 0);
  const DeviceNode* node = set->match_fd(st);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->mig, (MigAccess{0, 1, 0u}));
}

// With capability nodes (nv_cap_enable_devfs=1) the files are no capability: the driver
// takes only the nodes, so the files are not walked.
TEST(DiscoverDevices, MigCapabilityFilesAreIgnoredWhenCapabilityNodesAreThere) {
  SimulatedDevDir dev({"nvidia0", "nvidiactl"});
  namespace fs = std::filesystem;
  fs::create_directories(dev.path("nvidia-caps"));
  std::ofstream(dev.path("nvidia-caps/nvidia-cap13")) << "";
  std::ofstream(dev.path("nvidia-caps/mig-minors")) << "gpu0/gi1/ci0/access 13\n";
  fs::create_directories(dev.path("nvidia-capabilities/gpu0/mig/gi1/ci0"));
  std::ofstream(dev.path("nvidia-capabilities/gpu0/mig/gi1/ci0/access")) << "";
  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_NE(find_node(*set, "nvidia-cap13"), nullptr);
  EXPECT_EQ(find_node(*set, "ci0/access"), nullptr);
}

// On a real node the files count only on procfs, and a file of another mount of procfs
// (a container's own /proc: another device, the same inode number) is only a candidate.
TEST(DeviceSet, AProcfsCapabilityOfAnotherMountIsACandidateByInode) {
  DeviceSet::Entry cap;
  cap.node.kind = NodeKind::mig_cap;
  cap.node.path = "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access";
  cap.node.mig = MigAccess{0, 1, 0u};
  cap.dev = makedev(0, 22);
  cap.ino = 0xf0001234;
  cap.procfs_capability = true;
  DeviceSet set({cap});
  ASSERT_TRUE(set.has_procfs_capabilities());
  struct stat st {};
  st.st_mode = S_IFREG | 0444;
  st.st_dev = makedev(0, 22);
  st.st_ino = 0xf0001234;
  EXPECT_NE(set.match_fd(st), nullptr) << "the same mount: matched outright";
  EXPECT_EQ(set.procfs_capability_candidate(st), nullptr);
  st.st_dev = makedev(0, 97);
  EXPECT_EQ(set.match_fd(st), nullptr);
  EXPECT_EQ(set.procfs_capability_candidate(st), &set.entries()[0].node);
  st.st_ino = 0xf0001235;
  EXPECT_EQ(set.procfs_capability_candidate(st), nullptr);
  st.st_ino = 0xf0001234;
  st.st_mode = S_IFCHR | 0444;
  EXPECT_EQ(set.procfs_capability_candidate(st), nullptr);
}

TEST(DiscoverDevices, MissingOrEmptyDirectoryIsAnEmptySet) {
  SimulatedDevDir dev(std::vector<std::string>{});
  auto empty = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  auto missing = discover_devices(dev.path("does-not-exist"), "/proc");
  ASSERT_TRUE(missing);
  EXPECT_TRUE(missing->empty());
}

TEST(DiscoverDevices, NotADirectoryIsAnError) {
  SimulatedDevDir dev({"nvidia0"});
  auto set = discover_devices(dev.path("nvidia0"), "/proc");
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().sys_errno, ENOTDIR);
}

TEST(DeviceSet, MatchesAnOpenFileByIdentityNotPath) {
  SimulatedDevDir dev({"nvidia0", "nvidia1"});
  auto set = discover_devices(dev.dir(), "/proc");
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
  auto set = discover_devices(dev.dir(), "/proc");
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

TEST(DiscoverDevices, SymlinkToDevNullIsIgnoredWithAWarning) {
  // The wave-1 finding: nvidia9 -> /dev/null (char 1:3) made every process with
  // /dev/null open a holder of "GPU 3". A link is never followed, not even to a
  // real node inside the directory.
  SimulatedDevDir dev({"nvidia0"});
  ASSERT_EQ(::symlink("/dev/null", dev.path("nvidia9").c_str()), 0);
  ASSERT_EQ(::symlink("nvidia0", dev.path("nvidia4").c_str()), 0);
  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ(set->entries()[0].node.path, dev.path("nvidia0"));
  EXPECT_NE(warning_for(*set, dev.path("nvidia9")).find("symbolic link to /dev/null"),
            std::string::npos)
      << warning_for(*set, dev.path("nvidia9"));
  EXPECT_NE(warning_for(*set, dev.path("nvidia4")).find("symbolic link"), std::string::npos);

  struct stat null_st {};
  ASSERT_EQ(::stat("/dev/null", &null_st), 0);
  EXPECT_EQ(set->match_fd(null_st), nullptr);
}

TEST(DiscoverDevices, FifoDirectoryAndOutOfRangeNamesAreIgnoredWithWarnings) {
  SimulatedDevDir dev({"nvidia0", "nvidia248", "nvidia99999999999999"});
  ASSERT_EQ(::mkfifo(dev.path("nvidia5").c_str(), 0600), 0);
  ASSERT_EQ(::mkdir(dev.path("nvidia6").c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo(dev.path("nvidiactl").c_str(), 0600), 0);
  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ(set->warnings().size(), 5u);
  EXPECT_NE(warning_for(*set, dev.path("nvidia5")).find("is a FIFO"), std::string::npos);
  EXPECT_NE(warning_for(*set, dev.path("nvidia6")).find("is a directory"), std::string::npos);
  EXPECT_NE(warning_for(*set, dev.path("nvidiactl")).find("is a FIFO"), std::string::npos);
  EXPECT_NE(warning_for(*set, dev.path("nvidia248")).find("nvidia0 to nvidia247"),
            std::string::npos);
  EXPECT_NE(warning_for(*set, dev.path("nvidia99999999999999")), "");
}

TEST(DiscoverDevices, RegularFilesCountOnlyWithTheSimulatorsMarker) {
  SimulatedDevDir unmarked({"nvidia0", "nvidiactl"}, /*marker=*/false);
  auto set = discover_devices(unmarked.dir(), "/proc");
  ASSERT_TRUE(set);
  EXPECT_TRUE(set->empty());
  ASSERT_EQ(set->warnings().size(), 2u);
  EXPECT_NE(warning_for(*set, unmarked.path("nvidia0")).find("is a regular file"),
            std::string::npos);

  // A marker with other content does not count either, and says why.
  std::ofstream(unmarked.path(std::string(kSimNodeMarkerName))) << "anything\n";
  set = discover_devices(unmarked.dir(), "/proc");
  ASSERT_TRUE(set);
  EXPECT_TRUE(set->empty());
  EXPECT_NE(warning_for(*set, unmarked.path("nvidia0")).find("does not hold the content"),
            std::string::npos)
      << warning_for(*set, unmarked.path("nvidia0"));

  // A marker that is a symlink to a good marker is not followed.
  SimulatedDevDir marked({"nvidia1"});
  SimulatedDevDir linked({"nvidia0"}, /*marker=*/false);
  ASSERT_EQ(::symlink(marked.path(std::string(kSimNodeMarkerName)).c_str(),
                      linked.path(std::string(kSimNodeMarkerName)).c_str()),
            0);
  set = discover_devices(linked.dir(), "/proc");
  ASSERT_TRUE(set);
  EXPECT_TRUE(set->empty());
  EXPECT_EQ(set->warnings().size(), 1u);
}

TEST(DiscoverDevices, SimulatedNodeOwnedBySomeoneElseIsIgnored) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a file to another user";
  // A hard link to another user's file keeps that owner; it is no node of ours.
  SimulatedDevDir dev({"nvidia0", "nvidia1"});
  ASSERT_EQ(::chown(dev.path("nvidia1").c_str(), 65534, 65534), 0);
  auto set = discover_devices(dev.dir(), "/proc");
  ASSERT_TRUE(set);
  ASSERT_EQ(set->size(), 1u);
  EXPECT_NE(warning_for(*set, dev.path("nvidia1")).find("owned by uid 65534"), std::string::npos);
}

TEST(DiscoverDevices, CharacterDevicesNeedTheNvidiaDriversNumbers) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for mknod";
  SimulatedDevDir dev(std::vector<std::string>{}, /*marker=*/false);
  auto node = [&](const char* name, unsigned maj, unsigned min) {
    ASSERT_EQ(::mknod(dev.path(name).c_str(), S_IFCHR | 0600, ::makedev(maj, min)), 0) << name;
  };
  node("nvidia0", 195, 0);         // a GPU
  node("nvidia3", 195, 5);         // renamed (docker --device A:B): GPU minor 5
  node("nvidia9", 1, 3);           // /dev/null's numbers
  node("nvidia7", 195, 255);       // nvidiactl's numbers under a GPU's name
  node("nvidiactl", 195, 255);     // ok
  node("nvidia-modeset", 195, 0);  // wrong minor
  node("nvidia-uvm", 511, 0);      // /proc/devices: 511 nvidia-uvm
  node("nvidia-uvm-tools", 1, 5);  // /dev/zero's numbers
  FakeProcRoot proc;
  auto set = discover_devices(dev.dir(), proc.dir());
  ASSERT_TRUE(set) << set.error().message;

  ASSERT_NE(find_node(*set, "nvidia0"), nullptr);
  EXPECT_EQ(find_node(*set, "nvidia0")->minor, 0u);
  ASSERT_NE(find_node(*set, "nvidia3"), nullptr);
  EXPECT_EQ(find_node(*set, "nvidia3")->minor, 5u);
  EXPECT_NE(warning_for(*set, dev.path("nvidia3")).find("GPU minor 5"), std::string::npos);
  EXPECT_NE(find_node(*set, "nvidiactl"), nullptr);
  EXPECT_NE(find_node(*set, "nvidia-uvm"), nullptr);
  EXPECT_EQ(set->size(), 4u);

  EXPECT_EQ(find_node(*set, "nvidia9"), nullptr);
  EXPECT_NE(warning_for(*set, dev.path("nvidia9")).find("character device 1:3, not the NVIDIA"),
            std::string::npos)
      << warning_for(*set, dev.path("nvidia9"));
  EXPECT_NE(warning_for(*set, dev.path("nvidia7")), "");
  EXPECT_NE(warning_for(*set, dev.path("nvidia-modeset")), "");
  EXPECT_NE(warning_for(*set, dev.path("nvidia-uvm-tools")).find("major 511"), std::string::npos);

  // Matching goes by device number: /dev/null never matches, 195:0 does.
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_EQ(set->match_fd(st), nullptr);
  st.st_rdev = ::makedev(195, 5);
  ASSERT_NE(set->match_fd(st), nullptr);
  EXPECT_EQ(set->match_fd(st)->minor, 5u);

  // Without nvidia-uvm in /proc/devices (module not loaded) no uvm node counts.
  FakeProcRoot no_uvm(/*with_uvm=*/false);
  auto without = discover_devices(dev.dir(), no_uvm.dir());
  ASSERT_TRUE(without);
  EXPECT_EQ(find_node(*without, "nvidia-uvm"), nullptr);
  EXPECT_NE(warning_for(*without, dev.path("nvidia-uvm")).find("lists no nvidia-uvm"),
            std::string::npos);
}

}  // namespace
}  // namespace gpureap::proc
