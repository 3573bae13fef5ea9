#include "gpu/mig.h"

#include <gtest/gtest.h>

#include "gpu/gpu_select.h"

namespace gpureap::gpu {
namespace {

GpuInfo mig_test_device(unsigned index, unsigned gi, unsigned ci, std::string uuid) {
  GpuInfo d;
  d.id = DeviceId{index, gi, ci};
  d.uuid = std::move(uuid);
  d.minor = index;
  return d;
}

// GPU 0 in MIG mode with two MIG devices (listed out of order), GPU 1 whole, GPU 2
// in MIG mode with none created.
std::vector<GpuInfo> mig_node() {
  GpuInfo g0;
  g0.id = DeviceId{0};
  g0.mig_mode = true;
  g0.mig_devices = {mig_test_device(0, 2, 0, "MIG-bbbb2222"), mig_test_device(0, 1, 0, "MIG-aaaa1111")};
  GpuInfo g1;
  g1.id = DeviceId{1};
  g1.uuid = "GPU-1111";
  GpuInfo g2;
  g2.id = DeviceId{2};
  g2.mig_mode = true;
  std::vector<GpuInfo> gpus{g0, g1, g2};
  flatten_mig(gpus);
  return gpus;
}

TEST(FlattenMig, EachMigDeviceTakesItsGpusPlace) {
  const auto gpus = mig_node();
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(device_text(gpus[0].id), "0/gi1/ci0");
  EXPECT_EQ(device_text(gpus[1].id), "0/gi2/ci0");
  EXPECT_EQ(device_text(gpus[2].id), "1");
  EXPECT_EQ(device_text(gpus[3].id), "2") << "MIG mode without MIG devices: kept as it is";
  EXPECT_EQ(gpus[0].id.parent(), DeviceId{0});
}

TEST(FlattenMig, ReadingsToo) {
  MemoryReading r;
  r.id = DeviceId{0};
  MemoryReading a;
  a.id = DeviceId{0, 1u, 0u};
  a.used = 5;
  r.mig = {a};
  std::vector<MemoryReading> readings{r};
  flatten_mig(readings);
  ASSERT_EQ(readings.size(), 1u);
  EXPECT_EQ(readings[0].id, (DeviceId{0, 1u, 0u}));
  EXPECT_EQ(readings[0].used, 5u);
}

TEST(MigSelector, EveryFormNamesTheMigDevicesItShould) {
  const auto gpus = mig_node();
  auto sel = [&](std::string_view spec) -> std::string {
    auto ids = select_gpus(spec, gpus);
    return ids ? device_list(*ids) : "error: " + ids.error().message;
  };
  EXPECT_EQ(sel("0/gi1/ci0"), "0/gi1/ci0");
  EXPECT_EQ(sel("0/gi2"), "0/gi2/ci0");
  EXPECT_EQ(sel("0:1"), "0/gi1/ci0") << "nvidia-smi's GPU:GPU-instance";
  EXPECT_EQ(sel("MIG-aaaa"), "0/gi1/ci0");
  EXPECT_EQ(sel("mig-BBBB2222"), "0/gi2/ci0");
  EXPECT_EQ(sel("0"), "0/gi1/ci0,0/gi2/ci0") << "the GPU is all its MIG devices";
  EXPECT_EQ(sel("0-1"), "0/gi1/ci0,0/gi2/ci0,1");
  EXPECT_EQ(sel("all"), "0/gi1/ci0,0/gi2/ci0,1,2");
  EXPECT_NE(sel("0/gi3").find("no GPU has this MIG device"), std::string::npos) << sel("0/gi3");
  EXPECT_NE(sel("0/gi1/cx").find("expected a MIG device"), std::string::npos) << sel("0/gi1/cx");
  EXPECT_NE(sel("0/gi1/ci0/x").find("expected a MIG device"), std::string::npos);
  EXPECT_NE(sel("MIG-a").find("UUID prefix too short"), std::string::npos) << sel("MIG-a");
}

TEST(MigSelector, CudaElevensMigGpuFormNamesTheMigDeviceByItsGpusUuid) {
  auto gpus = mig_node();
  for (auto& g : gpus)
    if (g.id.gi) g.parent_uuid = "GPU-0000feed-aaaa";
  auto sel = [&](std::string_view spec) -> std::string {
    auto ids = select_gpus(spec, gpus);
    return ids ? device_list(*ids) : "error: " + ids.error().message;
  };
  EXPECT_EQ(sel("MIG-GPU-0000feed-aaaa/2/0"), "0/gi2/ci0");
  EXPECT_EQ(sel("mig-gpu-0000FEED-aaaa/1/0"), "0/gi1/ci0");
  EXPECT_NE(sel("MIG-GPU-0000feed-aaaa/3/0").find("no GPU has this MIG device"), std::string::npos);
  EXPECT_NE(sel("MIG-GPU-0000feed-bbbb/1/0").find("no GPU has"), std::string::npos)
      << "another GPU's UUID";
  EXPECT_NE(sel("MIG-GPU-0000feed-aaaa/1").find("expected MIG-GPU-"), std::string::npos);
  EXPECT_NE(sel("MIG-GPU-0000feed-aaaa/x/0").find("expected MIG-GPU-"), std::string::npos);
}

// Slurm's MIG GRES names a MIG device by files (MultipleFiles=/dev/nvidia0,
// /dev/nvidia-caps/nvidia-cap21,...): a capability node is the MIG device the driver's
// mig-minors table says it gives access to; a GPU instance's capability, all its compute
// instances; a minor the table lacks, or a malformed node, is an error naming it.
TEST(MigSelector, ACapabilityNodeNamesTheMigDeviceTheTableMapsItTo) {
  const auto gpus = mig_node();
  const auto table =
      proc::parse_mig_minors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
                             "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu3/gi1/access 30\n");
  auto sel = [&](std::string_view spec) -> std::string {
    auto parsed = GpuSelector::parse(spec);
    if (!parsed) return "error: " + parsed.error().message;
    EXPECT_TRUE(parsed->names_capabilities()) << spec;
    auto ids = parsed->resolve(gpus, table);
    return ids ? device_list(*ids) : "error: " + ids.error().message;
  };
  EXPECT_EQ(sel("/dev/nvidia-caps/nvidia-cap13"), "0/gi1/ci0");
  EXPECT_EQ(sel("/dev/nvidia-caps/nvidia-cap21"), "0/gi2/ci0");
  EXPECT_EQ(sel("/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap22"),
            "0/gi1/ci0,0/gi2/ci0");
  EXPECT_NE(sel("/dev/nvidia-caps/nvidia-cap1").find("names no MIG device"), std::string::npos)
      << "config: no MIG device's";
  EXPECT_NE(sel("/dev/nvidia-caps/nvidia-cap99").find("names no MIG device"), std::string::npos);
  EXPECT_NE(sel("/dev/nvidia-caps/nvidia-cap30").find("no GPU has"), std::string::npos)
      << "a MIG device NVML does not list";
  EXPECT_NE(sel("/dev/nvidia-caps/nvidia-capx").find("expected a MIG capability node"),
            std::string::npos);
  EXPECT_FALSE(GpuSelector::parse("/dev/nvidia0")->names_capabilities());
}

TEST(MigProfile, IsWhatTheNameSaysAfterMig) {
  GpuInfo d = mig_test_device(0, 1, 0, "MIG-aaaa1111");
  d.name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb";
  EXPECT_EQ(mig_profile(d), "1g.5gb");
  d.name = "NVIDIA A100-SXM4-40GB";
  EXPECT_EQ(mig_profile(d), "") << "no profile in the name: none made up";
  GpuInfo whole;
  whole.name = "NVIDIA H200 MIG 1g.18gb";
  EXPECT_EQ(mig_profile(whole), "") << "a whole GPU has no profile";
}

TEST(MigGrants, ACapabilityGrantsItsOwnInstanceOnly) {
  const DeviceId d{0, 1u, 0u};
  EXPECT_TRUE(grants(proc::MigAccess{0, 1, 0u}, 0, d));
  EXPECT_TRUE(grants(proc::MigAccess{0, 1, std::nullopt}, 0, d)) << "the GPU instance's own";
  EXPECT_FALSE(grants(proc::MigAccess{0, 2, 0u}, 0, d));
  EXPECT_FALSE(grants(proc::MigAccess{0, 1, 1u}, 0, d));
  EXPECT_FALSE(grants(proc::MigAccess{1, 1, 0u}, 0, d)) << "another GPU's minor";
  EXPECT_FALSE(grants(proc::MigAccess{0, 1, 0u}, 0, DeviceId{0})) << "a whole GPU";
}

// CI-level sharing: 0/gi1/ci0 and 0/gi1/ci1 share the GPU instance's capability; a
// process is on the compute instance whose capability it holds, never on its sibling.
TEST(MigUses, TheSharedGpuInstanceCapabilityDoesNotPutAProcessOnEveryComputeInstance) {
  const DeviceId ci0{0, 1u, 0u}, ci1{0, 1u, 1u}, other_gi{0, 2u, 0u};
  const std::set<proc::MigAccess> on_ci1 = {{0, 1, std::nullopt}, {0, 1, 1u}};
  EXPECT_TRUE(uses_mig_device(on_ci1, 0, ci1));
  EXPECT_FALSE(uses_mig_device(on_ci1, 0, ci0)) << "its GI capability is ci0's too";
  EXPECT_FALSE(uses_mig_device(on_ci1, 0, other_gi));
  EXPECT_FALSE(uses_mig_device(on_ci1, 1, ci1)) << "another GPU's minor";
  const std::set<proc::MigAccess> gi_only = {{0, 1, std::nullopt}};
  EXPECT_TRUE(uses_mig_device(gi_only, 0, ci0)) << "no CI chosen yet: either";
  EXPECT_TRUE(uses_mig_device(gi_only, 0, ci1));
  const std::set<proc::MigAccess> both = {{0, 1, std::nullopt}, {0, 1, 0u}, {0, 1, 1u}};
  EXPECT_TRUE(uses_mig_device(both, 0, ci0));
  EXPECT_TRUE(uses_mig_device(both, 0, ci1));
  EXPECT_FALSE(uses_mig_device({}, 0, ci0));
  EXPECT_FALSE(uses_mig_device(on_ci1, 0, DeviceId{0})) << "a whole GPU";
}

}  // namespace
}  // namespace gpureap::gpu
