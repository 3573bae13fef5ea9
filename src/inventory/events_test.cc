#include "inventory/events.h"
#include "inventory/release_model.h"
#include "util/clock.h"
#include "util/units.h"
#include "gpu/test_devices.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpureap::inventory {
namespace {

using namespace std::chrono_literals;

// A GPU of 96 GiB with a 512 MiB baseline, its memory explained by `holders`.
GpuView gpu(unsigned index, std::vector<GpuHolder> holders = {}) {
  GpuView v;
  v.info.id = gpu::dev(index);
  v.info.minor = index;
  v.info.uuid = "GPU-" + std::to_string(index);
  v.info.processes_known = true;
  v.baseline = {512 * kMiB, true};
  for (const auto& h : holders) v.attributed_bytes += h.gpu_bytes.value_or(0);
  v.info.memory = gpu::GpuMemory{96 * kGiB, 512 * kMiB + v.attributed_bytes, std::nullopt};
  v.holders = std::move(holders);
  return v;
}

GpuView with_unexplained(GpuView v, Unexplained cls, std::uint64_t bytes) {
  v.unexplained = cls;
  v.unattributed_bytes = bytes;
  v.unexplained_detail = std::string(enum_name(cls)) + " evidence";
  v.info.memory->used += bytes;
  return v;
}

GpuHolder user(pid_t pid, std::uint64_t bytes, bool orphaned = false) {
  GpuHolder gh;
  gh.holder.id = {pid, 5000u + static_cast<unsigned>(pid)};
  gh.holder.comm = "python3";
  gh.holder.user = "alice";
  gh.holder.orphaned = orphaned;
  if (orphaned) gh.holder.orphan_reason = "re-parented to init (pid 1)";
  gh.gpu_bytes = bytes;
  return gh;
}

GpuHolder zombie(pid_t pid, std::uint64_t bytes) {
  GpuHolder gh = user(pid, bytes);
  gh.holder.state = 'Z';
  gh.holder.zombie_leader = true;
  gh.holder.threads = {{pid, 'Z'}, {pid + 1, 'S'}};
  return gh;
}

Inventory node(std::vector<GpuView> gpus) {
  Inventory inv;
  inv.gpus = std::move(gpus);
  return inv;
}

std::vector<EventKind> kinds(const std::vector<Event>& events) {
  std::vector<EventKind> out;
  for (const auto& e : events) out.push_back(e.kind);
  return out;
}

TEST(EventDetector, QuietNodeSaysNothing) {
  EventDetector d(0ms);
  EXPECT_TRUE(d.observe(node({gpu(0, {user(10, 8 * kGiB)}), gpu(1)}), 1).empty());
  EXPECT_TRUE(d.observe(node({gpu(0, {user(10, 8 * kGiB)}), gpu(1)}), 2).empty());
}

TEST(EventDetector, OrphansAreAnnouncedOnceWithTheirParentAndBytes) {
  EventDetector d(0ms);
  EXPECT_TRUE(d.observe(node({gpu(0, {user(10, 8 * kGiB), user(11, 4 * kGiB)})}), 1).empty());
  DeadParent parent{4100, "sglang.launch", "python3 -m sglang.launch_server", 1.8};
  auto orphaned = node({gpu(0, {user(10, 8 * kGiB, true), user(11, 4 * kGiB, true)})});
  auto events = d.observe(orphaned, 2, {{10, parent}, {11, parent}});
  ASSERT_EQ(events.size(), 1u);
  const Event& e = events[0];
  EXPECT_EQ(e.kind, EventKind::orphaned_memory);
  EXPECT_EQ(e.time, 2);
  EXPECT_EQ(e.gpu, gpu::dev(0));
  EXPECT_EQ(e.uuid, "GPU-0");
  EXPECT_EQ(e.bytes, 12 * kGiB);
  ASSERT_EQ(e.holders.size(), 2u);
  EXPECT_EQ(e.holders[0].id.pid, 10);
  EXPECT_EQ(e.holders[0].id.start_time, 5010u);
  EXPECT_EQ(e.holders[0].comm, "python3");
  EXPECT_EQ(e.holders[0].user, "alice");
  EXPECT_EQ(e.holders[0].gpu_bytes, 8 * kGiB);
  EXPECT_EQ(e.holders[1].id.pid, 11);
  ASSERT_TRUE(e.parent);
  EXPECT_EQ(e.parent->pid, 4100);
  EXPECT_EQ(e.parent->comm, "sglang.launch");
  EXPECT_EQ(e.parent->died_at, 1.8);
  EXPECT_EQ(e.detail, "re-parented to init (pid 1)");

  EXPECT_TRUE(d.observe(orphaned, 3, {{10, parent}}).empty()) << "never re-announced";
  EXPECT_TRUE(d.observe(orphaned, 4).empty());
}

// An orphaned keeper's event says whose memory it keeps (issue 52).
TEST(EventDetector, AnOrphanedKeepersEventSaysWhoseMemoryItKeeps) {
  EventDetector d(0ms);
  GpuHolder keeper = user(20, 8 * kGiB, true);
  keeper.holder.keeper = proc::KeeperClass::inheritor;
  keeper.holder.keeper_reason = "keeps 8.00 GiB of dead pid 19, whose device files it inherited";
  auto events = d.observe(node({gpu(0, {keeper})}), 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].detail.find("; inheritor: it keeps 8.00 GiB of dead pid 19, whose device "
                                  "files it inherited"),
            std::string::npos)
      << events[0].detail;
}

