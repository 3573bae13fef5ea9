// `status --summary`'s line for each state (issue 27): the exact bytes, since fleets
// fold, match and truncate them (clush -b, node-problem-detector, NHC, NVSentinel).

#include "report/summary.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"

namespace gpureap::report {
namespace {

namespace tv = inventory::testing;
using tv::Lineage;
using inventory::Unexplained;

std::string line_of(const inventory::Inventory& inv) {
  return summary_line(inventory::check_node(inv));
}

TEST(Summary, EveryHealthyNodeOfAKindPrintsTheSameBytes) {
  inventory::Inventory idle = tv::idle_node(8);
  inventory::Inventory busy = tv::idle_node(8);
  // What varies between healthy nodes: holders, their pids and bytes, their lineage,
  // baselines, recorded or not, and who answered.
  for (unsigned i = 0; i < 8; ++i)
    tv::add_holder(busy.gpus[i], static_cast<pid_t>(4000 + i), (10 + i) * kGiB,
               i == 0 ? Lineage::detached : Lineage::live);
  busy.gpus[3].baseline = {700 * kMiB, false};
  busy.source = "agent";
  busy.agent_pid = 77;
  busy.warnings.push_back("a warning");
  EXPECT_EQ(line_of(idle), "clean: 8 GPUs, no leak");
  EXPECT_EQ(line_of(busy), line_of(idle));
  EXPECT_EQ(line_of(tv::idle_node(1)), "clean: 1 GPU, no leak");
  EXPECT_EQ(line_of(inventory::Inventory{}), "clean: 0 GPUs, no leak");
}

// Issue 53 #12: a release in progress is no leak (still clean, exit 0), but the line does
// not read as an idle node while GPU 3 still has 92 GiB releasing.
TEST(Summary, CleanSaysWhatIsStillReleasing) {
  inventory::Inventory inv = tv::idle_node(8);
  tv::add_unexplained(inv.gpus[3], 40 * kGiB, Unexplained::releasing);
  const auto check = inventory::check_node(inv);
  EXPECT_EQ(check.verdict(), inventory::Verdict::clean);
  EXPECT_EQ(summary_line(check), "clean: 8 GPUs, no leak; memory still releasing on GPU 3");
}

TEST(Summary, EachProblemClassHasItsPhrase) {
  inventory::Inventory orphans = tv::idle_node(8);
  tv::add_holder(orphans.gpus[5], 105, 20 * kGiB, Lineage::orphaned);
  tv::add_holder(orphans.gpus[3], 103, 30 * kGiB, Lineage::orphaned);
  EXPECT_EQ(line_of(orphans), "problem: orphaned memory on GPU 3,5");

  inventory::Inventory stuck = tv::idle_node(8);
  tv::add_unexplained(stuck.gpus[2], 40 * kGiB, Unexplained::driver_held);
  EXPECT_EQ(line_of(stuck), "problem: driver-held memory on GPU 2");

  inventory::Inventory ghost = tv::idle_node(8);
  tv::make_ghost(ghost.gpus[1]);
  EXPECT_EQ(line_of(ghost), "problem: ghost GPU 1");
}

TEST(Summary, ProblemsComeFirstThenWhatCouldNotBeTold) {
  inventory::Inventory inv = tv::idle_node(8);
  tv::add_holder(inv.gpus[7], 107, 20 * kGiB, Lineage::orphaned);
  tv::make_ghost(inv.gpus[1]);
  tv::add_unexplained(inv.gpus[0], 40 * kGiB, Unexplained::driver_held);
  tv::make_unreadable(inv.gpus[4]);
  inv.source_state = gpu::SourceState::partial;
  EXPECT_EQ(line_of(inv),
            "problem: orphaned memory on GPU 7; driver-held memory on GPU 0; ghost GPU 1; "
            "unknown: NVML cannot read GPU 4");
}

TEST(Summary, EachUnknownHasItsPhrase) {
  inventory::Inventory lost = tv::idle_node(8);
  tv::make_unreadable(lost.gpus[4]);
  lost.source_state = gpu::SourceState::partial;
  EXPECT_EQ(line_of(lost), "unknown: NVML cannot read GPU 4");

  inventory::Inventory hidden = tv::idle_node(8);
  tv::add_unexplained(hidden.gpus[0], 40 * kGiB, Unexplained::outside_namespace);
  tv::add_unexplained(hidden.gpus[6], 40 * kGiB, Unexplained::unknown);
  EXPECT_EQ(line_of(hidden),
            "unknown: holders outside this namespace on GPU 0; unattributed memory on GPU 6");

  for (auto state : {gpu::SourceState::library_missing, gpu::SourceState::init_failed,
                     gpu::SourceState::query_failed, gpu::SourceState::hung}) {
    inventory::Inventory down;
    down.source_state = state;
    down.source_problem = "varies: a path, a pid, a duration";
    EXPECT_EQ(line_of(down), "unknown: NVML unusable (" + std::string(gpu::enum_name(state)) + ")");
  }
  // W3-13: the orphans /proc shows while NVML is down are a problem by their processes.
  inventory::Inventory orphans = tv::idle_node(3);
  orphans.source_state = gpu::SourceState::init_failed;
  for (auto& v : orphans.gpus) v.info.memory.reset();
  tv::add_holder(orphans.gpus[1], 300, 0, Lineage::orphaned);
  tv::add_holder(orphans.gpus[2], 301, 0, Lineage::orphaned);
  EXPECT_EQ(line_of(orphans),
            "problem: orphaned memory on GPU 1,2; unknown: NVML unusable (init_failed)");
  EXPECT_EQ(summary_devices_unreadable(), "unknown: device directory unreadable");
  EXPECT_EQ(summary_unanswered("5s"), "unknown: no answer within 5s");
}

TEST(Summary, AFullEightGpuNodeStaysWithinWhatNodeProblemDetectorKeeps) {
  // node-problem-detector keeps 80 bytes of a plugin's output (max_output_length).
  inventory::Inventory inv = tv::idle_node(8);
  for (unsigned i = 0; i < 8; i += 2)
    tv::add_holder(inv.gpus[i], static_cast<pid_t>(100 + i), 20 * kGiB, Lineage::orphaned);
  for (unsigned i = 1; i < 8; i += 2) tv::add_unexplained(inv.gpus[i], 40 * kGiB, Unexplained::driver_held);
  const std::string line = line_of(inv);
  EXPECT_EQ(line, "problem: orphaned memory on GPU 0,2,4,6; driver-held memory on GPU 1,3,5,7");
  EXPECT_LE(line.size(), 80u);
  for (const auto& l : {line_of(tv::idle_node(8)), summary_unanswered("10s"),
                        summary_devices_unreadable()})
    EXPECT_LE(l.size(), 80u) << l;
}

}  // namespace
}  // namespace gpureap::report
