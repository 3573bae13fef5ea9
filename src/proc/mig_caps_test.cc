#include "proc/mig_caps.h"

#include <gtest/gtest.h>

namespace gpureap::proc {
namespace {

// The driver's file as an A100 with two GPU instances shows it (the config and
// monitor capabilities first, then each instance and its compute instances).
TEST(MigMinors, ParsesInstanceAndComputeInstanceCapabilities) {
  const auto map = parse_mig_minors(
      "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
      "gpu3/gi2/access 219\ngpu3/gi2/ci1/access 221\n");
  ASSERT_EQ(map.size(), 4u);
  EXPECT_EQ(map.at(12), (MigAccess{0, 1, std::nullopt}));
  EXPECT_EQ(map.at(13), (MigAccess{0, 1, 0u}));
  EXPECT_EQ(map.at(221), (MigAccess{3, 2, 1u}));
  EXPECT_FALSE(map.contains(1)) << "config is no MIG device's";
}

TEST(MigMinors, MalformedLinesAreSkippedNeverGuessed) {
  const auto map = parse_mig_minors(
      "gpu0/gi1/access\ngpu0/gi1/access x\ngpu0/gix/access 5\ngpu0/gi1/ci/access 6\n"
      "gpu0/gi1/ci0/access 7 8\ngpu0/gi1/ci0/accessX 9\n\ngpu1/gi4/ci0/access 40");
  ASSERT_EQ(map.size(), 1u);
  EXPECT_EQ(map.at(40), (MigAccess{1, 4, 0u}));
  EXPECT_TRUE(parse_mig_minors("").empty());
}

TEST(MigCapabilityPath, NamesTheMigDeviceOfAProcCapability) {
  EXPECT_EQ(mig_access_of_capability_path("/proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access"),
            (MigAccess{0, 1, 0u}));
  EXPECT_EQ(mig_access_of_capability_path("/proc/driver/nvidia/capabilities/gpu2/mig/gi7/access"),
            (MigAccess{2, 7, std::nullopt}));
  EXPECT_EQ(mig_access_of_capability_path("/proc/driver/nvidia/capabilities/mig/config"),
            std::nullopt);
  EXPECT_EQ(mig_access_of_capability_path("/dev/nvidia-caps/nvidia-cap12"), std::nullopt);
}

}  // namespace
}  // namespace gpureap::proc
