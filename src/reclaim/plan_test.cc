#include "reclaim/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace gpureap::reclaim {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

inventory::GpuHolder user(pid_t pid, std::string comm, uid_t uid = 0, bool orphaned = true) {
  proc::Holder h;
  h.id = {pid, 5000u + static_cast<unsigned>(pid)};
  h.comm = std::move(comm);
  h.cmdline = "python3 -m sglang.launch_server --tp 8";
  h.uid = uid;
  h.user = uid == 0 ? "root" : "alice";
  h.orphaned = orphaned;
  h.orphan_reason = orphaned ? "re-parented to init (pid 1)" : "";
  return {h, 20 * kGiB, true};
}

inventory::Inventory one_gpu(std::vector<inventory::GpuHolder> holders) {
  inventory::Inventory inv;
  inventory::GpuView v;
  v.info.index = 0;
  v.holders = std::move(holders);
  inv.gpus.push_back(std::move(v));
  return inv;
}

CallerContext root_caller() {
  CallerContext ctx;
  ctx.self = 999;
  ctx.ancestors = {998, 1};
  ctx.euid = 0;
  ctx.proc_root = "/nonexistent-proc";  // the planner reads nothing of this host
  // 100 has a helper child 150; 150 must die with it.
  ctx.table = {{{100, 5100}, 1, 100, 100, 0, 'S', 0, "python3", false},
               {{150, 5150}, 100, 100, 100, 0, 'S', 0, "helper", false},
               {{998, 10}, 1, 998, 998, 0, 'S', 0, "bash", false}};
  return ctx;
}

TEST(MakePlan, TargetsHoldersAndTheirDescendants) {
  Selection sel;
  sel.gpus = {0};
  Plan plan = make_plan(one_gpu({user(100, "python3")}), sel, root_caller());
  ASSERT_EQ(plan.targets.size(), 2u);
  EXPECT_EQ(plan.targets[0].id.pid, 100);
  EXPECT_NE(plan.targets[0].why.find("orphaned"), std::string::npos);
  EXPECT_EQ(plan.targets[1].id.pid, 150);
  EXPECT_NE(plan.targets[1].why.find("descendant of 100"), std::string::npos);
}

TEST(MakePlan, MemoryNvmlDoesNotReportIsUnknownNotZero) {
  Selection sel;
  sel.gpus = {0};
  auto unknown = user(100, "python3");
  unknown.gpu_bytes = std::nullopt;  // fd-only holder, or NVML down
  Plan plan = make_plan(one_gpu({unknown}), sel, root_caller());
  ASSERT_FALSE(plan.targets.empty());
  EXPECT_NE(plan.targets[0].why.find("uses GPU 0 (memory unknown)"), std::string::npos)
      << plan.targets[0].why;
  EXPECT_EQ(plan.targets[0].why.find("0 B"), std::string::npos) << plan.targets[0].why;
  Plan known = make_plan(one_gpu({user(100, "python3")}), sel, root_caller());
  EXPECT_NE(known.targets[0].why.find("holds 20.0 GiB on GPU 0"), std::string::npos)
      << known.targets[0].why;
}

TEST(MakePlan, NeverInitSelfAncestorsOrInfrastructure) {
  Selection sel;
  sel.gpus = {0};
  auto ctx = root_caller();
  Plan plan = make_plan(one_gpu({user(1, "systemd"), user(999, "gpureap"), user(998, "bash"),
                                 user(300, "nvidia-persistenced"), user(301, "nv-hostengine")}),
                        sel, ctx);
  EXPECT_TRUE(plan.targets.empty());
  ASSERT_EQ(plan.skipped.size(), 5u);
  for (const auto& s : plan.skipped) EXPECT_EQ(s.kind, SkipKind::protected_process) << s.reason;
  // Named by --pid, infrastructure becomes a target; init never does.
  sel.pids = {300, 1};
  Plan named = make_plan(one_gpu({user(1, "systemd"), user(300, "nvidia-persiste")}), sel, ctx);
  ASSERT_EQ(named.targets.size(), 1u);
  EXPECT_EQ(named.targets[0].id.pid, 300);
}

