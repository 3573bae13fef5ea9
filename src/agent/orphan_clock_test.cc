// The reaper's decisions on hand-built looks and a fake act (no process, no signal, no
// sleep): the one orphan clock, what is due, a reap tried once per process, a busy free
// lock said once and retried, and the loop never handing a second reap while one runs.

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "agent/reaper.h"
#include "inventory/test_views.h"
#include "util/pattern.h"

namespace gpureap::agent {
namespace {

using inventory::testing::add_holder;
using inventory::testing::idle_gpu;
using inventory::testing::Lineage;

constexpr double kNow = 1'000'000.0;  // wall clock seconds; the tests move it by hand

/// A look with one GPU and `pid` orphaned as `provenance` says; `since`: the witnessed
/// parent's death (Holder::orphaned_since).
inventory::Inventory look_with(pid_t pid, proc::Provenance provenance,
                               std::optional<double> since = std::nullopt) {
  inventory::Inventory inv;
  inv.gpus.push_back(idle_gpu(0));
  add_holder(inv.gpus[0], pid, 4ull << 30, Lineage::orphaned);
  auto& h = inv.gpus[0].holders.back().holder;
  h.provenance = provenance;
  h.orphan_evidence = provenance == proc::Provenance::witnessed ? proc::OrphanEvidence::witnessed
                                                                : proc::OrphanEvidence::siblings;
  h.orphaned_since = since;
  return inv;
}

/// The act the tests hand the reaper: records each job, answers what the test says,
/// and (with `hold`) waits until released, so a test can look while a reap "runs".
struct FakeAct {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<ReapJob> jobs;
  bool lock_busy = false;
  bool hold = false;
  ReapAct act() {
    return [this](const ReapJob& job) {
      std::unique_lock lock(mutex);
      jobs.push_back(job);
      cv.wait(lock, [&] { return !hold; });
      ReapDone done;
      done.due = job.due;
      done.lock_busy = lock_busy;
      done.events.push_back(reap_event(lock_busy ? inventory::EventKind::reap_failed
                                                 : inventory::EventKind::reaped,
                                       job.seen, job.due, "fake"));
      if (!lock_busy) done.freed = true;
      return done;
    };
  }
  void release() {
    {
      std::lock_guard lock(mutex);
      hold = false;
    }
    cv.notify_all();
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return jobs.size();
  }
};

ReapPolicy after_seconds(int s) { return ReapPolicy{std::chrono::seconds(s), nullptr, false}; }

TEST(OrphanClock, AWitnessedOrphanIsDatedByItsParentsDeathNotByTheAgentsFirstLook) {
  FakeAct fake;
  Reaper reaper(after_seconds(60), fake.act());
  // The parent died 90 s before the agent's first look (a restarted agent, W3-07).
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 90);
  reaper.after_look(inv, kNow, {});
  EXPECT_EQ(reaper.orphaned_since(inv.gpus[0].holders[0].holder), kNow - 90);
  reaper.wait_idle();
  ASSERT_EQ(fake.count(), 1u);
  EXPECT_TRUE(fake.jobs[0].due.contains(proc::ProcessId{4242, 1000}));
}

TEST(OrphanClock, AnOwnedOrphanIsDatedByTheFirstLookThatShowedIt) {
  FakeAct fake;
  Reaper reaper(after_seconds(60), fake.act());
  auto inv = look_with(4242, proc::Provenance::owned);
  reaper.after_look(inv, kNow, {});
  reaper.after_look(inv, kNow + 30, {});
  EXPECT_EQ(reaper.orphaned_since(inv.gpus[0].holders[0].holder), kNow);
  EXPECT_TRUE(reaper.due(inv, kNow + 59).empty());
  EXPECT_EQ(reaper.due(inv, kNow + 60).size(), 1u);
  reaper.wait_idle();
  EXPECT_EQ(fake.count(), 0u);  // not due at either look
}

TEST(OrphanClock, AHolderNoLongerOrphanedStartsAgainWhenOrphanedAnew) {
  FakeAct fake;
  Reaper reaper(after_seconds(60), fake.act());
  auto orphan = look_with(4242, proc::Provenance::owned);
  reaper.after_look(orphan, kNow, {});
  inventory::Inventory adopted = orphan;
  adopted.gpus[0].holders[0].holder.orphaned = false;
  reaper.after_look(adopted, kNow + 50, {});
  reaper.after_look(orphan, kNow + 70, {});
  EXPECT_EQ(reaper.orphaned_since(orphan.gpus[0].holders[0].holder), kNow + 70);
}

TEST(ReaperPolicy, AnInferredOrphanIsNeverDueHoweverOld) {
  FakeAct fake;
  Reaper reaper(after_seconds(1), fake.act());
  auto inv = look_with(4242, proc::Provenance::inferred);
  reaper.after_look(inv, kNow, {});
  reaper.after_look(inv, kNow + 3600, {});
  reaper.wait_idle();
  EXPECT_TRUE(reaper.due(inv, kNow + 3600).empty());
  EXPECT_EQ(fake.count(), 0u);
}

TEST(ReaperPolicy, KeepAndOffAreNeverDue) {
  FakeAct fake;
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 600);
  auto keep = Pattern::compile("sglang");
  ASSERT_TRUE(keep);
  Reaper kept(ReapPolicy{std::chrono::seconds(1), std::make_shared<const Pattern>(*keep), false},
              fake.act());
  kept.after_look(inv, kNow, {});
  Reaper off(ReapPolicy{}, fake.act());
  off.after_look(inv, kNow, {});
  kept.wait_idle();
  off.wait_idle();
  EXPECT_EQ(fake.count(), 0u);
}

