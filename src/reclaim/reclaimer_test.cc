// The reclaim engine on fakes (test_machine.h): real planning, holder scan and
// classification over a fixture /proc, a FakeGpuSource, scripted processes and
// an EventClock. Rounds that take seconds on a node take milliseconds here.

#include "reclaim/reclaimer.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <functional>

#include "reclaim/test_machine.h"
#include "util/units.h"
#include "gpu/test_devices.h"

namespace gpureap::reclaim {
namespace {

using namespace std::chrono_literals;
using testing::FakeProc;
using testing::kGiB;
using testing::TestMachine;

FakeProc holder(pid_t pid, pid_t ppid = 1, unsigned gpu = 0) {
  FakeProc p;
  p.pid = pid;
  p.ppid = ppid;
  p.gpu = gpu;
  p.bytes = 20 * kGiB;
  p.cmdline = "python3 -m sglang.launch_server";
  return p;
}

FakeProc parent(pid_t pid) {
  FakeProc p;
  p.pid = pid;
  p.comm = "launcher";
  p.cmdline = "bash run_workers.sh";
  return p;
}

std::vector<int> sigs(std::initializer_list<int> l) {
  return l;
}

TEST(Reclaim, OrphanIsFreedInOneRoundWithoutSettling) {
  TestMachine m;
  auto id = m.spawn(holder(3000101));
  ReclaimReport r = m.free({});
  ASSERT_EQ(m.plan.targets.size(), 1u);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(r.rounds.size(), 1u);
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].signal, Signal::sigterm);
  EXPECT_EQ(r.actions[0].outcome, Outcome::exited);
  EXPECT_NEAR(*r.actions[0].exited_at, 0.1, 1e-3);
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM}));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].before, 20 * kGiB);
  EXPECT_EQ(r.gpus[0].after(), 0u);
  // Exit at 0.1 s, the driver's release 0.2 s later; no live parent: no settle.
  EXPECT_NEAR(*r.gpus[0].freed_at, 0.3, 0.03);
  EXPECT_EQ(r.settled_seconds, 0);
  EXPECT_TRUE(r.leftovers.empty());
  EXPECT_TRUE(r.respawners.empty());
  EXPECT_LT(m.real_seconds, 1.0);
}

// A torch worker's GPU memory is back some 30 ms before its exit ends (the H100, issue
// 54: the address space is torn down after the device files close). Dying by the
// kernel's word (every thread in its exit) with its memory back, its exit is not waited
// for before the verdict and its last look, only at the very end: free's verdict is
// taken when the memory is back, and free still returns with nothing it signalled left.
TEST(Reclaim, AHolderWhoseMemoryIsBackWhileItExitsIsNotWaitedFor) {
  TestMachine m;
  FakeProc p = holder(3000111);
  p.release_after.reset();           // released below, before the exit ends
  p.script.exits_after_term = 100ms;  // gone at 0.1 s
  p.script.exiting_for = 40ms;        // in its exit from 0.06 s
  auto id = m.spawn(p);
  // Its memory is back at 0.07 s; NVML lists it until its exit ends (as on the H100).
  m.clock.after(70ms, [&m, pid = p.pid] {
    m.gpu(0).memory->used -= 20 * kGiB;
    std::filesystem::remove(fmt::format("{}/{}/fd/3", m.proc(), pid));
  });
  ReclaimReport r = m.free({});
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::exiting);
  EXPECT_FALSE(r.actions[0].exited_at.has_value());
  ASSERT_TRUE(r.actions[0].exiting_at.has_value());
  EXPECT_NEAR(*r.actions[0].exiting_at, 0.07, 0.006);  // the first 5 ms look after 0.07 s
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM}));
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_LT(*r.gpus[0].freed_at, 0.1);
  EXPECT_FALSE(release_phases(r.gpus[0]).signal_to_exit.has_value()) << "its exit was not seen";
  EXPECT_TRUE(r.leftovers.empty());
  // The verdict's last look came before the exit; free returned after it.
  auto at = [&](const std::string& name) {
    for (const auto& [step, when] : r.steps)
      if (step == name) return when;
    return -1.0;
  };
  EXPECT_LT(at("verdict look"), 0.1);
  EXPECT_NEAR(at("exits"), 0.1, 1e-3);
  EXPECT_TRUE(m.control.exited(id));
  EXPECT_TRUE(r.notes.empty());
}

// Memory back is not enough: a holder that gave its memory back but is not dying (it
// caught SIGTERM, or a thread of it runs on) is waited for, and SIGKILLed after the
// grace as ever.
TEST(Reclaim, AHolderThatGaveItsMemoryBackButIsNotDyingIsStillWaitedFor) {
  TestMachine m;
  FakeProc p = holder(3000112);
  p.release_after.reset();
  p.script.exits_after_term.reset();  // catches SIGTERM
  p.script.exiting_for = 40ms;        // only after SIGKILL does it die
  auto id = m.spawn(p);
  m.clock.after(70ms, [&m] {
    auto& g = m.gpu(0);
    g.memory->used -= 20 * kGiB;
    g.processes.clear();
  });
  ReclaimOptions options;
  options.escalation.grace = 1s;
  ReclaimReport r = m.free(options);
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM, SIGKILL}));
  ASSERT_EQ(r.actions.size(), 2u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::still_running_after_grace);
  EXPECT_NEAR(r.actions[1].sent_at, 1.0, 0.06);
  EXPECT_TRUE(r.all_freed());
}

