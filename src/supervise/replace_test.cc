// The replacement flow of `run --replace` / `--free-first` (replace.h) on reclaim's
// simulated machine: the selection from a look, the plan made without a signal, the
// confirmed plan or less under the lock, the old instance's ports.

#include "supervise/replace.h"

#include <gtest/gtest.h>

#include "gpu/test_devices.h"
#include "reclaim/free_lock.h"
#include "reclaim/test_machine.h"
#include "util/test_temp_dir.h"

namespace gpureap::supervise {
namespace {

using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

FakeProc holder(pid_t pid, unsigned gpu) {
  FakeProc p;
  p.pid = pid;
  p.ppid = 1;
  p.gpu = gpu;
  p.bytes = 8 * kGiB;
  p.cmdline = "python3 -m sglang.launch_server";
  return p;
}

Replacement free_first(const char* gpus) {
  Replacement r;
  r.mode = ReplaceMode::free_first;
  auto sel = gpu::GpuSelector::parse(gpus);
  if (sel) r.gpu = *sel;
  return r;
}

TEST(Replace, TheSelectionComesFromTheLook) {
  TestMachine m;
  m.spawn(holder(3300101, 1));
  const inventory::Inventory look = m.node().look();
  Replacement r = free_first("1");
  ASSERT_TRUE(select_replaced(r, look));
  EXPECT_EQ(r.options.selection.gpus, gpu::devs({1}));
  EXPECT_FALSE(r.options.selection.orphans_only);
  // Unattended: only the orphans that unattended action may touch.
  r.unattended = true;
  ASSERT_TRUE(select_replaced(r, look));
  EXPECT_TRUE(r.options.selection.orphans_only);
  EXPECT_TRUE(r.options.selection.unattended);

  Replacement nine = free_first("9");
  EXPECT_FALSE(select_replaced(nine, look));
  EXPECT_EQ(nine.problem, SelectProblem::bad_gpu);
  EXPECT_FALSE(nine.problem_detail.empty());

  Replacement key;
  key.mode = ReplaceMode::replace;
  key.instance = "no-such-instance";
  EXPECT_FALSE(select_replaced(key, look));
  EXPECT_EQ(key.problem, SelectProblem::no_such_instance);
}

TEST(Replace, ThePreviewSignalsNothing) {
  TestMachine m;
  auto id = m.spawn(holder(3300201, 0));
  reclaim::Freer freer{m.node(), m.audited()};
  Replacement r = free_first("0");
  reclaim::FreeSession s = preview_replace(freer, r);
  ASSERT_EQ(s.end, reclaim::SessionEnd::done);
  EXPECT_EQ(s.outcome.verdict, reclaim::FreeVerdict::stopped);
  ASSERT_EQ(s.outcome.plan.targets.size(), 1u);
  EXPECT_EQ(s.outcome.plan.targets.front().id, id);
  EXPECT_TRUE(m.control.signals_of(id).empty());

  Replacement bad = free_first("9");
  s = preview_replace(freer, bad);
  EXPECT_EQ(s.end, reclaim::SessionEnd::not_chosen);
}

TEST(Replace, OnlyTheConfirmedPlanOrLessGoesAhead) {
  reclaim::Plan confirmed, later;
  reclaim::Target a, b;
  a.id = {100, 1};
  b.id = {200, 2};
  confirmed.targets = {a, b};
  later.targets = {b};
  EXPECT_EQ(plan_changed(later, confirmed), "");
  later.targets.push_back(reclaim::Target{});
  later.targets.back().id = {300, 3};
  EXPECT_EQ(plan_changed(later, confirmed),
            "a process not in the confirmed plan holds the GPUs now");
}

TEST(Replace, TheConfirmedPlanIsFreedUnderTheLock) {
  TestMachine m;
  auto id = m.spawn(holder(3300301, 0));
  reclaim::Freer freer{m.node(), m.audited()};
  Replacement r = free_first("0");
  const reclaim::Plan plan = preview_replace(freer, r).outcome.plan;
  TestTempDir state("gpureap-replace-test");
  bool locked = false;
  std::string changed;
  {
    auto other = reclaim::FreeLock::acquire(state.dir());
    ASSERT_TRUE(other);
    auto s = replace_confirmed(freer, r, plan, state.dir(), {}, [&] { locked = true; }, {}, changed);
    EXPECT_EQ(s.end, reclaim::SessionEnd::lock_failed);
    EXPECT_FALSE(locked);
    EXPECT_TRUE(m.control.signals_of(id).empty());
  }
  auto s = replace_confirmed(freer, r, plan, state.dir(), {}, [&] { locked = true; }, {}, changed);
  ASSERT_EQ(s.end, reclaim::SessionEnd::done);
  EXPECT_TRUE(locked);
  EXPECT_EQ(changed, "");
  EXPECT_EQ(s.outcome.verdict, reclaim::FreeVerdict::freed);
  EXPECT_FALSE(m.control.signals_of(id).empty());
}

TEST(Replace, ANewHolderSinceTheConfirmationStopsIt) {
  TestMachine m;
  auto first = m.spawn(holder(3300401, 0));
  reclaim::Freer freer{m.node(), m.audited()};
  Replacement r = free_first("0");
  const reclaim::Plan plan = preview_replace(freer, r).outcome.plan;
  auto second = m.spawn(holder(3300402, 0));
  TestTempDir state("gpureap-replace-test");
  std::string changed;
  auto s = replace_confirmed(freer, r, plan, state.dir(), {}, {}, {}, changed);
  ASSERT_EQ(s.end, reclaim::SessionEnd::done);
  EXPECT_EQ(s.outcome.verdict, reclaim::FreeVerdict::stopped);
  EXPECT_EQ(changed, "a process not in the confirmed plan holds the GPUs now");
  EXPECT_TRUE(m.control.signals_of(first).empty());
  EXPECT_TRUE(m.control.signals_of(second).empty());
}

TEST(Replace, TheOldPortsOnceEachAscending) {
  reclaim::Plan plan;
  inventory::Instance a, b;
  a.port = 30001;
  a.ports = {30000, 30001};
  b.ports = {29999};
  plan.instances = {a, b};
  EXPECT_EQ(old_ports(plan), (std::vector<unsigned>{29999, 30000, 30001}));
}

}  // namespace
}  // namespace gpureap::supervise