// A keeper that is no orphan (an importer of its own session, issue 52) is announced all
// the same, by its class and whose memory it keeps; a live holder beside it is not.
TEST(EventDetector, AnImporterIsAnnouncedAsTheKeeperItIs) {
  EventDetector d(0ms);
  GpuHolder importer = user(20, 8 * kGiB, false);
  importer.holder.keeper = proc::KeeperClass::importer;
  importer.holder.keeper_reason =
      "keeps 8.00 GiB of dead pid 19 (python3), whose memory it imported (CUDA IPC)";
  auto events = d.observe(node({gpu(0, {importer, user(21, 2 * kGiB, false)})}), 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::orphaned_memory);
  ASSERT_EQ(events[0].holders.size(), 1u);
  EXPECT_EQ(events[0].holders[0].id.pid, 20);
  EXPECT_EQ(events[0].detail,
            "importer: it keeps 8.00 GiB of dead pid 19 (python3), whose memory it imported (CUDA IPC)");
}

// An orphan announced before the agent witnessed its import (the death that orphaned it
// came a look before NVML's new figures) is announced again once it is known as the
// importer, once; an orphan that keeps nothing is announced once.
TEST(EventDetector, AnOrphanLaterKnownAsAnImporterIsAnnouncedAgainOnce) {
  EventDetector d(0ms);
  GpuHolder h = user(20, 8 * kGiB, true);
  ASSERT_EQ(d.observe(node({gpu(0, {h})}), 1).size(), 1u);
  EXPECT_TRUE(d.observe(node({gpu(0, {h})}), 2).empty());
  h.holder.keeper = proc::KeeperClass::importer;
  h.holder.keeper_reason = "keeps 8.00 GiB of dead pid 19 (python3), whose memory it imported (CUDA IPC)";
  auto again = d.observe(node({gpu(0, {h})}), 3);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].detail.find("; importer: it keeps 8.00 GiB of dead pid 19"), std::string::npos)
      << again[0].detail;
  EXPECT_TRUE(d.observe(node({gpu(0, {h})}), 4).empty());
}

TEST(EventDetector, OrphansWithoutAKnownParentHaveNone) {
  EventDetector d(0ms);
  auto events = d.observe(node({gpu(2, {user(10, 8 * kGiB, true)})}), 1, {{99, {}}});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].parent);
}

TEST(EventDetector, MoreOrphansOnTheSameGpuAnnounceOnlyTheNewOnes) {
  EventDetector d(0ms);
  ASSERT_EQ(d.observe(node({gpu(0, {user(10, 8 * kGiB, true), user(11, 1 * kGiB)})}), 1).size(),
            1u);
  auto events = d.observe(node({gpu(0, {user(10, 8 * kGiB, true), user(11, 1 * kGiB, true)})}), 2);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(events[0].holders.size(), 1u);
  EXPECT_EQ(events[0].holders[0].id.pid, 11);
  EXPECT_EQ(events[0].bytes, 1 * kGiB);
  EXPECT_EQ(events[0].detail, "re-parented to init (pid 1); 2 orphaned holders on this GPU in all");
}