TEST(Reclaim, IgnoredSigtermGetsSigkillAfterTheGrace) {
  TestMachine m;
  FakeProc p = holder(3000102);
  p.script.exits_after_term.reset();
  auto id = m.spawn(p);
  ReclaimOptions o;
  o.escalation.grace = 2s;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM, SIGKILL}));
  ASSERT_EQ(r.actions.size(), 2u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::still_running_after_grace);
  EXPECT_EQ(r.actions[1].signal, Signal::sigkill);
  EXPECT_EQ(r.actions[1].via, "pidfd");
  EXPECT_NEAR(r.actions[1].sent_at, 2.0, 1e-3);
  EXPECT_EQ(r.actions[1].outcome, Outcome::exited);
}

TEST(Reclaim, GraceZeroSendsSigkillAtOnce) {
  TestMachine m;
  auto id = m.spawn(holder(3000103));
  ReclaimOptions o;
  o.escalation.grace = 0ms;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGKILL}));
}

TEST(Reclaim, ReusedGoneAndForbiddenPidsAreNeverSignalled) {
  TestMachine m;
  FakeProc a = holder(3000104), b = holder(3000105), c = holder(3000106);
  a.script.open_error = proc::OpenError::reused;
  b.script.open_error = proc::OpenError::no_permission;
  c.script.open_error = proc::OpenError::gone;
  auto ia = m.spawn(a), ib = m.spawn(b), ic = m.spawn(c);
  ReclaimOptions o;
  o.timeout = 2s;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(m.control.signals_of(ia).empty());
  EXPECT_TRUE(m.control.signals_of(ib).empty());
  EXPECT_TRUE(m.control.signals_of(ic).empty());
  ASSERT_EQ(r.actions.size(), 3u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::pid_reused);
  EXPECT_EQ(r.actions[1].outcome, Outcome::permission_denied);
  EXPECT_EQ(r.actions[2].outcome, Outcome::already_gone);
  for (const auto& a : r.actions) EXPECT_EQ(a.signal, Signal::none);
  // Their memory is still held by live holders that were never signalled.
  EXPECT_FALSE(r.all_freed());
  ASSERT_FALSE(r.leftovers.empty());
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::live_holder);
}

// A parent restarts its killed worker 0.5 s later: the new holder matches the
// selection by itself, so it is the next round's target; the parent is reported
// with the command that stops it and left alone (no --stop-respawners).
TEST(Reclaim, RespawnedHolderIsTheNextRoundAndItsParentIsNoted) {
  TestMachine m;
  auto pid = m.spawn(parent(3000200));
  FakeProc first = holder(3000201, 3000200);
  FakeProc second = holder(3000202, 3000200);
  first.then = [&] { m.clock.after(500ms, [&] { m.spawn(second); }); };
  m.spawn(first);
  ReclaimReport r = m.free({});
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.rounds.size(), 2u);
  ASSERT_EQ(r.rounds[1].targets.size(), 1u);
  EXPECT_EQ(r.rounds[1].targets[0].id.pid, 3000202);
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_EQ(r.respawners[0].id, pid);
  EXPECT_EQ(r.respawners[0].respawns, 1);
  EXPECT_FALSE(r.respawners[0].included);
  EXPECT_EQ(r.respawners[0].stop_hint, "gpureap free --gpu 0 --stop-respawners (or: kill 3000200)");
  EXPECT_TRUE(m.control.signals_of(pid).empty());
  // The parent lives on: the GPU was watched for --settle after the release.
  EXPECT_NEAR(r.settled_seconds, 5.0, 0.3);
}

// A torchrun elastic agent that restarts its killed worker: reported as what it is, with
// how it stops (issue 24), not as an anonymous parent.
TEST(Reclaim, ATorchrunAgentIsNamedAsTheRespawnerWithItsStopCommand) {
  TestMachine m;
  FakeProc agent = parent(3000250);
  agent.comm = "torchrun";
  agent.cmdline = "/usr/bin/python3 /usr/local/bin/torchrun --nproc-per-node 1 train.py";
  m.spawn(agent);
  FakeProc first = holder(3000251, 3000250);
  FakeProc second = holder(3000252, 3000250);
  first.then = [&] { m.clock.after(300ms, [&] { m.spawn(second); }); };
  m.spawn(first);
  ReclaimReport r = m.free({});
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_EQ(r.respawners[0].stop_hint,
            "it is torchrun's elastic agent, which restarts failed workers up to "
            "--max-restarts: stop it and its workers with kill 3000250 (SIGTERM), or gpureap "
            "free --gpu 0 --stop-respawners");
}

