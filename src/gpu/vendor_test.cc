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

}  // namespace
}  // namespace gpureap::gpu
