#include "reclaim/plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"
#include "util/units.h"
#include "gpu/test_devices.h"

namespace gpureap::reclaim {
namespace {


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
  v.info.id = gpu::dev(0);
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
  sel.gpus = gpu::devs({0});
  Plan plan = make_plan(one_gpu({user(100, "python3")}), sel, root_caller());
  ASSERT_EQ(plan.targets.size(), 2u);
  EXPECT_EQ(plan.targets[0].id.pid, 100);
  EXPECT_NE(plan.targets[0].why.find("orphaned"), std::string::npos);
  EXPECT_EQ(plan.targets[1].id.pid, 150);
  EXPECT_NE(plan.targets[1].why.find("descendant of 100"), std::string::npos);
}

TEST(MakePlan, MemoryTheSourceDoesNotReportIsUnknownNotZero) {
  Selection sel;
  sel.gpus = gpu::devs({0});
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

// A keeper of a dead owner's memory is that memory's holder: --orphans takes it even
// when its own lineage is no orphan's; what acts unattended still needs owned or
// witnessed evidence. A client (a monitor) is never a whole-GPU free's target, only
// --pid's.
TEST(MakePlan, OrphansTakeAKeeperAndOnlyPidTakesAClient) {
  auto keeper = user(100, "python3", 0, /*orphaned*/ false);
  keeper.gpu_bytes = 8 * kGiB;
  keeper.holder.keeper = proc::KeeperClass::inheritor;
  keeper.holder.kept_owner = 90;
  keeper.holder.keeper_reason = "keeps 8.00 GiB of dead pid 90, whose device files it inherited";
  auto monitor = user(200, "nvitop", 0, /*orphaned*/ false);
  monitor.gpu_bytes = std::nullopt;
  monitor.uses_gpu = false;
  monitor.client = true;
  const auto inv = one_gpu({keeper, monitor});
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.orphans_only = true;
  Plan plan = make_plan(inv, sel, root_caller());
  ASSERT_FALSE(plan.targets.empty());
  EXPECT_EQ(plan.targets[0].id.pid, 100);
  EXPECT_EQ(plan.targets[0].gpu_bytes, 8 * kGiB);
  EXPECT_NE(plan.targets[0].why.find("it keeps 8.00 GiB of dead pid 90"), std::string::npos)
      << plan.targets[0].why;
  EXPECT_FALSE(plan.contains(monitor.holder.id));
  EXPECT_EQ(plan.left_alone(monitor.holder.id), nullptr) << "a client is not a holder at all";

  sel.unattended = true;
  Plan reaper = make_plan(inv, sel, root_caller());
  EXPECT_FALSE(reaper.contains(keeper.holder.id));
  ASSERT_NE(reaper.left_alone(keeper.holder.id), nullptr);
  EXPECT_NE(reaper.left_alone(keeper.holder.id)->reason.find("no owned or witnessed evidence"),
            std::string::npos);

  Selection whole;
  whole.gpus = gpu::devs({0});
  Plan all = make_plan(inv, whole, root_caller());
  EXPECT_TRUE(all.contains(keeper.holder.id));
  EXPECT_FALSE(all.contains(monitor.holder.id));
  whole.pids = {200};
  Plan named = make_plan(inv, whole, root_caller());
  EXPECT_TRUE(named.contains(monitor.holder.id)) << "--pid names a client";
}

TEST(MakePlan, NeverInitSelfAncestorsOrInfrastructure) {
  Selection sel;
  sel.gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
  sel.orphans_only = true;
  auto orphans = make_plan(inv, sel, root_caller());
  ASSERT_EQ(orphans.targets.size(), 2u);  // 100 and its descendant 150
  EXPECT_EQ(orphans.skipped.size(), 1u);
  sel.orphans_only = false;
  sel.match = *Pattern::compile("vllm");
  EXPECT_TRUE(make_plan(inv, sel, root_caller()).targets.empty());
  sel.match.reset();
  sel.gpus = gpu::devs({1});
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
  sel.gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
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
    v.info.id = gpu::dev(g);
    inv.gpus.push_back(v);
  }
  inv.gpus[1].holders = {on(user(100, "python3"), "/user.slice", false),
                         on(user(500, "python3"), "/user.slice", true),
                         on(user(600, "python3"), "/slurm/uid_0/job_420/step_0", false)};
  inv.gpus[0].holders = {on(user(200, "python3"), "/slurm/uid_0/job_42/step_0", false),
                         on(user(300, "python3"), "/user.slice", true),
                         on(user(400, "python3"), "/user.slice", true)};
  Selection sel;
  sel.gpus = gpu::devs({0, 1});
  Filters by_env, by_cgroup, orphans;
  by_env.env = {{"SLURM_JOB_ID", "42"}};
  by_cgroup.cgroup_component = "job_42";
  orphans.orphans_only = true;
  orphans.on_gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
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
  sel.gpus = gpu::devs({0});
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

// Review §3.4: a server (orphaned) on GPU 0 whose live workers hold GPU 0 and GPU 1
// (`gpureap-sim hold --gpu 0 --children 2 --parent-holds --bytes 30GiB`), and helpers
// holding nothing. Each worker has one verdict, with its GPUs and bytes.
class ServerTree {
 public:
  ServerTree() {
    ctx_ = root_caller();
    ctx_.table = {{{3906, 5000 + 3906}, 1, 3906, 50, 0, 'S', 0, "sglang-server", false},
                  {{3908, 5000 + 3908}, 3906, 3906, 50, 0, 'S', 0, "sglang-server", false},
                  {{3909, 5000 + 3909}, 3906, 3906, 50, 0, 'S', 0, "sglang-server", false},
                  {{3910, 5000 + 3910}, 3906, 3906, 50, 0, 'S', 0, "tokenizer", false},
                  {{3911, 5000 + 3911}, 3909, 3906, 50, 0, 'S', 0, "worker-helper", false},
                  {{998, 10}, 1, 998, 998, 0, 'S', 0, "bash", false}};
    inventory::GpuView gpu0, gpu1;
    gpu0.info.id = gpu::dev(0);
    gpu1.info.id = gpu::dev(1);
    auto server = user(3906, "sglang-server");
    auto worker0 = user(3908, "sglang-server", 0, false);
    auto worker1 = user(3909, "sglang-server", 0, false);
    for (auto* h : {&server, &worker0, &worker1}) h->gpu_bytes = 30 * kGiB;
    gpu0.holders = {server, worker0};
    gpu1.holders = {worker1};
    inv_.gpus = {gpu0, gpu1};
  }
  Plan plan(const Selection& sel) const { return make_plan(inv_, sel, ctx_); }
  inventory::Inventory& inv() { return inv_; }

 private:
  CallerContext ctx_;
  inventory::Inventory inv_;
};

// Every pid of the plan has exactly one verdict.
void expect_one_verdict(const Plan& plan) {
  for (const auto& t : plan.targets) EXPECT_EQ(skipped(plan, t.id.pid), nullptr) << t.id.pid;
}

std::uint64_t target_bytes(const Plan& plan) {
  std::uint64_t sum = 0;
  for (const auto& t : plan.targets) sum += t.gpu_bytes;
  return sum;
}

TEST(MakePlan, OrphansOnGpu0NeverReachAGpuHoldingDescendantThatIsNotSelected) {
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.orphans_only = true;
  Plan plan = ServerTree().plan(sel);
  // The server and its helper that holds nothing; not the workers, nor the helper of
  // a worker left alone (it stays with its worker).
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{3906, 3910}));
  EXPECT_EQ(target_bytes(plan), 30 * kGiB);
  expect_one_verdict(plan);
  ASSERT_EQ(plan.skipped.size(), 2u);
  const Skipped* same_gpu = skipped(plan, 3908);
  ASSERT_NE(same_gpu, nullptr);
  EXPECT_EQ(same_gpu->kind, SkipKind::not_matched);
  EXPECT_NE(same_gpu->reason.find("--orphans given"), std::string::npos) << same_gpu->reason;
  EXPECT_NE(same_gpu->reason.find("a descendant of 3906 (sglang-server), not signalled with it"),
            std::string::npos)
      << same_gpu->reason;
  EXPECT_NE(same_gpu->reason.find("gpureap free --pid 3908"), std::string::npos)
      << same_gpu->reason;
  const Skipped* other_gpu = skipped(plan, 3909);
  ASSERT_NE(other_gpu, nullptr);
  EXPECT_EQ(other_gpu->gpus, gpu::devs({1}));
  EXPECT_EQ(other_gpu->gpu_bytes, 30 * kGiB);
  EXPECT_NE(other_gpu->reason.find("holds 30.0 GiB on GPU 1, not selected"), std::string::npos)
      << other_gpu->reason;
  // Not orphaned either: adding --gpu 1 would not include it; --pid by itself does.
  EXPECT_NE(other_gpu->reason.find("gpureap free --pid 3909"), std::string::npos)
      << other_gpu->reason;
}

