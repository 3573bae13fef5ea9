// AmdSource over a sysfs tree built here the way amdgpu and amdkfd lay it out
// (symlinked class directories, the PCI device's directory, KFD's topology and
// per-process files), and its device-node registration.

#include "gpu/amd_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proc/sim_node_marker.h"

namespace gpureap::gpu {
namespace {

namespace fs = std::filesystem;

class AmdTree {
 public:
  AmdTree() {
    char tmpl[] = "/tmp/gpureap-amd-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    put("sys/class/kfd/kfd/topology/nodes/0/gpu_id", "0\n");
    put("sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 64\n");
    put("sys/class/kfd/kfd/dev", "240:0\n");
    fs::create_directories(sys() + "/class/kfd/kfd/proc");
    fs::create_directories(sys() + "/class/drm");
  }
  ~AmdTree() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string sys() const { return dir_ + "/sys"; }
  std::string dev() const { return dir_ + "/dev"; }

  void put(const std::string& rel, const std::string& text) {
    fs::path p = fs::path(dir_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  /// GPU at topology node `node`: bus `bus`, card<card>, renderD<minor>, memory.
  void gpu(unsigned node, std::uint32_t gpu_id, unsigned bus, unsigned card, unsigned minor,
           std::uint64_t total, std::uint64_t used, bool with_card = true) {
    const std::string topo = fmt::format("sys/class/kfd/kfd/topology/nodes/{}/", node);
    put(topo + "gpu_id", fmt::format("{}\n", gpu_id));
    put(topo + "name", "gfx942\n");
    put(topo + "properties", fmt::format("location_id {}\ndomain 0\ndrm_render_minor {}\n"
                                         "unique_id {}\n",
                                         bus << 8, minor, 0x1000 + node));
    if (!with_card) return;
    const std::string pci = fmt::format("0000:{:02x}:00.0", bus);
    const std::string devdir = "sys/devices/pci0000:00/" + pci;
    put(devdir + "/mem_info_vram_total", fmt::format("{}\n", total));
    put(devdir + "/mem_info_vram_used", fmt::format("{}\n", used));
    put(devdir + "/product_name", "AMD Instinct MI300X\n");
    for (const auto& [name, m] : {std::pair{fmt::format("card{}", card), card},
                                  std::pair{fmt::format("renderD{}", minor), minor}}) {
      put(devdir + "/drm/" + name + "/dev", fmt::format("226:{}\n", m));
      fs::create_symlink("../..", fs::path(dir_) / devdir / "drm" / name / "device");
      fs::create_symlink(fs::path("../../devices/pci0000:00") / pci / "drm" / name,
                         fs::path(sys()) / "class/drm" / name);
    }
  }

  void kfd_process(pid_t pid, std::uint32_t gpu_id, std::uint64_t bytes) {
    put(fmt::format("sys/class/kfd/kfd/proc/{}/vram_{}", pid, gpu_id), fmt::format("{}\n", bytes));
    put(fmt::format("sys/class/kfd/kfd/proc/{}/pasid", pid), "32770\n");
  }

  void plain_node(const std::string& rel) { put("dev/" + rel, std::string(16, '\0')); }
  void marker() { put("dev/" + std::string(proc::kSimNodeMarkerName),
                      std::string(proc::kSimNodeMarkerContent)); }

 private:
  std::string dir_;
};

constexpr std::uint64_t GiB = 1ULL << 30;

TEST(AmdSource, IdentityMemoryAndKfdProcesses) {
  AmdTree t;
  t.gpu(2, 49389, 0x0c, 1, 129, 192 * GiB, 10 * GiB);  // node order gives the index
  t.gpu(1, 51000, 0x03, 0, 128, 192 * GiB, 100 * GiB);
  t.kfd_process(4242, 51000, 90 * GiB);
  t.kfd_process(4242, 49389, 0);  // opened through KFD, nothing allocated: no use
  t.kfd_process(4343, 49389, 4 * GiB);
  AmdSource source(t.sys());
  GpuSnapshot snap = source.snapshot(std::chrono::milliseconds(100));
  ASSERT_EQ(snap.state, SourceState::ok) << snap.problem;
  ASSERT_EQ(snap.gpus.size(), 2U);
  const GpuInfo& g0 = snap.gpus[0];
  EXPECT_EQ(g0.id, DeviceId{0});
  EXPECT_EQ(g0.pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(g0.minor, 128U);
  EXPECT_EQ(g0.uuid, "GPU-0000000000001001");
  EXPECT_EQ(g0.name, "AMD Instinct MI300X");
  ASSERT_TRUE(g0.memory);
  EXPECT_EQ(g0.memory->total, 192 * GiB);
  EXPECT_EQ(g0.memory->used, 100 * GiB);
  EXPECT_TRUE(g0.processes_known);
  ASSERT_EQ(g0.processes.size(), 1U);
  EXPECT_EQ(g0.processes[0].pid, 4242U);
  EXPECT_EQ(g0.processes[0].used_bytes, 90 * GiB);
  const GpuInfo& g1 = snap.gpus[1];
  EXPECT_EQ(g1.minor, 129U);
  ASSERT_EQ(g1.processes.size(), 1U);
  EXPECT_EQ(g1.processes[0].pid, 4343U);

  auto readings = source.memory({DeviceId{1}, DeviceId{0}, DeviceId{5}}, std::chrono::seconds(1));
  ASSERT_TRUE(readings);
  ASSERT_EQ(readings->size(), 3U);
  EXPECT_EQ((*readings)[0].used, 10 * GiB);
  EXPECT_EQ((*readings)[0].pids, std::vector<std::uint32_t>{4343});
  EXPECT_EQ((*readings)[1].used, 100 * GiB);
  EXPECT_FALSE((*readings)[2].problem.empty());
}

TEST(AmdSource, AGpuWithoutItsCardIsListedWithAProblem) {
  AmdTree t;
  t.gpu(1, 51000, 0x03, 0, 128, 192 * GiB, 1 * GiB);
  t.gpu(2, 49389, 0x0c, 1, 129, 192 * GiB, 1 * GiB, /*with_card=*/false);
  AmdSource source(t.sys());
  GpuSnapshot snap = source.snapshot(std::chrono::milliseconds(100));
  EXPECT_EQ(snap.state, SourceState::partial);
  ASSERT_EQ(snap.gpus.size(), 2U);
  EXPECT_TRUE(snap.gpus[0].memory);
  EXPECT_FALSE(snap.gpus[1].memory);
  EXPECT_NE(snap.gpus[1].problem.find("0000:0c:00.0"), std::string::npos) << snap.gpus[1].problem;
}

TEST(AmdSource, NoTopologyIsNoDriver) {
  AmdSource source("/nonexistent-sysfs");
  GpuSnapshot snap = source.snapshot(std::chrono::milliseconds(100));
  EXPECT_EQ(snap.state, SourceState::init_failed);
  EXPECT_NE(snap.problem.find("lists no node"), std::string::npos);
  EXPECT_FALSE(has_amd_gpus("/nonexistent-sysfs"));
  EXPECT_FALSE(source.memory({DeviceId{0}}, std::chrono::seconds(1)));
}

TEST(AmdSource, RegistersKfdRenderAndCardNodesOfASimulatedDirectory) {
  AmdTree t;
  t.gpu(1, 51000, 0x03, 0, 128, 192 * GiB, 1 * GiB);
  t.marker();
  t.plain_node("kfd");
  t.plain_node("dri/renderD128");
  t.plain_node("dri/card0");
  AmdSource source(t.sys());
  EXPECT_TRUE(has_amd_gpus(t.sys()));
  proc::DeviceSet set = source.device_nodes(t.dev());
  EXPECT_TRUE(set.warnings().empty()) << set.warnings().front();
  ASSERT_EQ(set.size(), 3U);
  // Sorted by path: card0, renderD128, kfd.
  const auto& e = set.entries();
  EXPECT_EQ(e[0].node.path, t.dev() + "/dri/card0");
  EXPECT_EQ(e[0].node.kind, proc::NodeKind::gpu);
  EXPECT_EQ(e[0].node.minor, 128U);  // the GPU's render minor
  EXPECT_EQ(e[0].node.fdinfo, &proc::read_amdgpu_fdinfo);
  EXPECT_EQ(e[1].node.path, t.dev() + "/dri/renderD128");
  EXPECT_EQ(e[1].node.minor, 128U);
  EXPECT_EQ(e[2].node.path, t.dev() + "/kfd");
  EXPECT_EQ(e[2].node.kind, proc::NodeKind::ctl);
  EXPECT_EQ(e[2].node.fdinfo, nullptr);
}

TEST(AmdSource, PlainFilesWithoutTheMarkerAreIgnoredWithAWarning) {
  AmdTree t;
  t.gpu(1, 51000, 0x03, 0, 128, 192 * GiB, 1 * GiB);
  t.plain_node("kfd");
  t.plain_node("dri/renderD128");
  proc::DeviceSet set = AmdSource(t.sys()).device_nodes(t.dev());
  EXPECT_TRUE(set.empty());
  EXPECT_EQ(set.warnings().size(), 2U);
}

}  // namespace
}  // namespace gpureap::gpu
