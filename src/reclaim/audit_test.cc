// The audit trail's choke point (audited_control.h): every signal that passes an
// AuditedControl becomes a record naming the process it reached, and a free ends with
// its verdict. On the engine's fakes (the flows as free, the reaper and the epilog run
// them), and on a real child through the kernel's pidfds.

#include <gtest/gtest.h>

#include <csignal>

#include "proc/process_handle.h"
#include "proc/test_children.h"
#include "reclaim/audited_control.h"
#include "reclaim/free_flow.h"
#include "reclaim/test_machine.h"
#include "util/enum_names.h"

namespace gpureap::reclaim {
// Named, not anonymous: the debug build compiles tests in batches (unity build).
namespace audit_test {

using namespace std::chrono_literals;
using testing::FakeProc;
using testing::kGiB;
using testing::TestMachine;

FakeProc audited_holder(pid_t pid, unsigned gpu) {
  FakeProc p;
  p.pid = pid;
  p.gpu = gpu;
  p.bytes = 8 * kGiB;
  p.comm = "python3";
  p.cgroup =
      "/system.slice/docker-3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8.scope";
  return p;
}

FreeOutcome free_gpus(TestMachine& m, std::vector<gpu::DeviceId> gpus,
                      const FreeSteps& steps = {}) {
  ReclaimOptions options;
  options.selection.gpus = std::move(gpus);
  auto inv = m.node().look();
  return free_selection(m.node(), m.audited(), inv, CallerContext::current(m.node().proc_root()),
                        options, steps);
}

std::vector<const SignalRecord*> signals_in(const CapturedAudit& audit) {
  std::vector<const SignalRecord*> out;
  for (const auto& r : audit.records)
    if (const auto* s = std::get_if<SignalRecord>(&r.what)) out.push_back(s);
  return out;
}

TEST(AuditTrail, AFreeRecordsTheSignalWithTheTargetsIdentityAndEndsWithItsVerdict) {
  TestMachine m;
  auto id = m.spawn(audited_holder(3200101, 1));
  auto out = free_gpus(m, gpu::devs({1}));
  ASSERT_EQ(out.verdict, FreeVerdict::freed);

  ASSERT_EQ(m.audit.records.size(), 2u);
  const AuditRecord& first = m.audit.records[0];
  EXPECT_EQ(first.actor, AuditActor::free);
  EXPECT_EQ(first.op, m.trail.op());
  const auto* s = std::get_if<SignalRecord>(&first.what);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->target.id, id);
  EXPECT_EQ(s->target.comm, "python3");
  EXPECT_EQ(s->target.uid, ::geteuid());  // from the fixture's /proc/PID/status
  EXPECT_EQ(s->target.cgroup, audited_holder(0, 0).cgroup);
  EXPECT_EQ(s->target.container, "docker:3f2a1b4c5d6e");
  // Its server instance, as the look grouped it (the fixture's process group).
  EXPECT_FALSE(s->target.instance.empty());
  ASSERT_EQ(s->gpus.size(), 1u);
  EXPECT_EQ(s->gpus[0].id, gpu::DeviceId{1});
  EXPECT_EQ(s->gpus[0].uuid, "GPU-fake-1");
  EXPECT_EQ(s->bytes, 8 * kGiB);
  EXPECT_EQ(s->signal, SIGTERM);
  EXPECT_EQ(s->via, Delivery::pidfd);
  EXPECT_EQ(s->result, SignalResult::delivered);

  const auto* v = std::get_if<VerdictRecord>(&m.audit.records[1].what);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->verdict, AuditVerdict::freed);
  EXPECT_EQ(v->signals, 1u);
  ASSERT_EQ(v->gpus.size(), 1u);
  EXPECT_EQ(v->gpus[0].gpu.uuid, "GPU-fake-1");
  EXPECT_TRUE(v->gpus[0].freed);
  EXPECT_EQ(v->gpus[0].before_bytes, 8 * kGiB);
  EXPECT_EQ(m.audit.records[1].op, first.op);
}