// A restart slower than --settle (a torch worker's import and CUDA context take seconds)
// is still caught while the replacement is visibly on its way: a new child of the killed
// holder's parent, with the holder's name, keeps the verdict waiting until it takes the GPU.
TEST(Reclaim, AReplacementSlowerThanTheSettleIsWatchedWhileItStarts) {
  TestMachine m;
  auto pid = m.spawn(parent(3000260));
  FakeProc first = holder(3000261, 3000260);
  FakeProc starting = holder(3000262, 3000260);  // the replacement, not yet on the GPU
  starting.gpu.reset();
  starting.bytes = 0;
  FakeProc second = holder(3000263, 3000260);  // what then takes the GPU
  first.then = [&] {
    m.clock.after(300ms, [&] { m.spawn(starting); });
    m.clock.after(3s, [&] {  // the replacement (here under a pid of its own) holds the GPU
      m.end_process(starting);
      m.spawn(second);
    });
  };
  m.spawn(first);
  ReclaimOptions o;
  o.settle = 1s;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.rounds.size(), 2u);
  ASSERT_EQ(r.rounds[1].targets.size(), 1u);
  EXPECT_EQ(r.rounds[1].targets[0].id.pid, 3000263);
  std::string notes;
  for (const auto& n : r.notes) notes += n + "\n";
  EXPECT_NE(notes.find("pid 3000262 (python3) was started by pid 3000260 after its holder was killed"),
            std::string::npos)
      << notes;
  EXPECT_TRUE(m.control.signals_of(pid).empty());
}

// Each GPU of a free is verified on its own: one that releases late is waited for, and
// the others are freed when their own memory is back (case study 1's GPU 3).
TEST(Reclaim, AGpuThatReleasesLateIsWaitedForAndTheOthersAreFreedFirst) {
  TestMachine m;
  FakeProc fast = holder(3000270, 1, 0);
  FakeProc slow = holder(3000271, 1, 1);
  slow.release_after = 1500ms;
  m.spawn(fast);
  m.spawn(slow);
  ReclaimOptions o;
  o.selection.gpus = gpu::devs({0, 1});
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.gpus.size(), 2u);
  ASSERT_TRUE(r.gpus[0].freed_at && r.gpus[1].freed_at);
  EXPECT_EQ(r.gpus[1].gpu, gpu::dev(1));
  EXPECT_GE(*r.gpus[1].freed_at, 1.5);
  EXPECT_LT(*r.gpus[0].freed_at, *r.gpus[1].freed_at);
}

TEST(Reclaim, StopRespawnersSignalsTheParent) {
  TestMachine m;
  auto pid = m.spawn(parent(3000300));
  FakeProc first = holder(3000301, 3000300);
  FakeProc second = holder(3000302, 3000300);
  first.then = [&] { m.clock.after(500ms, [&] { m.spawn(second); }); };
  m.spawn(first);
  ReclaimOptions o;
  o.stop_respawners = true;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.rounds.size(), 2u);
  EXPECT_TRUE(r.rounds[1].contains(pid));
  EXPECT_EQ(m.control.signals_of(pid), sigs({SIGTERM}));
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_TRUE(r.respawners[0].included);
  // Round 1 watched a little while the parent lived (the restart came 0.3 s after
  // the release); after round 2 the parent is gone and no settle window follows.
  EXPECT_LT(r.settled_seconds, 0.5);
  EXPECT_LT(r.seconds, 2.0);
}

TEST(Reclaim, LiveParentThatRestartsNothingIsWatchedForSettleThenListed) {
  TestMachine m;
  auto pid = m.spawn(parent(3000400));
  m.spawn(holder(3000401, 3000400));
  ReclaimOptions o;
  o.settle = 2s;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  EXPECT_NEAR(r.settled_seconds, 2.0, 0.3);
  EXPECT_NEAR(r.seconds, 2.3, 0.3);
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_EQ(r.respawners[0].id, pid);
  EXPECT_EQ(r.respawners[0].respawns, 0);

  TestMachine quick;
  quick.spawn(parent(3000400));
  quick.spawn(holder(3000401, 3000400));
  o.settle = 0ms;
  ReclaimReport q = quick.free(o);
  EXPECT_TRUE(q.all_freed());
  EXPECT_EQ(q.settled_seconds, 0);
  EXPECT_LT(q.seconds, 1.0);
  // Without waiting, the live parent is still named as one that could restart the
  // worker, with the command that stops it.
  ASSERT_EQ(q.respawners.size(), 1u);
  EXPECT_EQ(q.respawners[0].id.pid, 3000400);
  EXPECT_EQ(q.respawners[0].respawns, 0);
  EXPECT_FALSE(q.respawners[0].stop_hint.empty());
}

