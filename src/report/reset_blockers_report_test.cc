// `status --blockers`' table and JSON: the exact lines a person reads, the keys a script does.

#include "report/reset_blockers_report.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"

namespace gpureap::report {
namespace {

namespace tv = inventory::testing;

inventory::Inventory node_of_two() {
  inventory::Inventory inv = tv::idle_node(2);
  for (auto& v : inv.gpus) {
    v.info.persistence_mode = false;
    v.info.pci_bus_id = "00000000:1" + std::to_string(v.info.id.index) + ":00.0";
  }
  tv::add_holder(inv.gpus[0], 4242, 2 * kGiB, tv::Lineage::live);
  inv.gpus[0].holders.back().holder.found_by.insert(proc::FoundBy::source);
  inv.gpus[0].holders.back().holder.cmdline = "python3 -m sglang.launch_server\x1b[31m";
  return inv;
}

TEST(BlockersReport, ABlockerIsItsClassProcessDevicesWhatAndNextStep) {
  const inventory::Inventory inv = node_of_two();
  const std::string text = blockers_table(inventory::find_reset_blockers(inv), inv, Style{});
  EXPECT_EQ(text,
            "GPU 0 (00000000:10:00.0): 1 blocker of a reset or MIG change\n"
            "  compute           pid 4242    me       python3 -m sglang.launch_server\\x1b[31m"
            "  on 0, 2.00 GiB\n"
            "                    holds memory or a context on GPU 0\n"
            "                    next: gpureap free --gpu 0\n"
            "Nothing blocks a reset or MIG change of GPU 1 (00000000:11:00.0).\n"
            "gpureap never changes GPU or MIG settings: each next step is yours to run "
            "(docs/mig.md, \"What blocks a MIG change or a reset\").\n");
}

// Seen on the H200: persistence mode's row had an empty first line, and the agent's next
// step ran past a 160-column terminal.
TEST(BlockersReport, PersistenceModeIsOneLineAndATerminalsWidthIsKept) {
  inventory::Inventory inv = node_of_two();
  inv.gpus[1].info.persistence_mode = true;
  const std::string text =
      blockers_table(inventory::find_reset_blockers(inv), inv, Style{}, TableWidth{60});
  EXPECT_NE(text.find("\n  persistence_mode  persistence mode is on"), std::string::npos) << text;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    EXPECT_LE(visible_width(std::string_view(text).substr(at, nl - at)), 60u) << text;
    at = nl + 1;
  }
  // A pipe's layout is never broken.
  const std::string piped = blockers_table(inventory::find_reset_blockers(inv), inv, Style{});
  EXPECT_NE(piped.find("(docs/mig.md, \"What blocks a MIG change or a reset\").\n"),
            std::string::npos);
}

TEST(BlockersReport, WhatCannotBeSeenIsSaidInsteadOfNothingBlocks) {
  inventory::Inventory inv = tv::idle_node(1);  // persistence mode unknown
  inv.problems.push_back({1, "memory maps unreadable (permission denied)"});
  const std::string text = blockers_table(inventory::find_reset_blockers(inv), inv, Style{});
  EXPECT_EQ(text,
            "GPU 0: no blocker seen, but cannot tell:\n"
            "  ! persistence mode is unknown (NVML did not say)\n"
            "! 1 process could not be inspected (pid 1: memory maps unreadable (permission "
            "denied)); clients among them may be missing.\n");
}

TEST(BlockersReport, JsonNamesEveryFieldAndNullsWhatAPersistenceBlockerLacks) {
  inventory::Inventory inv = node_of_two();
  inv.gpus[1].info.persistence_mode = true;
  const auto doc = blockers_json(inventory::find_reset_blockers(inv), inv);
  EXPECT_EQ(doc["command"], "status --blockers");
  ASSERT_EQ(doc["gpus"].size(), 2u);
  const auto& b = doc["gpus"][0]["blockers"][0];
  EXPECT_EQ(b["class"], "compute");
  EXPECT_EQ(b["pid"], 4242);
  EXPECT_EQ(b["devices"], nlohmann::ordered_json::array({0}));
  EXPECT_EQ(b["gpu_bytes"], 2 * kGiB);
  EXPECT_EQ(b["known_as"], nullptr);
  const auto& p = doc["gpus"][1]["blockers"][0];
  EXPECT_EQ(p["class"], "persistence_mode");
  EXPECT_EQ(p["pid"], nullptr);
  EXPECT_EQ(p["start_time"], nullptr);
  EXPECT_EQ(p["next_step"], "nvidia-smi -pm 0 -i 00000000:11:00.0");
  EXPECT_EQ(doc["gpus"][1]["blocked"], true);
  EXPECT_EQ(doc["source"], "scan");
  EXPECT_EQ(doc["agent_pid"], nullptr);
}

}  // namespace
}  // namespace gpureap::report
