// The one free flow (free_flow.h) on the simulated machine: every verdict, and that
// nothing is signalled unless the flow reaches its go-ahead and the go-ahead says yes.

#include "reclaim/free_flow.h"

#include <gtest/gtest.h>

#include "reclaim/test_machine.h"
#include "gpu/test_devices.h"

namespace gpureap::reclaim {
namespace {

using testing::FakeProc;
using testing::kGiB;
using testing::TestMachine;

FakeProc flow_holder(pid_t pid, unsigned gpu) {
  FakeProc p;
  p.pid = pid;
  p.ppid = 1;
  p.gpu = gpu;
  p.bytes = 8 * kGiB;
  p.cmdline = "python3 -m sglang.launch_server";
  return p;
}

FreeOutcome run_flow(TestMachine& m, std::vector<gpu::DeviceId> gpus, const FreeSteps& steps = {}) {
  ReclaimOptions options;
  options.selection.gpus = std::move(gpus);
  auto inv = m.node().look();
  return free_selection(m.node(), m.audited(), inv, CallerContext::current(m.node().proc_root()),
                        options, steps);
}

TEST(FreeFlow, AnIdleGpuIsNothingToDoAndNothingIsAsked) {
  TestMachine m;
  bool asked = false;
  FreeSteps steps;
  steps.go_ahead = [&](const Plan&) { return asked = true; };
  auto out = run_flow(m, gpu::devs({0}), steps);
  EXPECT_EQ(out.verdict, FreeVerdict::nothing_idle);
  EXPECT_FALSE(asked);
  EXPECT_FALSE(out.report);
}

TEST(FreeFlow, AGoAheadThatSaysNoSignalsNothing) {
  TestMachine m;
  auto id = m.spawn(flow_holder(3100101, 0));
  FreeSteps steps;
  std::size_t planned = 0;
  steps.go_ahead = [&](const Plan& p) {
    planned = p.targets.size();
    return false;
  };
  auto out = run_flow(m, gpu::devs({0}), steps);
  EXPECT_EQ(out.verdict, FreeVerdict::stopped);
  EXPECT_EQ(planned, 1u);
  EXPECT_TRUE(m.control.signals_of(id).empty());
  EXPECT_FALSE(out.report);
}

TEST(FreeFlow, AHolderIsFreedAndVerified) {
  TestMachine m;
  auto id = m.spawn(flow_holder(3100201, 1));
  auto out = run_flow(m, gpu::devs({1}));
  EXPECT_EQ(out.verdict, FreeVerdict::freed);
  ASSERT_TRUE(out.report);
  EXPECT_TRUE(out.report->all_freed());
  EXPECT_FALSE(m.control.signals_of(id).empty());
}

TEST(FreeFlow, TheAmendedPlanIsTheOneJudgedAndActedOn) {
  TestMachine m;
  auto id = m.spawn(flow_holder(3100301, 1));
  FreeSteps steps;
  bool asked = false;
  steps.amend = [](Plan& p) { p.targets.clear(); };  // the caller's own rule drops it
  steps.go_ahead = [&](const Plan&) { return asked = true; };
  auto out = run_flow(m, gpu::devs({1}), steps);
  EXPECT_TRUE(out.plan.targets.empty());
  EXPECT_EQ(out.verdict, FreeVerdict::nothing_matched);
  EXPECT_FALSE(asked);
  EXPECT_TRUE(m.control.signals_of(id).empty());
}

TEST(FreeFlow, AGpuThatCannotBeMeasuredIsNeverNothingToDo) {
  TestMachine m;
  m.nvml().set_gpu_failure(gpu::dev(0), "GPU is lost");
  auto out = run_flow(m, gpu::devs({0}));
  EXPECT_EQ(out.verdict, FreeVerdict::not_measured);
  EXPECT_EQ(out.unreadable, gpu::devs({0}));
}

TEST(FreeFlow, AGhostGpuIsNotNothingToDo) {
  TestMachine m;
  m.gpu(0).utilization_gpu = 100;  // busy, no process
  auto out = run_flow(m, gpu::devs({0}));
  EXPECT_NE(out.verdict, FreeVerdict::nothing_idle);
  EXPECT_NE(out.verdict, FreeVerdict::nothing_matched);
  ASSERT_TRUE(out.report);
  EXPECT_EQ(out.verdict, FreeVerdict::still_held);
}

}  // namespace
}  // namespace gpureap::reclaim