// An orphan the driver has not listed yet (found by its device node first) waits up to
// kUnmeasuredWait for its bytes; one the driver never lists is then announced without,
// counting nothing.
TEST(EventDetector, OrphanWithUnknownBytesCountsNothing) {
  EventDetector d(0ms);
  GpuHolder h = user(10, 0, true);
  h.gpu_bytes.reset();
  auto events = d.observe(node({gpu(0, {h, user(11, 2 * kGiB, true)})}), 1);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(events[0].holders.size(), 1u) << "the unmeasured one waits";
  EXPECT_EQ(events[0].holders[0].id.pid, 11);
  EXPECT_TRUE(d.observe(node({gpu(0, {h, user(11, 2 * kGiB, true)})}), 2).empty());
  events = d.observe(node({gpu(0, {h, user(11, 2 * kGiB, true)})}), 1 + EventDetector::kUnmeasuredWait);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_EQ(events[0].holders.size(), 1u);
  EXPECT_EQ(events[0].holders[0].id.pid, 10);
  EXPECT_FALSE(events[0].holders[0].gpu_bytes);
  EXPECT_EQ(events[0].bytes, 0u) << "the sum of the known figures";
}

// The agent's tick saw the orphan before the driver's list did (CI: right after NVML
// answered again, WatchEvents.TheAgentSurvivesAHungDriver announced it with no bytes):
// the one event comes when its bytes do.
TEST(EventDetector, AnOrphanIsAnnouncedWithItsBytesOnceTheDriverListsIt) {
  EventDetector d(0ms);
  GpuHolder early = user(10, 0, true);
  early.gpu_bytes.reset();
  EXPECT_TRUE(d.observe(node({gpu(0, {early})}), 1).empty());
  auto events = d.observe(node({gpu(0, {user(10, 4 * kGiB, true)})}), 1.5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::orphaned_memory);
  EXPECT_EQ(events[0].bytes, 4 * kGiB);
  EXPECT_TRUE(d.observe(node({gpu(0, {user(10, 4 * kGiB, true)})}), 5).empty()) << "once";
}

TEST(EventDetector, AnOpenerThatDoesNotUseTheGpuIsNoOrphanThere) {
  EventDetector d(0ms);
  GpuHolder opener = user(10, 0, true);
  opener.uses_gpu = false;
  opener.gpu_bytes.reset();
  EXPECT_TRUE(d.observe(node({gpu(0, {opener})}), 1).empty());
}

TEST(EventDetector, FirstObserveAnnouncesWhatIsAlreadyBad) {
  // An agent started on a node with orphans, a zombie leader, a hung GPU and stuck memory.
  EventDetector d(0ms);
  auto hung = gpu(3);
  hung.info.hung = true;
  hung.info.problem = "GPU 3 did not answer within 1500 ms";
  hung.info.memory.reset();
  Inventory inv = node({gpu(0, {user(10, 8 * kGiB, true)}), gpu(1, {zombie(20, 6 * kGiB)}),
                        with_unexplained(gpu(2), Unexplained::driver_held, 30 * kGiB), hung});
  inv.source_state = gpu::SourceState::partial;
  auto events = d.observe(inv, 1);
  EXPECT_EQ(kinds(events), (std::vector{EventKind::orphaned_memory, EventKind::zombie_leader,
                                        EventKind::unattributed_memory, EventKind::source_down}));
  EXPECT_EQ(events[2].unexplained, Unexplained::driver_held);
  EXPECT_EQ(events[2].bytes, 30 * kGiB);
  EXPECT_EQ(events[2].detail, "driver_held evidence");
  EXPECT_EQ(events[3].gpu, gpu::dev(3));
  EXPECT_EQ(events[3].detail, "GPU 3 did not answer within 1500 ms");
  EXPECT_TRUE(d.observe(inv, 2).empty());
}

// A zombie leader the driver has not listed yet (the look's NVML list is older than the
// leader's exit: CI, ctest -j12) is announced with its bytes once the driver lists them,
// as an orphan is; one never listed is announced without them after kUnmeasuredWait.
// An orphan waiting meanwhile keeps its own wait.
TEST(EventDetector, AZombieLeaderIsAnnouncedWithItsBytesOnceTheDriverListsIt) {
  EventDetector d(0ms);
  GpuHolder early = zombie(20, 0);
  early.gpu_bytes.reset();
  GpuHolder orphan = user(30, 0, true);
  orphan.gpu_bytes.reset();
  EXPECT_TRUE(d.observe(node({gpu(1, {early, orphan})}), 1).empty());
  auto events = d.observe(node({gpu(1, {zombie(20, 6 * kGiB), orphan})}), 1.5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::zombie_leader);
  EXPECT_EQ(events[0].bytes, 6 * kGiB);
  ASSERT_EQ(events[0].holders.size(), 1u);
  EXPECT_EQ(events[0].holders[0].gpu_bytes, 6 * kGiB);
  events = d.observe(node({gpu(1, {zombie(20, 6 * kGiB), orphan})}), 1 + EventDetector::kUnmeasuredWait);
  ASSERT_EQ(events.size(), 1u) << "the orphan's wait, counted from its first look";
  EXPECT_EQ(events[0].kind, EventKind::orphaned_memory);

  EventDetector never(0ms);
  EXPECT_TRUE(never.observe(node({gpu(1, {early})}), 1).empty());
  events = never.observe(node({gpu(1, {early})}), 1 + EventDetector::kUnmeasuredWait);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::zombie_leader);
  EXPECT_FALSE(events[0].holders[0].gpu_bytes);
}