// A worker that is a system service's main process: its parent is pid 1, yet
// systemd restarts it (Restart=always) seconds after the kill, as a torch worker
// takes 3-10 s to take the GPU again. The unit is asked for, named with its stop
// command, and settled on; the retake is the next round.
struct FakeSystemd {
  std::optional<std::string> restart;
  std::vector<std::string> asked;
  RestartPolicyFn fn() {
    return [this](const std::string& unit) {
      asked.push_back(unit);
      return restart;
    };
  }
};

FakeProc service_main(pid_t pid) {
  FakeProc p = holder(pid);
  p.cgroup = "/system.slice/llm.service";
  return p;
}

TEST(Reclaim, ServiceWithRestartAlwaysIsNamedAndSettledOn) {
  TestMachine m;
  FakeProc first = service_main(3000450), second = service_main(3000451);
  first.then = [&] { m.clock.after(3s, [&] { m.spawn(second); }); };
  auto id = m.spawn(first);
  FakeSystemd systemd{"always", {}};
  ReclaimOptions o;
  o.restart_policy = systemd.fn();
  ReclaimReport r = m.free(o);
  EXPECT_EQ(systemd.asked, std::vector<std::string>{"llm.service"});
  EXPECT_TRUE(r.all_freed());
  // The restart 3 s after the kill fell in the settle window: killed in round 2.
  ASSERT_EQ(r.rounds.size(), 2u);
  ASSERT_EQ(r.rounds[1].targets.size(), 1u);
  EXPECT_EQ(r.rounds[1].targets[0].id.pid, 3000451);
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_EQ(r.respawners[0].id, id);
  EXPECT_EQ(r.respawners[0].unit, "llm.service");
  EXPECT_EQ(r.respawners[0].restart, "always");
  EXPECT_EQ(r.respawners[0].respawns, 1);
  EXPECT_EQ(r.respawners[0].stop_hint, "systemctl stop llm.service");
  EXPECT_NEAR(r.settled_seconds, 5.0, 0.3);
}

TEST(Reclaim, ParentThatIsAServiceMainProcessGetsItsUnitNamed) {
  TestMachine m;
  FakeProc launcher = parent(3000460);
  launcher.cgroup = "/system.slice/llm.service";
  auto pid = m.spawn(launcher);
  FakeProc worker = holder(3000461, 3000460);
  worker.cgroup = launcher.cgroup;
  m.spawn(worker);
  FakeSystemd systemd{"on-failure", {}};
  ReclaimOptions o;
  o.restart_policy = systemd.fn();
  o.settle = 1s;
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  ASSERT_EQ(r.respawners.size(), 1u);
  EXPECT_EQ(r.respawners[0].id, pid);
  EXPECT_EQ(r.respawners[0].unit, "llm.service");
  EXPECT_EQ(r.respawners[0].restart, "on-failure");
  EXPECT_EQ(r.respawners[0].stop_hint, "systemctl stop llm.service");
  EXPECT_TRUE(m.control.signals_of(pid).empty());
}

TEST(Reclaim, ServiceWithoutRestartOrWithoutAnswerIsNoClaim) {
  for (std::optional<std::string> answer :
       {std::optional<std::string>("no"), std::optional<std::string>()}) {
    // nullopt: systemctl missing, failing or timing out (systemd_unit_test.cc).
    TestMachine m;
    m.spawn(service_main(3000470));
    FakeSystemd systemd{answer, {}};
    ReclaimOptions o;
    o.restart_policy = systemd.fn();
    ReclaimReport r = m.free(o);
    EXPECT_EQ(systemd.asked.size(), 1u);
    EXPECT_TRUE(r.all_freed());
    EXPECT_TRUE(r.respawners.empty()) << answer.value_or("(no answer)");
    EXPECT_EQ(r.settled_seconds, 0) << "an orphan of a unit that stays down costs no time";
  }
}

TEST(Reclaim, OrphanOutsideAServiceNeverAsksSystemd) {
  TestMachine m;
  m.spawn(holder(3000480));  // pid 1's child, in a session scope
  FakeSystemd systemd{"always", {}};
  ReclaimOptions o;
  o.restart_policy = systemd.fn();
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(systemd.asked.empty());
  EXPECT_TRUE(r.respawners.empty());
}

TEST(Reclaim, InterruptDuringTheGraceStopsAndReports) {
  TestMachine m;
  FakeProc p = holder(3000500);
  p.script.exits_after_term.reset();
  auto id = m.spawn(p);
  std::atomic<bool> interrupted{false};
  m.set_interrupt_flag(&interrupted);
  m.clock.after(1s, [&] { interrupted = true; });
  ReclaimReport r = m.free({});
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.all_freed());
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM}));  // no SIGKILL after Ctrl-C
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::still_running);
  EXPECT_LT(r.seconds, 1.1);
  EXPECT_TRUE(r.leftovers.empty());  // an interrupted free classifies nothing
}