TEST(MakePlan, ADescendantOnAGpuNotSelectedSaysWhichGpuToAdd) {
  Selection sel;
  sel.gpus = gpu::devs({0});
  Plan plan = ServerTree().plan(sel);
  // GPU 0's holders are selected by themselves; the worker on GPU 1 is not.
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{3906, 3908, 3910}));
  EXPECT_EQ(target_bytes(plan), 60 * kGiB);
  expect_one_verdict(plan);
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped[0].id.pid, 3909);
  EXPECT_NE(plan.skipped[0].reason.find("not selected; a descendant of 3906 (sglang-server), not "
                                        "signalled with it: add --gpu 1 to include it"),
            std::string::npos)
      << plan.skipped[0].reason;
  // Both GPUs selected: every holder is a target by itself, each with its own GPU.
  sel.gpus = gpu::devs({0, 1});
  Plan both = ServerTree().plan(sel);
  EXPECT_EQ(target_pids(both), (std::vector<pid_t>{3906, 3908, 3909, 3910, 3911}));
  EXPECT_EQ(target_bytes(both), 90 * kGiB);
  EXPECT_TRUE(both.skipped.empty());
  EXPECT_EQ(both.targets[2].gpus, gpu::devs({1}));
}

TEST(MakePlan, ATargetThatAlsoHoldsAGpuNotSelectedIsListedWithAllItHolds) {
  ServerTree tree;
  // The server holds 10 GiB on GPU 1 too: signalling it frees that as well.
  auto also = user(3906, "sglang-server");
  also.gpu_bytes = 10 * kGiB;
  tree.inv().gpus[1].holders.push_back(also);
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.pids = {3906};
  Plan plan = tree.plan(sel);
  ASSERT_FALSE(plan.targets.empty());
  const Target& server = plan.targets[0];
  EXPECT_EQ(server.id.pid, 3906);
  EXPECT_EQ(server.gpus, gpu::devs({0, 1}));
  EXPECT_EQ(server.gpu_bytes, 40 * kGiB);
  EXPECT_NE(server.why.find("holds 30.0 GiB on GPU 0; it also holds 10.0 GiB on GPU 1, not "
                            "selected: signalling it frees that too"),
            std::string::npos)
      << server.why;
  expect_one_verdict(plan);
}

