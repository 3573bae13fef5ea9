// The fleet checks' rule (issue 27): what counts as a problem, what as "cannot tell",
// and that everything else, a busy node included, is clean.

#include "inventory/node_check.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"

namespace gpureap::inventory {
namespace {

namespace tv = testing;
using tv::Lineage;
using Found = std::vector<std::pair<Finding, std::vector<gpu::DeviceId>>>;

TEST(NodeCheck, IdleAndBusyNodesAreClean) {
  Inventory inv = tv::idle_node(8);
  EXPECT_EQ(check_node(inv).verdict(), Verdict::clean);
  EXPECT_EQ(check_node(inv).gpus, 8u);
  // A server and its workers at work (live parents), a nohup'd server whose shell is gone
  // (detached), memory a killed holder's driver is still releasing: healthy all.
  tv::add_holder(inv.gpus[0], 100, 70 * kGiB, Lineage::live);
  tv::add_holder(inv.gpus[1], 101, 70 * kGiB, Lineage::detached);
  tv::add_unexplained(inv.gpus[2], 20 * kGiB, Unexplained::releasing);
  ASSERT_EQ(gpu_state(inv.gpus[0]), GpuState::held);
  ASSERT_EQ(gpu_state(inv.gpus[2]), GpuState::releasing);
  const NodeCheck check = check_node(inv);
  EXPECT_EQ(check.verdict(), Verdict::clean);
  EXPECT_TRUE(check.found.empty());
  EXPECT_EQ(check.gpus, 8u);
}

TEST(NodeCheck, OrphansAreAProblemOnTheGpusTheyUse) {
  Inventory inv = tv::idle_node(8);
  tv::add_holder(inv.gpus[5], 105, 20 * kGiB, Lineage::orphaned);
  tv::add_holder(inv.gpus[3], 103, 20 * kGiB, Lineage::orphaned);
  tv::add_holder(inv.gpus[3], 113, 1 * kGiB, Lineage::live);
  // An orphan that only has GPU 6's node open (its memory is on GPU 5) does not make
  // GPU 6 a problem.
  tv::add_holder(inv.gpus[6], 105, 0, Lineage::orphaned, /*uses_gpu=*/false);
  const NodeCheck check = check_node(inv);
  EXPECT_EQ(check.verdict(), Verdict::problem);
  EXPECT_EQ(check.found, (Found{{Finding::orphaned_memory, gpu::devs({3, 5})}}));
}

TEST(NodeCheck, EachStateOfTheGpuStateRuleHasItsFinding) {
  Inventory inv = tv::idle_node(6);
  tv::add_unexplained(inv.gpus[0], 30 * kGiB, Unexplained::driver_held);
  tv::make_ghost(inv.gpus[1]);
  tv::make_unreadable(inv.gpus[2]);
  tv::add_unexplained(inv.gpus[3], 30 * kGiB, Unexplained::outside_namespace);
  tv::add_unexplained(inv.gpus[4], 30 * kGiB, Unexplained::unknown);
  const NodeCheck check = check_node(inv);
  EXPECT_EQ(check.found, (Found{{Finding::driver_held, gpu::devs({0})},
                                {Finding::ghost, gpu::devs({1})},
                                {Finding::not_measured, gpu::devs({2})},
                                {Finding::outside_namespace, gpu::devs({3})},
                                {Finding::unattributed, gpu::devs({4})}}));
  EXPECT_EQ(check.verdict(), Verdict::problem) << "a leak found outweighs what is unknown";
  EXPECT_TRUE(is_problem(Finding::driver_held) && is_problem(Finding::ghost));
  EXPECT_FALSE(is_problem(Finding::not_measured) || is_problem(Finding::outside_namespace) ||
               is_problem(Finding::unattributed));
}

TEST(NodeCheck, WhatCannotBeToldIsUnknownNeverClean) {
  Inventory inv = tv::idle_node(2);
  tv::add_unexplained(inv.gpus[1], 30 * kGiB, Unexplained::outside_namespace);
  EXPECT_EQ(check_node(inv).verdict(), Verdict::unknown);

  Inventory lost = tv::idle_node(2);
  tv::make_unreadable(lost.gpus[0]);
  lost.source_state = gpu::SourceState::partial;
  EXPECT_EQ(check_node(lost).verdict(), Verdict::unknown);
  // An orphan /proc shows on the GPU NVML cannot read is a problem all the same.
  tv::add_holder(lost.gpus[0], 200, 0, Lineage::orphaned);
  lost.gpus[0].holders[0].gpu_bytes.reset();
  EXPECT_EQ(check_node(lost).verdict(), Verdict::problem);
  EXPECT_EQ(check_node(lost).found,
            (Found{{Finding::orphaned_memory, gpu::devs({0})}, {Finding::not_measured, gpu::devs({0})}}));
}

// W3-13: NVML unusable as a whole (a driver reload, a hang). The views are the device
// nodes /proc shows (named by minor), without memory: what they cannot tell is said once
// (source_unusable), and an orphan there is a problem by its process, as on a GPU NVML alone
// cannot read.
TEST(NodeCheck, W3_13_UnusableNvmlStillJudgesTheOrphansProcShows) {
  Inventory inv = tv::idle_node(3);
  inv.source_state = gpu::SourceState::init_failed;
  for (auto& v : inv.gpus) v.info.memory.reset();
  tv::add_holder(inv.gpus[1], 300, 0, Lineage::orphaned);
  tv::add_holder(inv.gpus[2], 301, 0, Lineage::orphaned);
  tv::add_holder(inv.gpus[0], 302, 0, Lineage::live);
  const NodeCheck check = check_node(inv);
  EXPECT_EQ(check.verdict(), Verdict::problem);
  EXPECT_EQ(check.source_unusable, gpu::SourceState::init_failed);
  EXPECT_EQ(check.found, (Found{{Finding::orphaned_memory, gpu::devs({1, 2})}}));
  EXPECT_EQ(check.gpus, 0u) << "N counts the GPUs NVML lists";

  // No orphan: nothing can be told, never clean.
  Inventory quiet = tv::idle_node(2);
  quiet.source_state = gpu::SourceState::hung;
  for (auto& v : quiet.gpus) v.info.memory.reset();
  tv::add_holder(quiet.gpus[0], 303, 0, Lineage::detached);
  EXPECT_EQ(check_node(quiet).verdict(), Verdict::unknown);
  EXPECT_TRUE(check_node(quiet).found.empty());
}

TEST(NodeCheck, NoGpuIsCleanWhenNvmlSaysSo) {
  EXPECT_EQ(check_node(Inventory{}).verdict(), Verdict::clean);
}

}  // namespace
}  // namespace gpureap::inventory

namespace gpureap::inventory {
namespace {

// Issue 35: memory no process holds that a look could not yet tell from a slow release
// (no_holder) is "cannot tell", never a problem; once the release model calls it
// driver-held (flat past the budget), it is.
TEST(NodeCheck, MemoryNoProcessHoldsIsUnknownUntilTheModelCallsItDriverHeld) {
  Inventory inv = testing::idle_node(3);
  testing::add_unexplained(inv.gpus[2], 30 * kGiB, Unexplained::no_holder);
  testing::add_unexplained(inv.gpus[1], 30 * kGiB, Unexplained::releasing);
  NodeCheck check = check_node(inv);
  EXPECT_EQ(check.verdict(), Verdict::unknown);
  EXPECT_EQ(check.found,
            (std::vector<std::pair<Finding, std::vector<gpu::DeviceId>>>{
                {Finding::no_holder, gpu::devs({2})}}));
  inv.gpus[2].unexplained = Unexplained::driver_held;
  EXPECT_EQ(check_node(inv).verdict(), Verdict::problem);
}

}  // namespace
}  // namespace gpureap::inventory