TEST(Reclaim, InterruptDuringTheReleaseWaitStopsAndReports) {
  TestMachine m;
  FakeProc p = holder(3000501);
  p.release_after = 10s;
  m.spawn(p);
  std::atomic<bool> interrupted{false};
  m.set_interrupt_flag(&interrupted);
  m.clock.after(1s, [&] { interrupted = true; });
  ReclaimReport r = m.free({});
  EXPECT_TRUE(r.interrupted);
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].outcome, Outcome::exited);
  EXPECT_FALSE(r.gpus[0].freed);
  EXPECT_LT(r.seconds, 1.1);
}

TEST(Reclaim, SourceFailingMidRunIsReportedNotFreed) {
  TestMachine m;
  FakeProc p = holder(3000600);
  p.release_after = 2s;
  m.spawn(p);
  m.clock.after(500ms, [&] { m.nvml().set_failure(gpu::SourceState::query_failed, "GPU is lost"); });
  ReclaimReport r = m.free({});
  EXPECT_EQ(r.source_error, "GPU is lost");
  EXPECT_FALSE(r.all_freed());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_FALSE(r.gpus[0].measured);  // `free` exits 3, not 1: unmeasured is not "still held"
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::source_failed);
  EXPECT_EQ(r.leftovers[0].evidence,
            std::vector<std::string>{"NVML stopped answering while verifying: GPU is lost"});
  EXPECT_LT(r.seconds, 1.0);
}

TEST(Reclaim, DriverHeldMemoryIsClassifiedOnceItStalls) {
  TestMachine m;
  FakeProc p = holder(3000700);
  p.release_after.reset();  // the driver keeps it
  m.spawn(p);
  // Driver-held once flat past the release budget since its holder's exit (3 s here).
  m.node().releases().set_budget({3s});
  ReclaimOptions o;
  ReclaimReport r = m.free(o);
  EXPECT_FALSE(r.all_freed());
  // Classified after about 3 s without a fall, not after --timeout (60 s).
  EXPECT_GT(r.seconds, 3.0);
  EXPECT_LT(r.seconds, 4.0);
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::driver_held);
  EXPECT_NE(r.leftovers[0].next_step.find("gpureap free --reset --gpu 0 --yes"), std::string::npos);
  EXPECT_TRUE(r.resets.empty());
}

// W4-11(b): with no recorded baseline, a killed holder's memory that stays made later looks
// estimate the baseline at the cap, so one report gave three baselines ("(baseline 2.00
// MiB)", "threshold 412 MiB (baseline 819 MiB + tolerance)", "1.20 GiB above the idle
// baseline"). Every figure of the report reads the free's one baseline now.
TEST(Reclaim, W4_11_OneReportGivesOneBaseline) {
  TestMachine m;
  m.gpu(0).uuid = "GPU-never-seen-idle";  // no recorded baseline: it is estimated
  m.gpu(0).memory->used = 2 * kMiB;       // what the idle card uses
  FakeProc p = holder(3000750);
  p.release_after.reset();  // the driver keeps it
  m.spawn(p);
  m.node().releases().set_budget({3s});
  ReclaimReport r = m.free({});
  ASSERT_EQ(r.gpus.size(), 1u);
  ASSERT_FALSE(r.gpus[0].baseline_recorded);
  const std::string baseline = format_bytes(r.gpus[0].baseline);
  const std::string above = format_bytes(r.gpus[0].after() - r.gpus[0].baseline);
  ASSERT_EQ(r.leftovers.size(), 1u);
  std::string evidence;
  for (const auto& e : r.leftovers[0].evidence) evidence += e + "\n";
  EXPECT_NE(evidence.find("(baseline " + baseline + " + tolerance)"), std::string::npos)
      << evidence;
  EXPECT_NE(evidence.find(above + " above the idle baseline"), std::string::npos) << evidence;
}

TEST(Reclaim, AGhostGpuIsHeldAndClassifiedThoughItsMemoryIsAtBaseline) {
  TestMachine m;
  m.gpu(0).utilization_gpu = 100;  // busy, no process, no memory: a ghost
  m.gpu(0).persistence_mode = false;
  m.gpu(1).utilization_gpu = 0;
  ReclaimOptions o;
  o.selection.gpus = gpu::devs({0, 1});
  ReclaimReport r = m.free(o);
  EXPECT_FALSE(r.all_freed());
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].gpu, gpu::dev(0));
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::ghost_gpu);
  std::string evidence;
  for (const auto& e : r.leftovers[0].evidence) evidence += e + "\n";
  EXPECT_NE(evidence.find("100% 100% 100% 100% 100%"), std::string::npos) << evidence;
  EXPECT_NE(evidence.find("persistence mode off"), std::string::npos) << evidence;
  EXPECT_NE(r.leftovers[0].next_step.find("--reset --gpu 0"), std::string::npos);
  for (const auto& g : r.gpus) {
    if (g.gpu == gpu::dev(1)) {
      EXPECT_TRUE(g.freed) << "an idle GPU stays free";
    }
  }
}

