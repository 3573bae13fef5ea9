#include "gpu/vendor.h"

#include <gtest/gtest.h>

#include "gpu/amd_sysfs.h"

namespace gpureap::gpu {
namespace {

TEST(Vendor, FromTheUuidsForm) {
  EXPECT_EQ(vendor_of("GPU-256d5d71-7443-8924-ef21-14d992f490d8"), Vendor::nvidia);
  EXPECT_EQ(vendor_of(amd_uuid(0x437aa7577fc75e49ULL)), Vendor::amd);
  EXPECT_EQ(vendor_of("MIG-256d5d71-7443-8924-ef21-14d992f490d8"), Vendor::nvidia);
  EXPECT_EQ(vendor_of(""), Vendor::nvidia);
  EXPECT_EQ(vendor_of("GPU-437aa7577fc75e4g"), Vendor::nvidia);  // not hex
}

TEST(Vendor, Names) {
  EXPECT_EQ(enum_name(Vendor::nvidia), "nvidia");
  EXPECT_EQ(enum_name(Vendor::amd), "amd");
}

TEST(Vendor, DeviceNodePath) {
  GpuInfo g;
  EXPECT_EQ(device_node_path(g), "");
  g.minor = 3;
  g.uuid = "GPU-256d5d71-7443-8924-ef21-14d992f490d8";
  EXPECT_EQ(device_node_path(g), "/dev/nvidia3");
  g.minor = 128;
  g.uuid = amd_uuid(0x1001);
  EXPECT_EQ(device_node_path(g), "/dev/dri/renderD128");
}

TEST(Vendor, VisibleDevicesVariablesInTheOrderTheRuntimeHonoursThem) {
  auto names = [](std::span<const std::string_view> s) {
    return std::vector<std::string_view>(s.begin(), s.end());
  };
  EXPECT_EQ(names(visible_devices_variables(Vendor::nvidia)),
            (std::vector<std::string_view>{"CUDA_VISIBLE_DEVICES"}));
  EXPECT_EQ(names(visible_devices_variables(Vendor::amd)),
            (std::vector<std::string_view>{"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                           "CUDA_VISIBLE_DEVICES"}));
  EXPECT_EQ(all_visible_devices_variables(),
            (std::vector<std::string_view>{"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                           "HIP_VISIBLE_DEVICES"}));
}

TEST(Vendor, TheVendorsOwnWords) {
  EXPECT_EQ(smi_command(Vendor::nvidia), "nvidia-smi");
  EXPECT_EQ(smi_command(Vendor::amd), "amd-smi");
  EXPECT_EQ(driver_interface(Vendor::nvidia), "NVML");
  EXPECT_EQ(driver_interface(Vendor::amd), "amdgpu's sysfs");
  EXPECT_EQ(driver_errors(Vendor::nvidia), "Xid errors");
  EXPECT_EQ(driver_errors(Vendor::amd), "amdgpu errors");
}

}  // namespace
}  // namespace gpureap::gpu