TEST(AuditTrail, EverySignalOfAnEscalationIsRecordedInOrder) {
  TestMachine m;
  FakeProc stubborn = audited_holder(3200201, 0);
  stubborn.script.exits_after_term = std::nullopt;  // ignores SIGTERM
  auto id = m.spawn(stubborn);
  ReclaimOptions options;
  options.selection.gpus = gpu::devs({0});
  options.escalation.grace = 300ms;
  auto inv = m.node().look();
  auto out = free_selection(m.node(), m.audited(), inv,
                            CallerContext::current(m.node().proc_root()), options);
  ASSERT_EQ(out.verdict, FreeVerdict::freed);
  // What the process received is exactly what the trail says was sent.
  std::vector<int> recorded;
  for (const auto* s : signals_in(m.audit)) {
    EXPECT_EQ(s->target.id, id);
    recorded.push_back(s->signal);
  }
  EXPECT_EQ(recorded, m.control.signals_of(id));
  EXPECT_EQ(recorded, (std::vector<int>{SIGTERM, SIGKILL}));
}

TEST(AuditTrail, NothingSignalledMeansNoRecord) {
  TestMachine m;
  m.spawn(audited_holder(3200301, 0));
  FreeSteps steps;
  steps.go_ahead = [](const Plan&) { return false; };  // --dry-run, or not confirmed
  EXPECT_EQ(free_gpus(m, gpu::devs({0}), steps).verdict, FreeVerdict::stopped);
  EXPECT_EQ(free_gpus(m, gpu::devs({1})).verdict, FreeVerdict::nothing_idle);
  EXPECT_TRUE(m.audit.records.empty());
}

TEST(AuditTrail, MemoryStillHeldIsTheVerdict) {
  TestMachine m;
  FakeProc p = audited_holder(3200401, 0);
  p.release_after = std::nullopt;  // the driver keeps the memory
  m.spawn(p);
  ReclaimOptions options;
  options.selection.gpus = gpu::devs({0});
  options.timeout = 2s;
  auto inv = m.node().look();
  auto out = free_selection(m.node(), m.audited(), inv,
                            CallerContext::current(m.node().proc_root()), options);
  ASSERT_EQ(out.verdict, FreeVerdict::still_held);
  const auto* v = std::get_if<VerdictRecord>(&m.audit.records.back().what);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->verdict, AuditVerdict::still_held);
  ASSERT_EQ(v->gpus.size(), 1u);
  EXPECT_FALSE(v->gpus[0].freed);
  EXPECT_EQ(v->gpus[0].after_bytes, 8 * kGiB);
}

TEST(AuditTrail, ATargetGoneBeforeItsSignalIsRecordedAsAlreadyGone) {
  TestMachine m;
  auto id = m.spawn(audited_holder(3200501, 0));
  Target t;
  t.id = id;
  auto opened = m.audited().open(t, true);
  ASSERT_TRUE(opened.has_value());
  m.control.exit_now(id);
  EXPECT_FALSE((*opened)->signal(SIGTERM).has_value());
  ASSERT_EQ(m.audit.records.size(), 1u);
  const auto& s = std::get<SignalRecord>(m.audit.records[0].what);
  EXPECT_EQ(s.result, SignalResult::already_gone);
  EXPECT_TRUE(s.error.empty());
  // A process that could not be opened was never signalled: no record.
  EXPECT_FALSE(m.audited().open(t, true).has_value());
  EXPECT_EQ(m.audit.records.size(), 1u);
}