TEST(ReaperPolicy, AReapIsTriedOncePerProcess) {
  FakeAct fake;
  Reaper reaper(after_seconds(1), fake.act());
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 10);
  reaper.after_look(inv, kNow, {});
  reaper.wait_idle();
  auto done = reaper.take_done();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].events.size(), 1u);
  EXPECT_EQ(done[0].events[0].kind, inventory::EventKind::reaped);
  EXPECT_EQ(done[0].events[0].bytes, 4ull << 30);
  // Still there at the next looks (a reap that did not free it): not tried again.
  reaper.after_look(inv, kNow + 1, {});
  reaper.after_look(inv, kNow + 2, {});
  reaper.wait_idle();
  EXPECT_EQ(fake.count(), 1u);
}

TEST(ReaperPolicy, NoSecondReapIsHandedWhileOneRunsOrIsNotCollected) {
  FakeAct fake;
  fake.hold = true;
  Reaper reaper(after_seconds(1), fake.act());
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 10);
  reaper.after_look(inv, kNow, {});
  // The loop keeps looking while the reap waits (its grace period, a release).
  reaper.after_look(inv, kNow + 1, {});
  EXPECT_TRUE(reaper.busy());
  fake.release();
  reaper.wait_idle();
  // Finished but not collected: its holders are not marked tried yet, so a look now
  // must not hand them again.
  reaper.after_look(inv, kNow + 2, {});
  EXPECT_EQ(reaper.take_done().size(), 1u);
  reaper.after_look(inv, kNow + 3, {});
  reaper.wait_idle();
  EXPECT_EQ(fake.count(), 1u);
  EXPECT_FALSE(reaper.busy());
}

TEST(ReaperPolicy, ABusyFreeLockIsSaidOnceAndRetried) {
  FakeAct fake;
  fake.lock_busy = true;
  Reaper reaper(after_seconds(1), fake.act());
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 10);
  std::size_t said = 0;
  for (int i = 0; i < 3; ++i) {
    reaper.after_look(inv, kNow + i, {});
    reaper.wait_idle();
    for (const auto& d : reaper.take_done()) said += d.events.size();
  }
  EXPECT_EQ(fake.count(), 3u);  // retried at each look
  EXPECT_EQ(said, 1u);          // said once
  // The lock free again: the reap goes ahead, and is said.
  fake.lock_busy = false;
  reaper.after_look(inv, kNow + 3, {});
  reaper.wait_idle();
  auto done = reaper.take_done();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].events.size(), 1u);
  EXPECT_EQ(fake.count(), 4u);
}

TEST(ReaperPolicy, TheJobCarriesWhatTheAgentSawDieAndThePolicy) {
  FakeAct fake;
  Reaper reaper(ReapPolicy{std::chrono::seconds(1), nullptr, true}, fake.act());
  auto inv = look_with(4242, proc::Provenance::witnessed, kNow - 10);
  std::map<pid_t, proc::DeadParent> dead;
  dead[4242].pid = 4200;
  reaper.after_look(inv, kNow, dead);
  reaper.wait_idle();
  ASSERT_EQ(fake.count(), 1u);
  EXPECT_TRUE(fake.jobs[0].dry_run);
  EXPECT_EQ(fake.jobs[0].dead_parents.at(4242).pid, 4200);
}

}  // namespace
}  // namespace gpureap::agent
