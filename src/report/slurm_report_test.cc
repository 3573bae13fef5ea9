// The drain reason Slurm shows, and the slurm commands' JSON.

#include "report/slurm_report.h"
#include "util/units.h"
#include "gpu/test_devices.h"

#include <gtest/gtest.h>

namespace gpureap::report {
namespace {

using reclaim::LeftoverClass;

TEST(DrainReason, NamesGpuClassAndBytes) {
  EXPECT_EQ(drain_reason({{gpu::dev(3), 12 * kGiB, {LeftoverClass::driver_held}, {}}}, "", ""),
            "gpureap: GPU 3 driver_held 12.0 GiB");
  EXPECT_EQ(
      drain_reason(
          {{gpu::dev(0), 4 * kGiB, {LeftoverClass::live_holder, LeftoverClass::driver_held}, {123, 456}},
           {gpu::dev(1), 2 * kGiB, {LeftoverClass::exiting_in_driver}, {789}}},
          "", "after job 42"),
      "gpureap: GPU 0 live_holder+driver_held 4.00 GiB pids 123,456; GPU 1 "
      "exiting_in_driver 2.00 GiB pid 789 (after job 42)");
  EXPECT_EQ(drain_reason({}, "NVML is unusable", "before job 43"),
            "gpureap: GPUs not verified (before job 43): NVML is unusable");
}

TEST(DrainReason, PrintableAndBounded) {
  auto r = drain_reason({}, "bad\nline\x1b[31m caf\xc3\xa9", "");
  EXPECT_EQ(r, "gpureap: GPUs not verified: bad?line?[31m caf??");
  std::vector<cluster::HeldGpu> many;
  for (unsigned i = 0; i < 64; ++i) many.push_back({gpu::DeviceId{i}, kGiB, {LeftoverClass::driver_held}, {}});
  auto long_reason = drain_reason(many, "", "after job 1");
  EXPECT_EQ(long_reason.size(), 250u);
  EXPECT_TRUE(long_reason.starts_with("gpureap: GPU 0 driver_held"));
  EXPECT_TRUE(long_reason.ends_with("..."));
}

TEST(SlurmJson, TheEpilogDocument) {
  cluster::SlurmJob job{"42", {"minor:0"}, {}};
  cluster::JobCheck check;
  check.job_gpus = gpu::devs({1});
  check.checked = gpu::devs({1});
  check.held = {{gpu::dev(1), 12 * kGiB, {LeftoverClass::driver_held}, {}}};
  NodeOutcome node{"gpu01", NodeStep::drained, "gpureap: GPU 1 driver_held 12.0 GiB (after job 42)",
                   ""};
  auto j = slurm_job_json("epilog", job, check, node);
  EXPECT_EQ(j["command"], "slurm epilog");
  EXPECT_EQ(j["job_id"], "42");
  EXPECT_TRUE(j["free"].is_null());
  EXPECT_EQ(j["held"][0]["classes"][0], "driver_held");
  EXPECT_EQ(j["held"][0]["bytes"], 12 * kGiB);
  EXPECT_EQ(j["node"]["action"], "drained");
  EXPECT_EQ(j["node"]["reason"], node.reason);
  EXPECT_TRUE(j["node"]["error"].is_null());
}

}  // namespace
}  // namespace gpureap::report