TEST(EventDetector, ZombieLeaderIsAnnouncedOnce) {
  EventDetector d(0ms);
  EXPECT_TRUE(d.observe(node({gpu(1, {user(20, 6 * kGiB)})}), 1).empty());
  auto events = d.observe(node({gpu(1, {zombie(20, 6 * kGiB)})}), 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::zombie_leader);
  EXPECT_EQ(events[0].gpu, gpu::dev(1));
  EXPECT_EQ(events[0].bytes, 6 * kGiB);
  ASSERT_EQ(events[0].holders.size(), 1u);
  EXPECT_EQ(events[0].holders[0].id.pid, 20);
  // A mark, not a verdict: whether it is a leak is the lineage verdict's (docs/orphans.md).
  EXPECT_EQ(events[0].detail,
            "its main thread exited; 1 live thread still holds the GPU; not a leak by the evidence "
            "(not orphaned)");
  EXPECT_FALSE(events[0].holders[0].orphaned);
  EXPECT_TRUE(d.observe(node({gpu(1, {zombie(20, 6 * kGiB)})}), 3).empty());
}

TEST(EventDetector, FreedOrphansAreAnnouncedWhenTheMemoryIsBack) {
  EventDetector d(0ms);
  ASSERT_EQ(
      d.observe(node({gpu(0, {user(10, 8 * kGiB, true), user(11, 4 * kGiB, true)})}), 1).size(),
      1u);
  auto events = d.observe(node({gpu(0)}), 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_EQ(events[0].gpu, gpu::dev(0));
  EXPECT_EQ(events[0].bytes, 12 * kGiB);
  EXPECT_EQ(events[0].detail,
            "2 orphaned holders are gone; GPU 0 is back at its baseline (512 MiB used)");
  EXPECT_TRUE(d.observe(node({gpu(0)}), 3).empty()) << "freed once";
}

// Issue 37: a server's workers on 3 GPUs, orphaned as one instance, are freed as one
// event, said once the last of its GPUs is back (a GPU still releasing holds it back).
TEST(EventDetector, AnInstancesGpusAreFreedInOneEvent) {
  auto member = [](pid_t pid) {
    GpuHolder gh = user(pid, 8 * kGiB, true);
    gh.holder.instance = "4100";
    return gh;
  };
  Instance in;
  in.key = "4100";
  in.kind = InstanceKind::process_group;
  in.pgid = 4100;
  in.gpus = {gpu::dev(0), gpu::dev(1), gpu::dev(2)};
  for (pid_t p : {10, 11, 12})
    in.members.push_back({{p, 5000u + static_cast<unsigned>(p), 0}, proc::EngineRole::none, ""});
  in.orphaned = 3;
  Inventory held = node({gpu(0, {member(10)}), gpu(1, {member(11)}), gpu(2, {member(12)})});
  held.instances = {in};
  EventDetector d(3000ms);
  auto announced = d.observe(held, 1);
  ASSERT_EQ(announced.size(), 1u) << "one orphaned_memory for the instance";
  ASSERT_TRUE(announced[0].instance);
  // GPUs 0 and 1 are back; GPU 2 is still releasing: nothing yet.
  EXPECT_TRUE(d.observe(node({gpu(0), gpu(1),
                              with_unexplained(gpu(2), Unexplained::releasing, 4 * kGiB)}),
                        2)
                  .empty());
  auto events = d.observe(node({gpu(0), gpu(1), gpu(2)}), 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_FALSE(events[0].gpu);
  EXPECT_EQ(events[0].gpus, (std::vector<gpu::DeviceId>{gpu::dev(0), gpu::dev(1), gpu::dev(2)}));
  EXPECT_EQ(events[0].bytes, 24 * kGiB);
  ASSERT_TRUE(events[0].instance);
  EXPECT_EQ(events[0].detail,
            "3 orphaned holders of instance 4100 are gone; its GPUs are back at their baseline");
  EXPECT_TRUE(d.observe(node({gpu(0), gpu(1), gpu(2)}), 4).empty()) << "freed once";
}

TEST(EventDetector, FreedWaitsForAllAnnouncedHolders) {
  EventDetector d(0ms);
  d.observe(node({gpu(0, {user(10, 8 * kGiB, true), user(11, 4 * kGiB, true)})}), 1);
  EXPECT_TRUE(d.observe(node({gpu(0, {user(11, 4 * kGiB, true)})}), 2).empty());
  auto events = d.observe(node({gpu(0, {user(30, 2 * kGiB)})}), 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_EQ(events[0].bytes, 12 * kGiB);
  EXPECT_EQ(events[0].detail,
            "2 orphaned holders are gone; GPU 0 has 2.00 GiB used by live holders");
}

TEST(EventDetector, AReleaseInProgressIsNeverAnnouncedAndFreedComesAfterIt) {
  // The holder is killed; the driver keeps its memory for a while (the inventory
  // calls it releasing when it sees it fall, driver_held while it is flat).
  EventDetector d(3000ms);
  d.observe(node({gpu(0, {user(10, 8 * kGiB, true)})}), 1);
  EXPECT_TRUE(
      d.observe(node({with_unexplained(gpu(0), Unexplained::driver_held, 8 * kGiB)}), 2).empty());
  EXPECT_TRUE(
      d.observe(node({with_unexplained(gpu(0), Unexplained::driver_held, 8 * kGiB)}), 4).empty())
      << "flat for 2 s: still settling";
  EXPECT_TRUE(
      d.observe(node({with_unexplained(gpu(0), Unexplained::releasing, 3 * kGiB)}), 4.5).empty());
  auto events = d.observe(node({gpu(0)}), 5);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_EQ(events[0].bytes, 8 * kGiB);
  EXPECT_EQ(events[0].detail,
            "1 orphaned holder is gone; GPU 0 is back at its baseline (512 MiB used)");
}

TEST(EventDetector, ReleasingAloneIsNeverAnnounced) {
  EventDetector d(0ms);
  for (double t = 1; t < 10; ++t)
    EXPECT_TRUE(
        d.observe(node({with_unexplained(gpu(0), Unexplained::releasing, 4 * kGiB)}), t).empty());
  EXPECT_TRUE(d.observe(node({gpu(0)}), 11).empty()) << "nothing announced, nothing freed";
}

TEST(EventDetector, StuckMemoryIsAnnouncedAfterTheSettleTime) {
  EventDetector d(3000ms);
  d.observe(node({gpu(0, {user(10, 8 * kGiB, true)})}), 1);
  auto stuck = node({with_unexplained(gpu(0), Unexplained::driver_held, 8 * kGiB)});
  EXPECT_TRUE(d.observe(stuck, 2).empty());
  EXPECT_TRUE(d.observe(stuck, 4.9).empty());
  auto events = d.observe(stuck, 5);
  ASSERT_EQ(events.size(), 1u) << "no memory_freed: the memory is not back";
  EXPECT_EQ(events[0].kind, EventKind::unattributed_memory);
  EXPECT_EQ(events[0].unexplained, Unexplained::driver_held);
  EXPECT_EQ(events[0].bytes, 8 * kGiB);
  EXPECT_TRUE(d.observe(stuck, 6).empty());
  // A reset frees it: the unattributed memory is what is freed (the holder's
  // memory became it), counted once.
  events = d.observe(node({gpu(0)}), 7);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_EQ(events[0].bytes, 8 * kGiB);
  EXPECT_EQ(events[0].detail,
            "the unattributed memory is gone; GPU 0 is back at its baseline (512 MiB used)");
}

// Falling is the release model's word (one release clock, issue 50): the agent's looks go
// through its tracker, and the detector reads GpuView::falling.
TEST(EventDetector, FallingMemoryRestartsTheSettleTime) {
  EventDetector d(3000ms);
  util::FakeClock clock;
  ReleaseTracker model;
  auto tick = [&](std::uint64_t bytes, double at) {
    clock.sleep_until(util::Clock::time_point{} + std::chrono::hours(1) +
                      std::chrono::duration_cast<util::Clock::duration>(
                          std::chrono::duration<double>(at)));
    Inventory inv = node({with_unexplained(gpu(0), Unexplained::driver_held, bytes)});
    model.observe(inv, clock.now(), /*judge=*/false);  // the agent's verdict, its readings
    return d.observe(inv, at);
  };
  EXPECT_TRUE(tick(40 * kGiB, 1).empty());
  EXPECT_TRUE(tick(20 * kGiB, 3).empty());
  EXPECT_TRUE(tick(20 * kGiB, 5).empty()) << "flat for 2 s since it last fell";
  auto events = tick(20 * kGiB, 6);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].bytes, 20 * kGiB);
}

TEST(EventDetector, AClassChangeIsAnnouncedAgainAndGrowthToo) {
  EventDetector d(0ms);
  auto events =
      d.observe(node({with_unexplained(gpu(0), Unexplained::outside_namespace, 4 * kGiB)}), 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].unexplained, Unexplained::outside_namespace);
  EXPECT_TRUE(
      d.observe(node({with_unexplained(gpu(0), Unexplained::outside_namespace, 4 * kGiB + kMiB)}),
                2)
          .empty())
      << "a few MiB more is the same state";
  events = d.observe(node({with_unexplained(gpu(0), Unexplained::unknown, 4 * kGiB)}), 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].unexplained, Unexplained::unknown);
  events = d.observe(node({with_unexplained(gpu(0), Unexplained::unknown, 10 * kGiB)}), 4);
  ASSERT_EQ(events.size(), 1u) << "6 GiB more became unattributed";
  EXPECT_EQ(events[0].bytes, 10 * kGiB);
}

