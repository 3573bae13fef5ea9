#include "gpu/amd_sysfs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpureap::gpu {
namespace {

std::string amd_fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/amd/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(AmdSysfs, NumbersAsSysfsWritesThem) {
  EXPECT_EQ(parse_sysfs_uint("206158430208\n"), 206158430208U);
  EXPECT_EQ(parse_sysfs_uint("0x1f\n"), 31U);
  EXPECT_EQ(parse_sysfs_uint("0"), 0U);
  EXPECT_FALSE(parse_sysfs_uint(""));
  EXPECT_FALSE(parse_sysfs_uint("12 34"));
  EXPECT_FALSE(parse_sysfs_uint("-5"));
}

TEST(AmdSysfs, GpuNodeFromTopology) {
  auto gpu = parse_kfd_node(2, "49389\n", "gfx942\n", amd_fixture("kfd_properties_gpu"));
  ASSERT_TRUE(gpu);
  EXPECT_EQ(gpu->node, 2U);
  EXPECT_EQ(gpu->gpu_id, 49389U);
  EXPECT_EQ(gpu->name, "gfx942");
  EXPECT_EQ(gpu->render_minor, 136U);
  EXPECT_EQ(gpu->pci_address, "0000:0c:00.0");
  EXPECT_EQ(gpu->unique_id, 4862382741947637321ULL);
  EXPECT_EQ(amd_uuid(gpu->unique_id), "GPU-437aa7577fc75e49");
}

TEST(AmdSysfs, CpuNodeIsNoGpu) {
  EXPECT_FALSE(parse_kfd_node(0, "0\n", "\n", amd_fixture("kfd_properties_cpu")));
  EXPECT_FALSE(parse_kfd_node(0, "", "", ""));
}

TEST(AmdSysfs, GpuWithoutUniqueIdHasNoUuid) {
  auto gpu = parse_kfd_node(1, "7", "gfx1100", "location_id 768\ndomain 1\nunique_id 0\n");
  ASSERT_TRUE(gpu);
  EXPECT_FALSE(gpu->unique_id);
  EXPECT_FALSE(gpu->render_minor);
  EXPECT_EQ(gpu->pci_address, "0001:03:00.0");
  EXPECT_EQ(amd_uuid(gpu->unique_id), "");
}

TEST(AmdSysfs, PciAddressSplitsLocationId) {
  // bus 0x1a, device 2, function 1: 0x1a << 8 | 2 << 3 | 1.
  EXPECT_EQ(pci_address(0, (0x1a << 8) | (2 << 3) | 1), "0000:1a:02.1");
  EXPECT_EQ(pci_address(0x10, 0), "0010:00:00.0");
}

TEST(AmdSysfs, PropertiesSkipWhatIsNotANumber) {
  auto props = parse_kfd_properties("a 1\nbroken\nb x\n  c   3  \n");
  EXPECT_EQ(props.size(), 2U);
  EXPECT_EQ(props.at("a"), 1U);
  EXPECT_EQ(props.at("c"), 3U);
}

TEST(AmdSysfs, KfdProcessFiles) {
  EXPECT_EQ(vram_file_gpu_id("vram_49389"), 49389U);
  EXPECT_FALSE(vram_file_gpu_id("sdma_49389"));
  EXPECT_FALSE(vram_file_gpu_id("pasid"));
  EXPECT_FALSE(vram_file_gpu_id("vram_"));
  EXPECT_FALSE(vram_file_gpu_id("vram_0"));
  EXPECT_FALSE(vram_file_gpu_id("vram_12x"));
}

TEST(AmdSysfs, DrmNodeNames) {
  EXPECT_EQ(drm_node_number("renderD128", "renderD"), 128U);
  EXPECT_EQ(drm_node_number("card3", "card"), 3U);
  EXPECT_FALSE(drm_node_number("card0-DP-1", "card"));
  EXPECT_FALSE(drm_node_number("card", "card"));
  EXPECT_FALSE(drm_node_number("renderD128", "card"));
}

TEST(AmdSysfs, DevNumbers) {
  auto d = parse_dev_numbers("226:128\n");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->first, 226U);
  EXPECT_EQ(d->second, 128U);
  EXPECT_FALSE(parse_dev_numbers("226"));
  EXPECT_FALSE(parse_dev_numbers("a:b"));
}

}  // namespace
}  // namespace gpureap::gpu