// D10: supervisors and logged-in shells are protected; a shell without a terminal (a
// retry loop started by a script) is not, and naming by --pid overrides.
TEST(ProtectionReason, SupervisorsAndLoggedInShells) {
  auto ctx = root_caller();
  ctx.table.push_back({{400, 1}, 1, 400, 400, 0, 'S', 0, "bash", false, 34817});
  ctx.table.push_back({{401, 1}, 1, 401, 401, 0, 'S', 0, "bash", false, 0});
  for (std::string comm : {"containerd-shim", "slurmstepd", "sshd", "kubelet", "systemd",
                           "conmon", "tmux: server", "dockerd"})
    EXPECT_TRUE(protection_reason(500, comm, false, ctx, false)) << comm;
  auto shell = protection_reason(400, "bash", false, ctx, false);
  ASSERT_TRUE(shell);
  EXPECT_NE(shell->find("logged-in user's shell"), std::string::npos) << *shell;
  EXPECT_FALSE(protection_reason(401, "bash", false, ctx, false));
  EXPECT_FALSE(protection_reason(500, "containerd-shim", false, ctx, true));
  EXPECT_FALSE(protection_reason(500, "python3", false, ctx, false));
}

TEST(MakePlan, NonRootOnlyOwnProcesses) {
  Selection sel;
  sel.gpus = {0};
  auto ctx = root_caller();
  ctx.euid = 1000;
  Plan plan = make_plan(one_gpu({user(100, "python3", 0), user(200, "python3", 1000)}), sel, ctx);
  ASSERT_EQ(plan.targets.size(), 1u);
  EXPECT_EQ(plan.targets[0].id.pid, 200);
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].kind, SkipKind::not_permitted);
  EXPECT_NE(plan.skipped[0].reason.find("root"), std::string::npos);
}

TEST(MakePlan, FiltersNarrowTheSelection) {
  auto inv = one_gpu({user(100, "python3", 0, true), user(200, "python3", 0, false)});
  Selection sel;
  sel.gpus = {0};
  sel.orphans_only = true;
  auto orphans = make_plan(inv, sel, root_caller());
  ASSERT_EQ(orphans.targets.size(), 2u);  // 100 and its descendant 150
  EXPECT_EQ(orphans.skipped.size(), 1u);
  sel.orphans_only = false;
  sel.match = *Pattern::compile("vllm");
  EXPECT_TRUE(make_plan(inv, sel, root_caller()).targets.empty());
  sel.match.reset();
  sel.gpus = {1};
  EXPECT_TRUE(make_plan(inv, sel, root_caller()).targets.empty()) << "GPU 0's holders on GPU 1?";
}

TEST(OrphansPlan, IsWhatFreeOrphansWouldSignal) {
  const uid_t me = ::geteuid();
  auto inv = one_gpu({user(100, "nv-hostengine", me), user(101, "python3", me),
                      user(102, "python3", me, false)});
  Plan plan = orphans_plan(inv, "/nonexistent-proc");
  ASSERT_EQ(plan.targets.size(), 1u);
  EXPECT_EQ(plan.targets[0].id.pid, 101);
  ASSERT_EQ(plan.skipped.size(), 2u);
  EXPECT_EQ(plan.skipped[0].id.pid, 100);
  EXPECT_EQ(plan.skipped[0].kind, SkipKind::protected_process);
  EXPECT_EQ(plan.skipped[1].kind, SkipKind::not_matched);
}

TEST(OrphansPlan, WithoutOrphansIsEmpty) {
  Plan plan = orphans_plan(one_gpu({user(102, "python3", ::geteuid(), false)}), "/nonexistent-proc");
  EXPECT_TRUE(plan.targets.empty());
  EXPECT_TRUE(plan.skipped.empty());
}

}  // namespace
}  // namespace gpureap::reclaim