TEST(EventDetector, AStateThatComesBackIsAnnouncedAgain) {
  // Flapping: orphans appear, are freed, appear again (new processes); stuck
  // memory appears, is reset, appears again.
  EventDetector d(0ms);
  EXPECT_EQ(kinds(d.observe(node({gpu(0, {user(10, 8 * kGiB, true)})}), 1)),
            std::vector{EventKind::orphaned_memory});
  EXPECT_EQ(kinds(d.observe(node({gpu(0)}), 2)), std::vector{EventKind::memory_freed});
  EXPECT_EQ(kinds(d.observe(node({gpu(0, {user(12, 8 * kGiB, true)})}), 3)),
            std::vector{EventKind::orphaned_memory});
  EXPECT_EQ(kinds(d.observe(node({gpu(0)}), 4)), std::vector{EventKind::memory_freed});
  auto stuck = node({with_unexplained(gpu(0), Unexplained::driver_held, 8 * kGiB)});
  EXPECT_EQ(kinds(d.observe(stuck, 5)), std::vector{EventKind::unattributed_memory});
  EXPECT_EQ(kinds(d.observe(node({gpu(0)}), 6)), std::vector{EventKind::memory_freed});
  EXPECT_EQ(kinds(d.observe(stuck, 7)), std::vector{EventKind::unattributed_memory});
}