TEST(AuditTrail, ARefusedSignalKeepsTheKernelsReason) {
  CapturedAudit audit;
  AuditCaller caller;
  caller.pid = 4242;
  caller.user = "alice";
  AuditTrail trail(audit, AuditActor::slurm_epilog, caller,
                   [] { return WallTime(std::chrono::seconds(1748779207)); });
  trail.know_gpu(gpu::DeviceId{3}, "GPU-abc");
  AuditTarget target;
  target.id = {777, 12345};
  Result<void> refused =
      std::unexpected(Error{"signal 15 to process 777: Operation not permitted", EPERM});
  trail.signal(target, gpu::devs({3}), kGiB, SIGTERM, Delivery::pidfd, refused);
  ASSERT_EQ(audit.records.size(), 1u);
  const auto& r = audit.records[0];
  EXPECT_EQ(r.op, "4242-1748779207000");
  EXPECT_EQ(r.time, WallTime(std::chrono::seconds(1748779207)));
  EXPECT_EQ(r.actor, AuditActor::slurm_epilog);
  EXPECT_EQ(r.caller.user, "alice");
  const auto& s = std::get<SignalRecord>(r.what);
  EXPECT_EQ(s.result, SignalResult::refused);
  EXPECT_EQ(s.error, "signal 15 to process 777: Operation not permitted");
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].uuid, "GPU-abc");
  EXPECT_EQ(trail.signals(), 1u);
}

TEST(AuditTrail, EveryEnumHasAName) {
  EXPECT_EQ(enum_values<AuditActor>().size(), 6u);
  EXPECT_EQ(enum_name(AuditActor::watch_reaper), "watch-reaper");
  EXPECT_EQ(enum_name(AuditActor::run_teardown), "run-teardown");
  EXPECT_EQ(enum_name(AuditActor::top), "top");
  EXPECT_EQ(enum_values<Delivery>().size(), 2u);
  EXPECT_EQ(enum_name(Delivery::cgroup_kill), "cgroup.kill");
  EXPECT_EQ(enum_values<SignalResult>().size(), 3u);
  EXPECT_EQ(enum_values<AuditVerdict>().size(), 4u);
}

// The kernel's control: a real child, signalled through a verified pidfd.
TEST(AuditTrail, TheKernelsControlRecordsWhatThePidfdDelivered) {
  proc::testing::Children children;
  pid_t child = children.spawn([](int ready) {
    proc::testing::signal_ready(ready);
    for (;;) ::pause();
  });
  children.ready(child);
  auto id = proc::read_process_id(child, "/proc");
  ASSERT_TRUE(id.has_value());
  CapturedAudit audit;
  AuditTrail trail(audit, AuditActor::free, AuditCaller::current("/proc"));
  SystemProcessControl system("/proc");
  AuditedControl control(system, trail, "/proc");
  Target t;
  t.id = *id;
  auto opened = control.open(t, false);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  ASSERT_TRUE((*opened)->signal(SIGTERM).has_value());
  std::vector<ControlledProcess*> live{opened->get()};
  EXPECT_TRUE(control.wait_for_exit(live, std::chrono::steady_clock::now() + 5s).empty());
  children.reap(child);              // gone for good (a zombie still takes signals)
  (void)(*opened)->signal(SIGKILL);  // through the pidfd of a reaped process: ESRCH

  ASSERT_EQ(audit.records.size(), 2u);
  const auto& term = std::get<SignalRecord>(audit.records[0].what);
  EXPECT_EQ(term.target.id, *id);
  EXPECT_EQ(term.target.uid, ::geteuid());
  EXPECT_FALSE(term.target.comm.empty());
  EXPECT_EQ(term.signal, SIGTERM);
  EXPECT_EQ(term.result, SignalResult::delivered);
  const auto& kill = std::get<SignalRecord>(audit.records[1].what);
  EXPECT_EQ(kill.signal, SIGKILL);
  EXPECT_EQ(kill.result, SignalResult::already_gone);
  // The caller is this process, as the kernel shows it.
  EXPECT_EQ(audit.records[0].caller.pid, ::getpid());
  EXPECT_EQ(audit.records[0].caller.uid, ::getuid());
  EXPECT_FALSE(audit.records[0].caller.command.empty());
}

}  // namespace audit_test
}  // namespace gpureap::reclaim