// W2-01: the reaper's exact set (Filters::ids) is the whole plan: no other holder, and
// nothing joins it for its relation (a later round re-planning from it adds nothing).
TEST(MakePlan, W2_01_AnExactSetOfProcessesIsTheWholePlan) {
  auto inv = one_gpu({user(100, "python3"), user(200, "python3")});
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.orphans_only = true;
  sel.ids = {{100, 5100}};
  Plan plan = make_plan(inv, sel, root_caller());
  EXPECT_EQ(target_pids(plan), std::vector<pid_t>{100});  // not 150, its helper
  ASSERT_NE(skipped(plan, 200), nullptr);
  EXPECT_NE(skipped(plan, 200)->reason.find("not one of the processes this reap announced"),
            std::string::npos);
  // The same pid with another start time is another process.
  sel.ids = {{100, 1}};
  EXPECT_TRUE(make_plan(inv, sel, root_caller()).targets.empty());
}

// W4_12 (ux-wave4 §4): top's tagged set is the person's, not a reap's: a holder left out
// is "not tagged" in the box that asks to confirm.
TEST(MakePlan, W4_12_TopsExactSetSaysNotTagged) {
  auto inv = one_gpu({user(100, "python3"), user(200, "python3")});
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.ids = {{100, 5100}};
  sel.ids_left_out = "not tagged";
  Plan plan = make_plan(inv, sel, root_caller());
  ASSERT_NE(skipped(plan, 200), nullptr);
  EXPECT_EQ(skipped(plan, 200)->reason, "not tagged");
}

// Issue 40: a planned holder carries its lineage verdict (the scan's), for the plan's JSON
// and the audit record; a target that holds no GPU has none.
TEST(MakePlan, W4_10_TargetsCarryTheirLineageVerdict) {
  auto inv = one_gpu({user(100, "python3"), user(200, "python3", 0, /*orphaned=*/false)});
  auto& orphan = inv.gpus[0].holders[0].holder;
  orphan.orphaned = true;
  orphan.orphan_evidence = proc::OrphanEvidence::siblings;
  orphan.orphan_reason = "re-parented to init (pid 1); 1 more of its process group";
  Selection sel;
  sel.gpus = gpu::devs({0});
  Plan plan = make_plan(inv, sel, root_caller());
  ASSERT_EQ(plan.targets.size(), 3u);  // 100, 200 and 150, 100's helper child
  for (const auto& t : plan.targets) {
    if (t.id.pid == 150) {
      EXPECT_FALSE(t.lineage) << "a descendant holds no GPU: its why says why";
      continue;
    }
    ASSERT_TRUE(t.lineage) << t.id.pid;
    if (t.id.pid == 100) {
      EXPECT_EQ(t.lineage->verdict, LineageVerdict::orphaned);
      EXPECT_EQ(t.lineage->evidence, proc::OrphanEvidence::siblings);
      EXPECT_EQ(t.lineage->reason, orphan.orphan_reason);
    } else {
      EXPECT_EQ(t.lineage->verdict, LineageVerdict::live);
      EXPECT_EQ(t.lineage->evidence, proc::OrphanEvidence::none);
    }
  }
}