TEST(Reclaim, SlowReleaseIsWaitedForNotClassified) {
  TestMachine m;
  FakeProc p = holder(3000701);
  p.release_after = 2s;
  m.spawn(p);
  // The memory falls in one step at 2.1 s: it is "still releasing" until then, and
  // the stall rule (3 s) must not cut it short.
  ReclaimReport r = m.free({});
  EXPECT_TRUE(r.all_freed());
  EXPECT_NEAR(*r.gpus[0].freed_at, 2.1, 0.05);
}

TEST(Reclaim, SurvivorInTheDriverIsExitingInDriver) {
  TestMachine m;
  FakeProc p = holder(3000800);
  p.script.exits_after_term.reset();
  p.script.exits_after_kill.reset();
  p.state = 'D';
  auto id = m.spawn(p);
  ReclaimOptions o;
  o.escalation.grace = 1s;
  o.escalation.kill_wait = 1s;
  o.timeout = 3s;
  ReclaimReport r = m.free(o);
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM, SIGKILL}));
  ASSERT_EQ(r.actions.size(), 2u);
  EXPECT_EQ(r.actions[1].outcome, Outcome::still_running);
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::exiting_in_driver);
  EXPECT_EQ(r.leftovers[0].pids, std::vector<pid_t>{3000800});
}

TEST(Reclaim, HolderLeftAloneByTheSelectionKeepsItsMemoryAndTheRestIsFreed) {
  TestMachine m;
  m.spawn(holder(3000900));
  FakeProc other = holder(3000901);
  other.bytes = 10 * kGiB;
  auto kept = m.spawn(other);
  ReclaimOptions o;
  o.selection.pids = {3000900};
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(r.gpus[0].left_alone_bytes, 10 * kGiB);
  EXPECT_EQ(r.gpus[0].after(), 10 * kGiB);
  EXPECT_TRUE(m.control.signals_of(kept).empty());
}

// Review §3.4: a server on GPU 0 whose workers hold GPU 0 and GPU 1. Freeing the server
// on GPU 0 signals the server alone: the worker on GPU 1 (not selected) and the one the
// selection does not name are left alone, in every round.
TEST(Reclaim, GpuHoldingDescendantsOutsideTheSelectionAreNeverSignalled) {
  TestMachine m;
  FakeProc server = holder(3001100);
  server.comm = "sglang-server";
  m.spawn(server);
  auto same_gpu = m.spawn(holder(3001101, 3001100, 0));
  auto other_gpu = m.spawn(holder(3001102, 3001100, 1));
  FakeProc helper = parent(3001103);
  helper.ppid = 3001100;
  helper.comm = "tokenizer";
  auto tokenizer = m.spawn(helper);
  ReclaimOptions o;
  o.selection.pids = {3001100};
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(m.control.signals_of(same_gpu), sigs({}));
  EXPECT_EQ(m.control.signals_of(other_gpu), sigs({}));
  EXPECT_EQ(m.control.signals_of(tokenizer), sigs({SIGTERM}));
  ASSERT_EQ(m.plan.targets.size(), 2u);
  EXPECT_EQ(m.plan.targets[0].gpu_bytes, 20 * kGiB);
  ASSERT_EQ(m.plan.skipped.size(), 2u);
  for (const auto& s : m.plan.skipped) {
    EXPECT_FALSE(m.plan.contains(s.id));
    EXPECT_NE(s.reason.find("a descendant of 3001100 (sglang-server), not signalled with it"),
              std::string::npos)
        << s.reason;
  }
  EXPECT_EQ(r.gpus[0].left_alone_bytes, 20 * kGiB);
}

// W2-01: the reaper announced one orphan of GPU 0 and its reclaim's later rounds re-selected
// every other holder of the GPU. The exact set (Filters::ids) travels with the selection
// into every re-scan: the other holder is never signalled.
TEST(Reclaim, W2_01_LaterRoundsNeverAddAProcessOutsideTheExactSet) {
  TestMachine m;
  auto due = m.spawn(holder(3001200));
  FakeProc young = holder(3001201);
  young.bytes = 7 * kGiB;
  auto other = m.spawn(young);
  ReclaimOptions o;
  o.selection.ids = {due};
  o.max_rounds = 5;
  ReclaimReport r = m.free(o);
  EXPECT_EQ(m.control.signals_of(due), sigs({SIGTERM}));
  EXPECT_EQ(m.control.signals_of(other), sigs({}));
  for (const auto& round : r.rounds)
    for (const auto& t : round.targets) EXPECT_EQ(t.id, due);
  EXPECT_TRUE(r.all_freed());
  EXPECT_EQ(r.gpus[0].left_alone_bytes, 7 * kGiB);
}

TEST(Reclaim, ResetIsNotAttemptedWhenItsPreconditionsFail) {
  TestMachine m;
  FakeProc p = holder(3001000);
  p.release_after.reset();
  m.spawn(p);
  m.gpu(0).persistence_mode = true;
  ReclaimOptions o;
  o.reset = true;
  ReclaimReport r = m.free(o);
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_FALSE(r.resets[0].attempted);
  EXPECT_TRUE(
      std::any_of(r.resets[0].blockers.begin(), r.resets[0].blockers.end(),
                  [](const std::string& b) { return b.starts_with("persistence mode is on"); }));
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::driver_held);
  EXPECT_FALSE(r.all_freed());
}

