#include "reclaim/plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"

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

// gpureap's own children inherit its environment and cgroup (in a Slurm epilog,
// SLURM_JOB_ID): the NVML worker once matched the epilog's own selection.
TEST(ProtectionReason, OurOwnHelpersAreNeverTargets) {
  auto ctx = root_caller();
  ctx.helpers = {1001};
  auto why = protection_reason(1001, "gpureap-nvml", false, ctx, false);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("helper process of this gpureap"), std::string::npos) << *why;
  EXPECT_TRUE(protection_reason(1001, "gpureap-nvml", false, ctx, true));  // not even by --pid
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

// A fixture /proc with what the environment filters read: each holder's environ
// (NUL-separated; nullopt: unreadable, made a directory) and stat (start time 5000+pid,
// as user() gives), and its cgroup in the holder itself.
class EnvironProc {
 public:
  void add(pid_t pid, std::optional<std::string> environ) {
    std::string d = dir_.path(std::to_string(pid));
    std::filesystem::create_directories(d);
    std::ofstream(d + "/stat") << fmt::format("{} (python3) S 1 {} {} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0",
                                              pid, pid, pid, 5000 + pid);
    if (environ)
      std::ofstream(d + "/environ", std::ios::binary) << *environ;
    else
      std::filesystem::create_directories(d + "/environ");
  }
  CallerContext caller() const {
    auto ctx = root_caller();
    ctx.proc_root = dir_.dir();
    return ctx;
  }

 private:
  TestTempDir dir_{"gpureap-plan-test"};
};

std::vector<pid_t> target_pids(const Plan& plan) {
  std::vector<pid_t> out;
  for (const auto& t : plan.targets) out.push_back(t.id.pid);
  return out;
}

const Skipped* skipped(const Plan& plan, pid_t pid) {
  for (const auto& s : plan.skipped)
    if (s.id.pid == pid) return &s;
  return nullptr;
}

using namespace std::string_literals;

TEST(MakePlan, EnvSelectsHoldersWhoseEnvironmentHoldsTheWholeEntry) {
  EnvironProc proc;
  proc.add(100, "PATH=/bin\0SLURM_JOB_ID=42\0"s);
  proc.add(200, "SLURM_JOB_ID=420\0"s);
  proc.add(300, ""s);
  Selection sel;
  sel.gpus = {0};
  sel.env = {{"SLURM_JOB_ID", "42"}};
  Plan plan = make_plan(one_gpu({user(100, "python3"), user(200, "python3"), user(300, "python3")}),
                        sel, proc.caller());
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{100, 150}));  // and 100's helper
  for (pid_t pid : {200, 300}) {
    const auto* s = skipped(plan, pid);
    ASSERT_NE(s, nullptr) << pid;
    EXPECT_EQ(s->kind, SkipKind::not_matched);
    EXPECT_EQ(s->reason, "its environment lacks SLURM_JOB_ID=42");
  }
  // Repeated, every entry must be there.
  sel.env.push_back({"PATH", "/usr/bin"});
  EXPECT_TRUE(make_plan(one_gpu({user(100, "python3")}), sel, proc.caller()).targets.empty());
}

TEST(MakePlan, AnUnreadableEnvironmentIsReportedNotGuessed) {
  EnvironProc proc;
  proc.add(100, std::nullopt);
  Selection sel;
  sel.gpus = {0};
  sel.env = {{"SLURM_JOB_ID", "42"}};
  Plan plan = make_plan(one_gpu({user(100, "python3")}), sel, proc.caller());
  EXPECT_TRUE(plan.targets.empty());
  const auto* s = skipped(plan, 100);
  ASSERT_NE(s, nullptr);
  // Not "not matched" (which would let free say "nothing to do"): it cannot tell.
  EXPECT_EQ(s->kind, SkipKind::not_permitted);
  EXPECT_NE(s->reason.find("cannot be read"), std::string::npos) << s->reason;
  EXPECT_NE(s->reason.find("cannot tell whether it holds SLURM_JOB_ID=42"), std::string::npos)
      << s->reason;
}

TEST(MakePlan, AHolderThatExitedIsNotMatched) {
  EnvironProc proc;  // pid 100 has no /proc entry
  Selection sel;
  sel.gpus = {0};
  sel.env = {{"SLURM_JOB_ID", "42"}};
  Plan plan = make_plan(one_gpu({user(100, "python3")}), sel, proc.caller());
  ASSERT_NE(skipped(plan, 100), nullptr);
  EXPECT_EQ(skipped(plan, 100)->kind, SkipKind::not_matched);
  EXPECT_EQ(skipped(plan, 100)->reason, "it has exited");
}

