#include "proc/drm_fdinfo.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpureap::proc {
namespace {

std::string drm_fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/drm/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr std::uint64_t KiB = 1024;

TEST(DrmFdinfo, SizesTakeTheSpecsUnits) {
  EXPECT_EQ(parse_drm_size("0"), 0U);
  EXPECT_EQ(parse_drm_size("4096"), 4096U);
  EXPECT_EQ(parse_drm_size("192 KiB"), 192 * KiB);
  EXPECT_EQ(parse_drm_size("16 MiB"), 16 * KiB * KiB);
  EXPECT_EQ(parse_drm_size("16384 kB"), 16384 * KiB);  // amdgpu before 5.19
  EXPECT_FALSE(parse_drm_size("12 GB"));
  EXPECT_FALSE(parse_drm_size("-1"));
  EXPECT_FALSE(parse_drm_size("KiB"));
  EXPECT_FALSE(parse_drm_size("18446744073709551615 KiB"));  // overflows
}

TEST(DrmFdinfo, XeDocumentationExample) {
  DrmFdinfo info = parse_drm_fdinfo(drm_fixture("fdinfo_xe"));
  EXPECT_EQ(info.driver, "xe");
  EXPECT_EQ(info.pdev, "0000:03:00.0");
  EXPECT_EQ(info.client_id, 3U);
  EXPECT_EQ(info.memory.at("total-vram0"), 23992 * KiB);
  EXPECT_EQ(info.memory.at("shared-vram0"), 16 * KiB * KiB);
  EXPECT_EQ(info.memory.at("total-gtt"), 192 * KiB);
  EXPECT_FALSE(info.memory.contains("cycles-rcs"));  // not memory
  auto client = read_intel_fdinfo(drm_fixture("fdinfo_xe"));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->device_bytes, 23992 * KiB);  // drm-total-vram0, not resident or shared
  EXPECT_FALSE(read_amdgpu_fdinfo(drm_fixture("fdinfo_xe")));
}

TEST(DrmFdinfo, AmdgpuTakesTheStandardTotalKey) {
  auto client = read_amdgpu_fdinfo(drm_fixture("fdinfo_amdgpu_6x"));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->driver, "amdgpu");
  EXPECT_EQ(client->pdev, "0000:03:00.0");
  EXPECT_EQ(client->client_id, 12U);
  EXPECT_EQ(client->device_bytes, 117440512 * KiB);  // 112 GiB
}

TEST(DrmFdinfo, AmdgpuBeforeTheStandardKeysTakesMemoryVram) {
  auto client = read_amdgpu_fdinfo(drm_fixture("fdinfo_amdgpu_5_19"));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->client_id, 7U);
  EXPECT_EQ(client->device_bytes, 16384 * KiB);
}

TEST(DrmFdinfo, AmdgpuBeforeDrmPrefixesTakesVramMem) {
  auto client = read_amdgpu_fdinfo(drm_fixture("fdinfo_amdgpu_5_14"));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->driver, "amdgpu");
  EXPECT_EQ(client->pdev, "0000:03:00.0");
  EXPECT_FALSE(client->client_id);  // no client id before 5.19: de-duplication by fd only
  EXPECT_EQ(client->device_bytes, 16384 * KiB);
}

TEST(DrmFdinfo, I915IntegratedHasNoDeviceMemory) {
  auto client = read_intel_fdinfo(drm_fixture("fdinfo_i915"));
  ASSERT_TRUE(client);
  EXPECT_EQ(client->driver, "i915");
  EXPECT_EQ(client->client_id, 41U);
  EXPECT_EQ(client->device_bytes, 0U);
  EXPECT_FALSE(read_amdgpu_fdinfo(drm_fixture("fdinfo_i915")));
}

TEST(DrmFdinfo, AnotherFilesFdinfoIsNoClient) {
  EXPECT_TRUE(parse_drm_fdinfo(drm_fixture("fdinfo_regular_file")).driver.empty());
  EXPECT_FALSE(read_amdgpu_fdinfo(drm_fixture("fdinfo_regular_file")));
  EXPECT_FALSE(read_intel_fdinfo(drm_fixture("fdinfo_regular_file")));
  EXPECT_FALSE(read_amdgpu_fdinfo(""));
}

TEST(DrmFdinfo, MalformedLinesAreSkipped) {
  auto client = read_amdgpu_fdinfo(
      "drm-driver: amdgpu\ngarbage without colon\ndrm-client-id: x12\n"
      "drm-total-vram: lots\ndrm-memory-vram: 8 KiB\n");
  ASSERT_TRUE(client);
  EXPECT_FALSE(client->client_id);
  EXPECT_EQ(client->device_bytes, 8 * KiB);  // the unparsable total is left out
}

TEST(DrmFdinfo, PciAddressesCompareAsNumbers) {
  EXPECT_TRUE(same_pci_address("0000:03:00.0", "00000000:03:00.0"));
  EXPECT_TRUE(same_pci_address("0000:1a:00.0", "00000000:1A:00.0"));
  EXPECT_FALSE(same_pci_address("0000:03:00.0", "0000:03:00.1"));
  EXPECT_FALSE(same_pci_address("0001:03:00.0", "0000:03:00.0"));
  EXPECT_FALSE(same_pci_address("", ""));
  EXPECT_FALSE(same_pci_address("0000:03:00", "0000:03:00"));
}

}  // namespace
}  // namespace gpureap::proc
