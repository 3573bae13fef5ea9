// The reaper's policy on the simulated machine (reclaim/test_machine.h: the real /proc
// scan over a fixture tree, a fake NVML, signals through a FakeProcessControl): shape
// -> provenance -> reaped or not. Nothing unattended acts on an inference.

#include "agent/reaper.h"

#include <gtest/gtest.h>

#include <csignal>

#include "inventory/run_records.h"
#include "inventory/state_file.h"
#include "reclaim/test_machine.h"

namespace gpureap::agent {
namespace {

using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

struct Reaped {
  bool signalled = false;
  proc::Provenance provenance = proc::Provenance::none;
  bool orphaned = false;
};

/// One reap as the agent does it: a look (with what the agent saw die), every GPU user
/// due, the selection, then the one free flow on the fake control.
Reaped reap_one(TestMachine& m, const proc::ProcessId& id,
                std::map<pid_t, proc::DeadParent> dead = {}) {
  inventory::CollectOptions look;
  look.dead_parents = std::move(dead);
  inventory::Inventory inv = m.node().look(look);
  Reaped out;
  std::set<proc::ProcessId> due;
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders)
      if (gh.uses_gpu) {
        due.insert(gh.holder.id);
        if (gh.holder.id == id) {
          out.provenance = gh.holder.provenance;
          out.orphaned = gh.holder.orphaned;
        }
      }
  reclaim::Selection selection = reap_selection(inv, due, nullptr);
  if (!selection.ids.empty()) {
    reclaim::Freer freer{m.node(), m.audited()};
    (void)reap(freer, inv, selection, [](const reclaim::Plan&) { return true; });
  }
  out.signalled = !m.control.signals_of(id).empty();
  return out;
}

FakeProc worker(pid_t pid, std::string title) {
  FakeProc p;
  p.pid = pid;
  p.comm = title.substr(0, 15);
  p.cmdline = std::move(title);
  p.gpu = 0;
  p.bytes = 4 * kGiB;
  return p;
}

proc::DeadParent server_died(pid_t pid, std::uint64_t holder_start = 0) {
  proc::DeadParent d{pid, "python3", "python3 -m sglang.launch_server --tp 2", 1.0, true, false, 2};
  d.holder_start = holder_start;
  d.manner = proc::ExitManner::signaled;  // as the kernel reported it
  d.exit_value = SIGKILL;
  return d;
}

TEST(Reaper, AWitnessedServersWorkerIsReaped) {
  TestMachine m;
  FakeProc w = worker(4101, "sglang::scheduler_TP0");
  auto id = m.spawn(w);
  m.set_parent(w, 1, 4100, 20);  // its server (the group's leader) died: init adopted it
  auto r = reap_one(m, id, {{4101, server_died(4100)}});
  EXPECT_TRUE(r.orphaned);
  EXPECT_EQ(r.provenance, proc::Provenance::witnessed);
  EXPECT_TRUE(r.signalled);
}

TEST(Reaper, TheSameWorkerSeenByOneLookIsNotReaped) {
  TestMachine m;
  FakeProc w = worker(4201, "sglang::scheduler_TP0");
  auto id = m.spawn(w);
  m.set_parent(w, 1, 4200, 20);
  auto r = reap_one(m, id);
  EXPECT_TRUE(r.orphaned);  // reported (status, events, metrics) and offered to a person
  EXPECT_EQ(r.provenance, proc::Provenance::inferred);
  EXPECT_FALSE(r.signalled);
}

TEST(Reaper, AWitnessRecordForAReusedPidIsNoWitness) {
  TestMachine m;
  FakeProc w = worker(4301, "sglang::scheduler_TP0");
  auto id = m.spawn(w);
  m.set_parent(w, 1, 4300, 20);
  auto r = reap_one(m, id, {{4301, server_died(4300, id.start_time + 1)}});
  EXPECT_EQ(r.provenance, proc::Provenance::inferred);
  EXPECT_FALSE(r.signalled);
}

TEST(Reaper, ALauncherScriptSeenToEndLeavesItsJobsAlone) {
  // W3-02(b): launch-b.sh started two servers and ended; the agent saw it end.
  TestMachine m;
  FakeProc a = worker(4401, "python3 serve.py 0");
  FakeProc b = worker(4402, "python3 serve.py 1");
  b.gpu = 1;
  auto ia = m.spawn(a);
  auto ib = m.spawn(b);
  m.set_parent(a, 1, 4400, 20);
  m.set_parent(b, 1, 4400, 20);
  proc::DeadParent script{4400, "launch-b.sh", "/bin/bash ./launch-b.sh", 1.0, true, false, 2};
  auto r = reap_one(m, ia, {{4401, script}, {4402, script}});
  EXPECT_FALSE(r.orphaned);
  EXPECT_FALSE(r.signalled);
  EXPECT_TRUE(m.control.signals_of(ib).empty());
}

TEST(Reaper, AGoneRunsServerInTheRunsCgroupIsReaped) {
  // A `gpureap run` SIGKILLed in cgroup mode: its server lives on in the run's cgroup,
  // no gpureap-reaper above it. The cgroup is what gpureap holds: owned.
  TestMachine m;
  FakeProc s = worker(4501, "python3 serve.py");
  s.cgroup = "/system.slice/gpureap-run-serve-4500";
  auto id = m.spawn(s);
  auto r = reap_one(m, id);
  EXPECT_TRUE(r.orphaned);
  EXPECT_EQ(r.provenance, proc::Provenance::owned);
  EXPECT_TRUE(r.signalled);
}

TEST(Reaper, ALiveRunsServerIsNeverReaped) {
  // The run's reaper is its parent and lives, by the identity the run recorded in the
  // state directory: the run owns it, whatever its cgroup or environment says.
  TestMachine m;
  FakeProc reaper;
  reaper.pid = 4600;
  reaper.comm = "gpureap-reaper";
  auto rid = m.spawn(reaper);
  FakeProc s = worker(4601, "python3 serve.py");
  s.ppid = 4600;
  s.cgroup = "/system.slice/gpureap-run-serve-4599";
  auto id = m.spawn(s);
  ASSERT_TRUE(inventory::save_run_record(m.node().baselines().dir(),
                                         {"serve-4599", inventory::boot_id(), rid, rid, id}));
  auto r = reap_one(m, id);
  EXPECT_FALSE(r.orphaned);
  EXPECT_FALSE(r.signalled);
}

TEST(Reaper, W4_06_AProcessNamedGpureapReaperIsNoLiveRun) {
  // The same shape with no record: a name anyone can take (PR_SET_NAME) makes no run.
  TestMachine m;
  FakeProc reaper;
  reaper.pid = 4650;
  reaper.comm = "gpureap-reaper";
  m.spawn(reaper);
  FakeProc s = worker(4651, "python3 serve.py");
  s.ppid = 4650;
  s.cgroup = "/system.slice/gpureap-run-serve-4649";
  auto id = m.spawn(s);
  auto r = reap_one(m, id);
  EXPECT_TRUE(r.orphaned);
  EXPECT_EQ(r.provenance, proc::Provenance::owned);
}

TEST(Reaper, KeepProtectsAWitnessedOrphan) {
  TestMachine m;
  FakeProc w = worker(4701, "sglang::scheduler_TP0");
  auto id = m.spawn(w);
  m.set_parent(w, 1, 4700, 20);
  inventory::CollectOptions look;
  look.dead_parents = {{4701, server_died(4700)}};
  auto inv = m.node().look(look);
  auto keep = Pattern::compile("scheduler");
  ASSERT_TRUE(keep);
  EXPECT_TRUE(reap_selection(inv, {id}, &*keep).ids.empty());
  EXPECT_EQ(reap_selection(inv, {id}, nullptr).ids.size(), 1u);
}

}  // namespace
}  // namespace gpureap::agent
