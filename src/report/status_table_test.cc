// The status table's closing advice: it names only what `free --orphans` would act on.

#include "report/status_table.h"
#include "util/units.h"
#include "gpu/test_devices.h"

#include <gtest/gtest.h>

namespace gpureap::report {
namespace {


inventory::GpuHolder orphan(pid_t pid, const std::string& comm, std::uint64_t bytes) {
  inventory::GpuHolder gh;
  gh.holder.id = {pid, 1000};
  gh.holder.comm = comm;
  gh.holder.cmdline = comm;
  gh.holder.user = "me";
  gh.holder.ppid = 1;
  gh.holder.orphaned = true;
  gh.holder.orphan_reason = "re-parented to init (pid 1)";
  gh.gpu_bytes = bytes;
  return gh;
}

inventory::Inventory node_with(std::vector<inventory::GpuHolder> holders) {
  inventory::Inventory inv;
  inventory::GpuView view;
  view.info.id = gpu::dev(0);
  view.info.memory = gpu::GpuMemory{80 * kGiB, 0, std::nullopt};
  for (const auto& h : holders) {
    view.info.memory->used += h.gpu_bytes.value_or(0);
    view.attributed_bytes += h.gpu_bytes.value_or(0);
  }
  view.holders = std::move(holders);
  inv.gpus.push_back(std::move(view));
  return inv;
}

reclaim::Target target(const inventory::GpuHolder& gh) {
  return {gh.holder.id, gh.holder.comm, gh.holder.cmdline, gh.holder.user, gpu::devs({0}), *gh.gpu_bytes,
          "orphaned"};
}

reclaim::Skipped skipped(const inventory::GpuHolder& gh, reclaim::SkipKind kind) {
  return {gh.holder.id, gh.holder.comm, gpu::devs({0}), *gh.gpu_bytes, kind, "why"};
}

TEST(StatusTable, AProtectedOrphanIsNotOfferedToFree) {
  // defects-wave1 §1.7: "Free them:" for a protected nv-hostengine.
  auto dcgm = orphan(501, "nv-hostengine", 1 * kGiB);
  reclaim::Plan plan;
  plan.skipped.push_back(skipped(dcgm, reclaim::SkipKind::protected_process));
  std::string out = status_table(node_with({dcgm}), Style{}, plan);
  EXPECT_NE(out.find("501"), std::string::npos) << out;  // still shown, as an orphan
  EXPECT_EQ(out.find("gpureap free"), std::string::npos) << out;
  EXPECT_EQ(out.find("orphaned process"), std::string::npos) << out;
}

TEST(StatusTable, OneFreeableOrphanIsSingularAndCountsAlone) {
  auto worker = orphan(502, "python3", 20 * kGiB), dcgm = orphan(503, "nv-hostengine", 1 * kGiB);
  reclaim::Plan plan;
  plan.targets.push_back(target(worker));
  plan.skipped.push_back(skipped(dcgm, reclaim::SkipKind::protected_process));
  std::string out = status_table(node_with({worker, dcgm}), Style{}, plan);
  EXPECT_NE(out.find("1 orphaned process (parent gone) holds 20.0 GiB on GPU 0. Free it: "
                     "gpureap free --orphans --gpu 0\n"),
            std::string::npos)
      << out;
}

TEST(StatusTable, OtherUsersOrphansAreFreedWithSudo) {
  auto mine = orphan(504, "python3", 20 * kGiB), theirs = orphan(505, "python3", 10 * kGiB);
  reclaim::Plan plan;
  plan.targets.push_back(target(mine));
  plan.skipped.push_back(skipped(theirs, reclaim::SkipKind::not_permitted));
  std::string out = status_table(node_with({mine, theirs}), Style{}, plan);
  EXPECT_NE(out.find("2 orphaned processes (parent gone) hold 30.0 GiB on GPU 0. Free them: "
                     "sudo gpureap free --orphans --gpu 0\n"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace gpureap::report