TEST(EventDetector, SourceDownAndUpNodeWide) {
  EventDetector d(0ms);
  d.observe(node({gpu(0, {user(10, 8 * kGiB, true)})}), 1);
  Inventory down;
  down.source_state = gpu::SourceState::query_failed;
  down.source_problem = "nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is lost";
  // Without NVML the views come from device nodes: no uuid, no memory.
  GpuView from_nodes;
  from_nodes.info.id = gpu::dev(0);
  from_nodes.info.minor = 0;
  from_nodes.holders = {user(10, 0, true)};
  from_nodes.holders[0].gpu_bytes.reset();
  down.gpus = {from_nodes};
  auto events = d.observe(down, 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::source_down);
  EXPECT_FALSE(events[0].gpu);
  EXPECT_EQ(events[0].detail, "nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is lost");
  EXPECT_TRUE(d.observe(down, 3).empty());
  // The orphan is gone while NVML was down: no memory_freed while blind.
  down.gpus[0].holders.clear();
  EXPECT_TRUE(d.observe(down, 4).empty());
  events = d.observe(node({gpu(0)}), 5);
  EXPECT_EQ(kinds(events), (std::vector{EventKind::source_up, EventKind::memory_freed}));
  EXPECT_FALSE(events[0].gpu);
  EXPECT_EQ(events[1].bytes, 8 * kGiB);
  EXPECT_TRUE(d.observe(node({gpu(0)}), 6).empty());
}