TEST(IncludeRespawner, AParentLeftAloneAsAHolderChangesItsVerdict) {
  auto ctx = root_caller();
  Selection sel;
  sel.gpus = gpu::devs({0});
  sel.orphans_only = true;
  Plan plan = make_plan(one_gpu({user(100, "python3", 0, false)}), sel, ctx);
  ASSERT_NE(skipped(plan, 100), nullptr);
  ASSERT_TRUE(include_respawner(plan, ctx.table[0], sel, ctx, 2));
  EXPECT_EQ(target_pids(plan), std::vector<pid_t>{100});
  EXPECT_EQ(plan.targets[0].gpu_bytes, 20 * kGiB);
  EXPECT_EQ(skipped(plan, 100), nullptr);
}


// Issue 24 part 5: the infrastructure of a live job beneath a target is never swept
// as its descendant. 100 (an orphan on GPU 0) started a job whose launcher script 200
// holds nothing but is the parent of 300, a live rank on GPU 1 (not selected); and an
// MPI daemon 210 (orted) whose ranks (310) hold no GPU at all.
TEST(MakePlan, TheInfrastructureOfALiveJobIsNotSweptAsADescendant) {
  CallerContext ctx = root_caller();
  ctx.table = {{{100, 5100}, 1, 100, 100, 0, 'S', 0, "python3", false},
               {{150, 5150}, 100, 100, 100, 0, 'S', 0, "helper", false},
               {{200, 5200}, 100, 100, 100, 0, 'S', 0, "bash", false},
               {{210, 5210}, 100, 100, 100, 0, 'S', 0, "orted", false},
               {{300, 5300}, 200, 100, 100, 0, 'S', 0, "python3", false},
               {{310, 5310}, 210, 100, 100, 0, 'S', 0, "python3", false},
               {{998, 10}, 1, 998, 998, 0, 'S', 0, "bash", false}};
  inventory::Inventory inv = one_gpu({user(100, "python3")});
  inventory::GpuView gpu1;
  gpu1.info.id = gpu::dev(1);
  gpu1.holders = {user(300, "python3", 0, false)};
  inv.gpus.push_back(gpu1);
  Selection sel;
  sel.gpus = gpu::devs({0});
  Plan plan = make_plan(inv, sel, ctx);
  // The orphan and its helper; not the rank's parent, the MPI daemon or its rank.
  EXPECT_EQ(target_pids(plan), (std::vector<pid_t>{100, 150}));
  const Skipped* parent = skipped(plan, 200);
  ASSERT_NE(parent, nullptr);
  EXPECT_NE(parent->reason.find("the parent of GPU holder 300 (python3), which is left alone"),
            std::string::npos)
      << parent->reason;
  EXPECT_NE(parent->reason.find("a descendant of 100 (python3), not signalled with it"),
            std::string::npos)
      << parent->reason;
  EXPECT_NE(parent->reason.find("gpureap free --pid 200"), std::string::npos) << parent->reason;
  const Skipped* daemon = skipped(plan, 210);
  ASSERT_NE(daemon, nullptr);
  EXPECT_NE(daemon->reason.find("an MPI daemon (orted) of a live job"), std::string::npos)
      << daemon->reason;
  // Neither signalled nor listed: what is beneath a live job's parent is that job's
  // (the parent names the GPU holder).
  EXPECT_EQ(skipped(plan, 310), nullptr);
  EXPECT_EQ(skipped(plan, 300), nullptr);
  expect_one_verdict(plan);
  // Both GPUs selected: the rank is a target, so its parent goes with it; the MPI
  // daemon stays a live job's infrastructure, named so.
  sel.gpus = gpu::devs({0, 1});
  Plan both = make_plan(inv, sel, ctx);
  EXPECT_EQ(target_pids(both), (std::vector<pid_t>{100, 300, 150, 200}));
  ASSERT_NE(skipped(both, 210), nullptr);
}

}  // namespace
}  // namespace gpureap::reclaim
