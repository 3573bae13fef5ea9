// What `run --replace` / `--replace-orphans` / `--free-first` say: here, the command that
// shows the plan a refusal asks a person to confirm.

#include "report/replace_report.h"

#include <gtest/gtest.h>

#include "gpu/test_devices.h"

namespace gpureap::report {
namespace {

using supervise::ReplaceMode;

// ux-wave5-review #12: the refusal said `(the plan: gpureap free --dry-run)`, which plans
// every GPU's holders, not the selection the replacement would free.
TEST(PlanCommand, NamesTheSelectionTheReplacementWouldFree) {
  EXPECT_EQ(plan_command(ReplaceMode::replace, "9909", gpu::devs({0, 1, 2, 3})),
            "gpureap free --instance 9909 --dry-run");
  EXPECT_EQ(plan_command(ReplaceMode::replace_orphans, "", gpu::devs({4, 5})),
            "gpureap free --orphans --gpu 4,5 --dry-run");
  EXPECT_EQ(plan_command(ReplaceMode::free_first, "", gpu::devs({6})),
            "gpureap free --gpu 6 --dry-run");
  EXPECT_EQ(plan_command(ReplaceMode::free_first, "", {}), "gpureap free --all --dry-run");
  EXPECT_EQ(plan_command(ReplaceMode::replace, "srv\x1b[2J", {}),
            "gpureap free --instance srv\\x1b[2J --dry-run");
}

}  // namespace
}  // namespace gpureap::report