TEST(EventDetector, EveryGpuHungIsOneNodeWideLine) {
  EventDetector d(0ms);
  Inventory inv = node({gpu(0), gpu(1)});
  inv.source_state = gpu::SourceState::partial;
  inv.source_problem = "GPU 0 did not answer; GPU 1 did not answer";
  for (auto& v : inv.gpus) {
    v.info.hung = true;
    v.info.problem = "did not answer";
    v.info.memory.reset();
  }
  auto events = d.observe(inv, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::source_down);
  EXPECT_FALSE(events[0].gpu);
  EXPECT_EQ(events[0].detail, "GPU 0 did not answer; GPU 1 did not answer");
  // GPU 0 answers again, GPU 1 does not.
  inv.gpus[0] = gpu(0);
  events = d.observe(inv, 2);
  ASSERT_EQ(kinds(events), (std::vector{EventKind::source_up, EventKind::source_down}));
  EXPECT_FALSE(events[0].gpu);
  EXPECT_EQ(events[1].gpu, gpu::dev(1));
  events = d.observe(node({gpu(0), gpu(1)}), 3);
  ASSERT_EQ(kinds(events), std::vector{EventKind::source_up});
  EXPECT_EQ(events[0].gpu, gpu::dev(1));
}

// W4-07: a mixed node (GPU 0-1 NVIDIA, 2-3 AMD) whose NVML reads none of its GPUs is
// down, though amdgpu's sysfs reads its own: each vendor's side is judged alone.
TEST(EventDetector, W4_07_AMixedNodeWhoseNvmlReadsNoneOfItsGpusIsDown) {
  auto amd = [](unsigned index) {
    GpuView v = gpu(index);
    v.info.uuid = fmt::format("GPU-{:016x}", 0xabcdef00u + index);
    return v;
  };
  Inventory inv = node({gpu(0), gpu(1), amd(2), amd(3)});
  inv.source_state = gpu::SourceState::partial;
  ASSERT_EQ(gpu::vendor_of(inv.gpus[2].info.uuid), gpu::Vendor::amd);
  EXPECT_FALSE(source_down(inv));
  for (unsigned i : {0u, 1u}) {
    inv.gpus[i].info.problem = fmt::format("nvmlDeviceGetMemoryInfo_v2(GPU {}): GPU is lost", i);
    inv.gpus[i].info.memory.reset();
  }
  inv.source_problem = "nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is lost";
  EXPECT_EQ(sides_down(inv), std::vector{gpu::Vendor::nvidia});
  EXPECT_TRUE(source_down(inv));
  EXPECT_EQ(source_down_text(inv),
            "NVML cannot read any of its GPUs (GPU 0, 1): only the other GPUs and the /proc "
            "view are live");
  EventDetector d(0ms);
  auto events = d.observe(inv, 1);
  ASSERT_EQ(kinds(events), std::vector{EventKind::source_down});
  EXPECT_FALSE(events[0].gpu) << "one node-wide line, not one per NVIDIA GPU";
  EXPECT_EQ(events[0].detail, "NVML cannot read any of its GPUs (GPU 0, 1): "
                              "nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is lost");
  // One NVIDIA GPU read again: NVML is up; the other is a GPU failing alone.
  inv.gpus[0] = gpu(0);
  EXPECT_FALSE(source_down(inv));
  events = d.observe(inv, 2);
  ASSERT_EQ(kinds(events), (std::vector{EventKind::source_up, EventKind::source_down}));
  EXPECT_EQ(events[1].gpu, gpu::dev(1));
  // The AMD side alike: amdgpu's sysfs reading none of its GPUs, NVML reading its own.
  Inventory amd_down = node({gpu(0), gpu(1), amd(2), amd(3)});
  amd_down.source_state = gpu::SourceState::partial;
  for (unsigned i : {2u, 3u}) amd_down.gpus[i].info.hung = true;
  EXPECT_EQ(sides_down(amd_down), std::vector{gpu::Vendor::amd});
  EXPECT_EQ(source_down_text(amd_down),
            "amdgpu's sysfs cannot read any of its GPUs (GPU 2, 3): only the other GPUs and "
            "the /proc view are live");
  // A pure NVIDIA node keeps its words.
  Inventory pure = node({gpu(0)});
  pure.source_state = gpu::SourceState::partial;
  pure.gpus[0].info.hung = true;
  EXPECT_EQ(source_down_text(pure), "NVML cannot read any GPU: only the /proc view is live");
}

