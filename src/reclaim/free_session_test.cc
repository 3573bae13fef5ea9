// The one free session (free_session.h) on the simulated machine: the GPUs from the
// selected processes, the lock, and the plan's process table from the look's own listing.

#include "reclaim/free_session.h"

#include <gtest/gtest.h>

#include "gpu/test_devices.h"
#include "reclaim/free_lock.h"
#include "reclaim/test_machine.h"
#include "util/test_temp_dir.h"

namespace gpureap::reclaim {
namespace {

using testing::FakeProc;
using testing::kGiB;
using testing::TestMachine;

FakeProc session_holder(pid_t pid, unsigned gpu) {
  FakeProc p;
  p.pid = pid;
  p.ppid = 1;
  p.gpu = gpu;
  p.bytes = 8 * kGiB;
  p.cmdline = "python3 -m vllm.entrypoints.openai.api_server";
  return p;
}

TEST(FreeSession, TheGpusComeFromTheSelectedProcesses) {
  TestMachine m;
  m.spawn(session_holder(3200101, 0));
  auto id = m.spawn(session_holder(3200102, 1));
  Freer freer{m.node(), m.audited()};
  FreeRequest request;
  request.options.selection.ids = {id};
  request.gpus_from_ids = true;
  FreeSession s = free_session(freer, std::move(request));
  ASSERT_EQ(s.end, SessionEnd::done);
  EXPECT_EQ(s.outcome.verdict, FreeVerdict::freed);
  ASSERT_EQ(s.outcome.plan.targets.size(), 1u);
  EXPECT_EQ(s.outcome.plan.targets.front().id, id);
  ASSERT_TRUE(s.outcome.report);
  ASSERT_EQ(s.outcome.report->gpus.size(), 1u);
  EXPECT_EQ(s.outcome.report->gpus.front().gpu, gpu::dev(1));
  EXPECT_FALSE(m.control.signals_of(id).empty());
}

TEST(FreeSession, ProcessesThatUseNoGpuAreNoGpusAndNothingIsSignalled) {
  TestMachine m;
  auto id = m.spawn(session_holder(3200201, 1));
  m.end_process(session_holder(3200201, 1));
  Freer freer{m.node(), m.audited()};
  FreeRequest request;
  request.options.selection.ids = {id};
  request.gpus_from_ids = true;
  bool asked = false;
  request.steps.go_ahead = [&](const Plan&) { return asked = true; };
  FreeSession s = free_session(freer, std::move(request));
  EXPECT_EQ(s.end, SessionEnd::no_gpus);
  EXPECT_FALSE(asked);
  EXPECT_TRUE(m.control.signals_of(id).empty());
}

TEST(FreeSession, ABusyLockEndsTheSessionBeforeAnyLook) {
  TestMachine m;
  auto id = m.spawn(session_holder(3200301, 0));
  TestTempDir state("gpureap-session-test");
  auto held = FreeLock::acquire(state.dir());
  ASSERT_TRUE(held);
  Freer freer{m.node(), m.audited()};
  FreeRequest request;
  request.options.selection.gpus = gpu::devs({0});
  request.lock_dir = state.dir();  // lock_until in the past: no wait
  FreeSession s = free_session(freer, std::move(request));
  EXPECT_EQ(s.end, SessionEnd::lock_failed);
  EXPECT_NE(s.problem.find("gpureap free"), std::string::npos) << s.problem;
  EXPECT_TRUE(m.control.signals_of(id).empty());
}

// The session's look reads the process table from its own listing of /proc, and the
// plan is made with it: the table holds the look's processes.
TEST(FreeSession, TheLookCarriesTheProcessTableThePlanUses) {
  TestMachine m;
  auto id = m.spawn(session_holder(3200401, 0));
  Freer freer{m.node(), m.audited()};
  FreeRequest request;
  request.options.selection.gpus = gpu::devs({0});
  request.steps.go_ahead = [](const Plan&) { return false; };
  FreeSession s = free_session(freer, std::move(request));
  ASSERT_EQ(s.end, SessionEnd::done);
  ASSERT_TRUE(s.look.process_table);
  EXPECT_NE(proc::find_process(*s.look.process_table, id), nullptr);
  CallerContext caller = CallerContext::of(s.look, m.node().proc_root());
  EXPECT_EQ(caller.table.size(), s.look.process_table->size());
  EXPECT_EQ(s.outcome.verdict, FreeVerdict::stopped);
}

// The caller chooses the GPUs from the session's own look (free's --gpu, --pid): its
// choice is what is planned; a refusal ends the session before any plan.
TEST(FreeSession, TheCallerChoosesTheGpusFromTheLook) {
  TestMachine m;
  m.spawn(session_holder(3200501, 0));
  auto id = m.spawn(session_holder(3200502, 1));
  Freer freer{m.node(), m.audited()};
  FreeRequest request;
  std::size_t seen = 0;
  request.choose = [&](const inventory::Inventory& look, Selection& sel) {
    seen = look.gpus.size();
    sel.gpus = gpu::devs({1});
    return true;
  };
  request.steps.go_ahead = [](const Plan&) { return false; };
  FreeSession s = free_session(freer, std::move(request));
  ASSERT_EQ(s.end, SessionEnd::done);
  EXPECT_EQ(seen, s.look.gpus.size());
  ASSERT_EQ(s.outcome.plan.targets.size(), 1u);
  EXPECT_EQ(s.outcome.plan.targets.front().id, id);

  FreeRequest refused;
  bool planned = false;
  refused.choose = [](const inventory::Inventory&, Selection&) { return false; };
  refused.steps.go_ahead = [&](const Plan&) { return planned = true; };
  s = free_session(freer, std::move(refused));
  EXPECT_EQ(s.end, SessionEnd::not_chosen);
  EXPECT_FALSE(planned);
  EXPECT_TRUE(m.control.signals_of(id).empty());
}

}  // namespace
}  // namespace gpureap::reclaim