// The Slurm epilog's selection: the job's environment, or the job's cgroup, or an
// orphan on the job's GPU that no running job claims.
TEST(MakePlan, AnyOfSelectsTheUnionOfItsAlternatives) {
  EnvironProc proc;
  proc.add(100, "SLURM_JOB_ID=42\0"s);  // the job's, by environment, not orphaned, on GPU 1
  proc.add(200, ""s);                   // the job's, by cgroup
  proc.add(300, ""s);                   // an orphan on the job's GPU 0
  proc.add(400, "SLURM_JOB_ID=7\0"s);   // an orphan of running job 7 on GPU 0
  proc.add(500, ""s);                   // an orphan, but on GPU 1 (not the job's)
  proc.add(600, ""s);                   // cgroup job_420: not the job's
  auto on = [](inventory::GpuHolder h, std::string cgroup, bool orphaned) {
    h.holder.cgroup = std::move(cgroup);
    h.holder.orphaned = orphaned;
    return h;
  };
  inventory::Inventory inv;
  for (unsigned g : {0u, 1u}) {
    inventory::GpuView v;
    v.info.index = g;
    inv.gpus.push_back(v);
  }
  inv.gpus[1].holders = {on(user(100, "python3"), "/user.slice", false),
                         on(user(500, "python3"), "/user.slice", true),
                         on(user(600, "python3"), "/slurm/uid_0/job_420/step_0", false)};
  inv.gpus[0].holders = {on(user(200, "python3"), "/slurm/uid_0/job_42/step_0", false),
                         on(user(300, "python3"), "/user.slice", true),
                         on(user(400, "python3"), "/user.slice", true)};
  Selection sel;
  sel.gpus = {0, 1};
  Filters by_env, by_cgroup, orphans;
  by_env.env = {{"SLURM_JOB_ID", "42"}};
  by_cgroup.cgroup_component = "job_42";
  orphans.orphans_only = true;
  orphans.on_gpus = {0};
  orphans.env_none = {{"SLURM_JOB_ID", "7"}};
  sel.any_of = {by_env, by_cgroup, orphans};
  Plan plan = make_plan(inv, sel, proc.caller());
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{100, 200, 300, 150}));
  ASSERT_NE(skipped(plan, 400), nullptr);
  EXPECT_NE(skipped(plan, 400)->reason.find("its environment holds SLURM_JOB_ID=7"),
            std::string::npos) << skipped(plan, 400)->reason;
  ASSERT_NE(skipped(plan, 500), nullptr);
  EXPECT_NE(skipped(plan, 500)->reason.find("it uses none of GPU 0"), std::string::npos)
      << skipped(plan, 500)->reason;
  ASSERT_NE(skipped(plan, 600), nullptr);
  EXPECT_EQ(skipped(plan, 600)->reason,
            "its environment lacks SLURM_JOB_ID=42; its cgroup is not under job_42; not orphaned "
            "(its parent is alive); --orphans given");
}

TEST(MakePlan, AnyOfWithAnUnreadableEnvironmentCannotTell) {
  EnvironProc proc;
  proc.add(100, std::nullopt);
  Selection sel;
  sel.gpus = {0};
  Filters by_env, by_cgroup;
  by_env.env = {{"SLURM_JOB_ID", "42"}};
  by_cgroup.cgroup_component = "job_42";
  sel.any_of = {by_env, by_cgroup};
  auto h = user(100, "python3");
  h.holder.cgroup = "/user.slice";
  Plan plan = make_plan(one_gpu({h}), sel, proc.caller());
  ASSERT_NE(skipped(plan, 100), nullptr);
  EXPECT_EQ(skipped(plan, 100)->kind, SkipKind::not_permitted);
  // The cgroup alone matches: then the environment does not matter.
  h.holder.cgroup = "/slurm/job_42/step_0";
  EXPECT_EQ(target_pids(make_plan(one_gpu({h}), sel, proc.caller())),
            (std::vector<pid_t>{100, 150}));
}

TEST(IncludeRespawner, AnyOfNeedsAnAlternativeThatDescribesTheParent) {
  EnvironProc proc;
  proc.add(100, "SLURM_JOB_ID=42\0"s);
  proc.add(200, ""s);
  auto ctx = proc.caller();
  proc::ProcessEntry job_parent{{100, 5100}, 1, 100, 100, 0, 'S', 0, "python3", false};
  proc::ProcessEntry other_parent{{200, 5200}, 1, 200, 200, 0, 'S', 0, "python3", false};
  Selection sel;
  sel.gpus = {0};
  Filters by_env, orphans;
  by_env.env = {{"SLURM_JOB_ID", "42"}};
  orphans.orphans_only = true;
  sel.any_of = {orphans};
  Plan plan;
  // An orphans-only alternative says nothing about a parent (it is by nature not one).
  EXPECT_FALSE(include_respawner(plan, other_parent, sel, ctx, 1));
  sel.any_of = {orphans, by_env};
  EXPECT_FALSE(include_respawner(plan, other_parent, sel, ctx, 1));
  EXPECT_TRUE(include_respawner(plan, job_parent, sel, ctx, 1));
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{100}));
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