// `free --deadline`: the grace and the wait after SIGKILL shrink to fit, and the whole
// reclaim, classification included, ends by it.
TEST(Reclaim, ADeadlineShrinksTheGraceAndBoundsTheWhole) {
  TestMachine m;
  FakeProc p = holder(3000201);
  p.script.exits_after_term.reset();  // ignores SIGTERM
  auto id = m.spawn(p);
  ReclaimOptions o;  // grace 5 s, timeout 60 s
  o.deadline = m.clock.now() + 2s;
  ReclaimReport r = m.free(o);
  EXPECT_EQ(m.control.signals_of(id), sigs({SIGTERM, SIGKILL}));
  ASSERT_EQ(r.actions.size(), 2u);
  // Half of the 1.5 s left before the time kept for the last reading.
  EXPECT_NEAR(r.actions[1].sent_at, 0.75, 1e-3);
  EXPECT_TRUE(r.all_freed());
  EXPECT_LE(r.seconds, 2.0);
}

TEST(Reclaim, ADeadlineEndsTheWaitForMemoryThatStaysHeld) {
  TestMachine m;
  FakeProc p = holder(3000202);
  p.release_after.reset();  // the driver keeps it
  m.spawn(p);
  ReclaimOptions o;  // stalled_after 3 s, timeout 60 s: without the deadline, 3 s
  o.deadline = m.clock.now() + 1500ms;
  ReclaimReport r = m.free(o);
  EXPECT_FALSE(r.all_freed());
  ASSERT_FALSE(r.leftovers.empty());
  EXPECT_LE(r.seconds, 1.5);
  EXPECT_GE(r.seconds, 1.0);  // it did watch until the time kept for the last reading
}

TEST(Reclaim, NothingIsSignalledOnceTheDeadlineHasPassed) {
  TestMachine m;
  auto id = m.spawn(holder(3000203));
  ReclaimOptions o;
  o.deadline = m.clock.now();
  ReclaimReport r = m.free(o);
  EXPECT_TRUE(m.control.signals_of(id).empty());
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.all_freed());
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::live_holder);
}

// Plans the way free does (look, plan), then lets `change` happen before the reclaim
// starts: what the fresh look just before the signal must see (W2-20).
ReclaimReport free_after(TestMachine& m, ReclaimOptions o, const std::function<void()>& change) {
  if (o.selection.gpus.empty()) o.selection.gpus = gpu::devs({0});
  inventory::Inventory inv = m.node().look();
  m.plan = make_plan(inv, o.selection, CallerContext::current(m.node().proc_root()));
  change();
  return reclaim(m.node(), m.control, inv, m.plan, o, {});
}

// The process closes /dev/nvidia<gpu> and leaves NVML's list, and lives on.
void close_device(TestMachine& m, const FakeProc& p) {
  std::filesystem::remove(fmt::format("{}/{}/fd/3", m.proc(), p.pid));
  auto& g = m.gpu(*p.gpu);
  std::erase_if(g.processes, [&](const gpu::GpuProcess& x) {
    return x.pid == static_cast<std::uint32_t>(p.pid);
  });
  g.memory->used -= p.bytes;
}

// W2-20: a target that closed its device files since the plan was made (the agent's
// answer keeps it until its next full scan) is not signalled, and the report says why.
TEST(Reclaim, W2_20_ATargetThatNoLongerHoldsTheGpuIsNotSignalled) {
  TestMachine m;
  FakeProc p = holder(3000901);
  p.bytes = 0;  // a monitoring script: the device open, no memory
  auto id = m.spawn(p);
  ReclaimReport r = free_after(m, {}, [&] { close_device(m, p); });
  ASSERT_EQ(m.plan.targets.size(), 1u);
  EXPECT_TRUE(m.control.signals_of(id).empty());
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].signal, Signal::none);
  EXPECT_EQ(r.actions[0].outcome, Outcome::not_signalled);
  EXPECT_NE(r.actions[0].detail.find("no longer holds GPU 0"), std::string::npos)
      << r.actions[0].detail;
  EXPECT_TRUE(r.all_freed());
}