TEST(EventDetector, AHungGpuNeverProducesMemoryFreed) {
  EventDetector d(0ms);
  d.observe(node({gpu(0), gpu(1, {user(10, 8 * kGiB, true)})}), 1);
  Inventory inv = node({gpu(0), gpu(1)});
  inv.source_state = gpu::SourceState::partial;
  inv.gpus[1].info.hung = true;
  inv.gpus[1].info.problem = "GPU 1 did not answer within 1500 ms";
  inv.gpus[1].info.memory.reset();
  inv.gpus[1].info.processes_known = false;
  auto events = d.observe(inv, 2);
  ASSERT_EQ(events.size(), 1u) << "the orphan is gone from the view, but memory is unknown";
  EXPECT_EQ(events[0].kind, EventKind::source_down);
  EXPECT_EQ(events[0].gpu, gpu::dev(1));
  EXPECT_EQ(events[0].uuid, "GPU-1");
  EXPECT_TRUE(d.observe(inv, 3).empty());
  // The orphan is still there when GPU 1 answers again: not re-announced, not freed.
  events = d.observe(node({gpu(0), gpu(1, {user(10, 8 * kGiB, true)})}), 4);
  ASSERT_EQ(kinds(events), std::vector{EventKind::source_up});
}

TEST(EventDetector, AGpuWithoutProcessListsIsStillWatched) {
  // Some drivers cannot list processes ("not supported"): holders come from /proc.
  EventDetector d(0ms);
  auto g = gpu(0, {user(10, 0, true)});
  g.holders[0].gpu_bytes.reset();
  g.info.processes_known = false;
  auto events = d.observe(node({g}), 1);
  ASSERT_EQ(kinds(events), std::vector{EventKind::orphaned_memory});
  EXPECT_FALSE(events[0].holders[0].gpu_bytes);
  g.holders.clear();
  EXPECT_EQ(kinds(d.observe(node({g}), 2)), std::vector{EventKind::memory_freed});
}

TEST(EventDetector, GpusAreIndependent) {
  EventDetector d(0ms);
  auto events = d.observe(
      node({gpu(0, {user(10, 8 * kGiB, true)}), gpu(1, {user(11, 8 * kGiB, true)}), gpu(2)}), 1);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].gpu, gpu::dev(0));
  EXPECT_EQ(events[1].gpu, gpu::dev(1));
  events = d.observe(node({gpu(0, {user(10, 8 * kGiB, true)}), gpu(1), gpu(2)}), 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::memory_freed);
  EXPECT_EQ(events[0].gpu, gpu::dev(1));
}

TEST(EventDetector, AZombieAndOrphanIsFreedOnce) {
  EventDetector d(0ms);
  GpuHolder h = zombie(20, 6 * kGiB);
  h.holder.orphaned = true;
  EXPECT_EQ(kinds(d.observe(node({gpu(0, {h})}), 1)),
            (std::vector{EventKind::orphaned_memory, EventKind::zombie_leader}));
  auto events = d.observe(node({gpu(0)}), 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].bytes, 6 * kGiB) << "one process, counted once";
  EXPECT_EQ(events[0].detail,
            "1 orphaned or zombie-leader holder is gone; GPU 0 is back at its baseline (512 MiB "
            "used)");
}

TEST(EventDetector, AGhostGpuIsAnnouncedOnceAndItsEnd) {
  EventDetector d;
  GpuView ghost = gpu(2);
  ghost.info.utilization_gpu = 100;
  ghost.busy = {Busy::ghost, {100, 100, 100}, "SM utilization 100%, 100%, 100%: a ghost GPU"};
  GpuView busy_not_yet = ghost;
  busy_not_yet.busy = {};
  EXPECT_TRUE(d.observe(node({busy_not_yet}), 1).empty()) << "the window is the inventory's";
  auto first = d.observe(node({ghost}), 2);
  ASSERT_EQ(kinds(first), std::vector<EventKind>{EventKind::ghost_gpu});
  EXPECT_EQ(first[0].gpu, gpu::dev(2));
  EXPECT_NE(first[0].detail.find("ghost GPU"), std::string::npos);
  EXPECT_TRUE(d.observe(node({ghost}), 3).empty()) << "announced once";
  GpuView reset = gpu(2);
  reset.info.utilization_gpu = 0;
  auto gone = d.observe(node({reset}), 4);
  ASSERT_EQ(kinds(gone), std::vector<EventKind>{EventKind::ghost_gpu_gone});
  EXPECT_NE(gone[0].detail.find("0%"), std::string::npos) << gone[0].detail;
}

}  // namespace
}  // namespace gpureap::inventory
