// What free says of memory still held after it: each next step a whole command.

#include "reclaim/leftovers.h"

#include <gtest/gtest.h>

#include "gpu/test_devices.h"

namespace gpureap::reclaim {
namespace {

// ux-wave5-review #12: a holder the selection left alone was answered "widen it (e.g.
// --pid N)", half a command; a protected one named its GPU through the DeviceId's own
// formatting. Each is now a command a person can paste.
TEST(Leftovers, AHolderLeftAloneIsAnsweredWithAWholeCommand) {
  inventory::GpuView view;
  view.info.id = gpu::dev(5);
  for (pid_t pid : {4242, 4243}) {
    inventory::GpuHolder gh;
    gh.holder.id.pid = pid;
    gh.holder.comm = "python3";
    gh.gpu_bytes = 1ULL << 30;
    view.holders.push_back(gh);
  }
  Plan plan;
  Skipped outside;
  outside.id.pid = 4242;
  outside.kind = SkipKind::not_matched;
  outside.reason = "command line does not match --match";
  Skipped kept = outside;
  kept.id.pid = 4243;
  kept.kind = SkipKind::protected_process;
  kept.reason = "GPU infrastructure";
  plan.skipped = {outside, kept};
  LeftoverInput in;
  in.view = &view;
  in.last_plan = &plan;
  const auto out = classify_leftovers(in, "/proc");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].next_step,
            "it is outside your selection; to free it too: gpureap free --gpu 5 --pid 4242");
  EXPECT_EQ(out[1].next_step,
            "it is protected; if you are sure, name it: gpureap free --gpu 5 --pid 4243");
}

}  // namespace
}  // namespace gpureap::reclaim