// W2-20: its helper (a descendant holding no GPU) goes with it; a target that still
// holds the GPU, and its helper, are signalled as planned.
TEST(Reclaim, W2_20_DescendantsFollowTheirHoldersConfirmation) {
  TestMachine m;
  FakeProc stale = holder(3000911);
  stale.bytes = 0;
  FakeProc stale_helper = parent(3000912);
  stale_helper.ppid = stale.pid;
  FakeProc live = holder(3000913);
  FakeProc live_helper = parent(3000914);
  live_helper.ppid = live.pid;
  auto stale_id = m.spawn(stale);
  auto stale_helper_id = m.spawn(stale_helper);
  auto live_id = m.spawn(live);
  auto live_helper_id = m.spawn(live_helper);
  ReclaimReport r = free_after(m, {}, [&] { close_device(m, stale); });
  ASSERT_EQ(m.plan.targets.size(), 4u);
  EXPECT_TRUE(m.control.signals_of(stale_id).empty());
  EXPECT_TRUE(m.control.signals_of(stale_helper_id).empty());
  EXPECT_EQ(m.control.signals_of(live_id), sigs({SIGTERM}));
  EXPECT_EQ(m.control.signals_of(live_helper_id), sigs({SIGTERM}));
  std::size_t refused = 0;
  for (const auto& a : r.actions)
    if (a.outcome == Outcome::not_signalled) {
      ++refused;
      EXPECT_TRUE(a.id == stale_id || a.id == stale_helper_id) << a.id.pid;
    }
  EXPECT_EQ(refused, 2u);
  EXPECT_TRUE(r.all_freed());
}

// W2-23: a GPU the first look could not read is measured directly before any signal,
// then waited for like any other: a 1.5 s release is freed, not "driver-held".
TEST(Reclaim, W2_23_AGpuUnreadableAtTheFirstLookIsMeasuredAndWaitedFor) {
  TestMachine m;
  FakeProc p = holder(3000921);
  p.release_after = 1500ms;
  m.spawn(p);
  ReclaimOptions o;
  o.selection.gpus = gpu::devs({0});
  inventory::Inventory inv = m.node().look();
  inv.gpus[0].info.memory.reset();  // as the agent answered while its NVML failed
  inv.gpus[0].info.problem = "NVML: nvmlInit_v2: Driver Not Loaded";
  m.plan = make_plan(inv, o.selection, CallerContext::current(m.node().proc_root()));
  ReclaimReport r = reclaim(m.node(), m.control, inv, m.plan, o, {});
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_TRUE(r.gpus[0].measured);
  EXPECT_TRUE(r.gpus[0].freed);
  EXPECT_EQ(r.gpus[0].before, 20 * kGiB);
  EXPECT_NEAR(*r.gpus[0].freed_at, 1.6, 0.05);
  EXPECT_TRUE(r.leftovers.empty());
  EXPECT_TRUE(r.all_freed());
}

// W2-23 (wave 4): the agent's answer listed the holder, but its figure for the GPU was
// read before the allocation (NVML recovering): "before" is read directly before the
// first signal, never taken from that stale figure nor from a reading after the signal.
TEST(Reclaim, W2_23_TheBeforeFigureIsReadBeforeTheSignalNotFromAStaleAnswer) {
  TestMachine m;
  FakeProc p = holder(3000925);
  p.release_after = 1500ms;
  m.spawn(p);
  ReclaimOptions o;
  o.selection.gpus = gpu::devs({0});
  inventory::Inventory inv = m.node().look();
  inv.source = "agent";
  inv.gpus[0].info.memory->used = inv.gpus[0].baseline.bytes;  // its figure predates the holder
  m.plan = make_plan(inv, o.selection, CallerContext::current(m.node().proc_root()));
  ReclaimReport r = reclaim(m.node(), m.control, inv, m.plan, o, {});
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_TRUE(r.gpus[0].before_read);
  EXPECT_EQ(r.gpus[0].before, 20 * kGiB);
  EXPECT_TRUE(r.gpus[0].freed);
}

// W2-23: a GPU never measured is never freed, and the wait for it is bounded.
TEST(Reclaim, W2_23_AGpuNeverMeasuredIsNeverFreed) {
  TestMachine m;
  m.spawn(holder(3000931));
  m.nvml().set_gpu_failure(gpu::dev(0), "GPU 0: Unknown Error");
  ReclaimReport r = m.free({});
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_FALSE(r.gpus[0].measured);
  EXPECT_FALSE(r.gpus[0].freed);
  EXPECT_FALSE(r.all_freed());
  ASSERT_EQ(r.leftovers.size(), 1u);
  EXPECT_EQ(r.leftovers[0].cls, LeftoverClass::source_failed);
  EXPECT_LE(r.seconds, 10.0);
}

// Verdicts are measurements at the end: memory taken again after it was seen freed
// (here by a process the selection does not cover) is not reported freed.
TEST(Reclaim, AGpuTakenAgainBeforeTheVerdictIsNotFreed) {
  TestMachine m;
  m.spawn(parent(3000940));  // alive: the verdict waits out --settle
  FakeProc p = holder(3000941, 3000940);
  FakeProc late = holder(3000942, 1, 0);
  late.comm = "other";
  late.cmdline = "other_job";
  p.then = [&] { m.clock.after(400ms, [&] { m.spawn(late); }); };
  m.spawn(p);
  ReclaimOptions o;
  o.selection.match = Pattern::compile("sglang").value();
  ReclaimReport r = m.free(o);
  EXPECT_FALSE(r.all_freed());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_FALSE(r.gpus[0].freed);
}

}  // namespace
}  // namespace gpureap::reclaim
