// Run cgroup names.

#include "supervise/run_cgroup.h"

#include <gtest/gtest.h>

namespace gpureap::supervise {
namespace {

TEST(RunCgroup, RunNamesCarryTheOwnerPid) {
  EXPECT_EQ(run_cgroup_owner("gpureap-run-sglang-4242"), 4242);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-my-server-17"), 17);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-4242"), std::nullopt);
  EXPECT_EQ(run_cgroup_owner("docker-4242"), std::nullopt);
  EXPECT_EQ(run_cgroup_owner("gpureap-run-x-abc"), std::nullopt);
}

}  // namespace
}  // namespace gpureap::supervise
