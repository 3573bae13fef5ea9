// The Watcher on the reclaim engine's fake machine (a fixture /proc, a fake NVML,
// an EventClock): what an incremental tick finds without a full scan, and when
// the full scan runs.

#include "agent/watcher.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include "gpu/test_devices.h"
#include "proc/test_children.h"
#include "reclaim/test_machine.h"

namespace gpureap::agent {
namespace {

using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

const inventory::GpuHolder* holder_on(const inventory::Inventory& inv, unsigned gpu, pid_t pid) {
  for (const auto& view : inv.gpus)
    if (view.info.id == gpu::DeviceId{gpu})
      for (const auto& h : view.holders)
        if (h.holder.id.pid == pid) return &h;
  return nullptr;
}

FakeProc proc(pid_t pid, std::optional<unsigned> gpu = std::nullopt, std::uint64_t bytes = 0,
              pid_t ppid = 1) {
  FakeProc p;
  p.pid = pid;
  p.ppid = ppid;
  p.gpu = gpu;
  p.bytes = bytes;
  p.release_after = std::nullopt;  // the tests move memory themselves
  return p;
}

WatchOptions slow_full_scan() {
  WatchOptions o;
  o.full_scan = std::chrono::hours(1);
  return o;
}

TEST(Watcher, FirstRefreshIsAFullScan) {
  TestMachine m;
  m.spawn(proc(4001, 0, 20 * kGiB));
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  EXPECT_EQ(w.full_scans(), 1u);
  EXPECT_EQ(w.incremental_scans(), 0u);
  ASSERT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  EXPECT_EQ(holder_on(w.inventory(), 0, 4001)->gpu_bytes, 20 * kGiB);
}

TEST(Watcher, ANewHolderIsFoundWithoutAFullScan) {
  TestMachine m;
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  EXPECT_EQ(w.inventory().gpus.at(1).holders.size(), 0u);
  m.spawn(proc(5001, 1, 8 * kGiB));
  w.refresh();
  EXPECT_EQ(w.full_scans(), 1u);
  EXPECT_EQ(w.incremental_scans(), 1u);
  ASSERT_NE(holder_on(w.inventory(), 1, 5001), nullptr);
  EXPECT_EQ(w.inventory().gpus.at(1).attributed_bytes, 8 * kGiB);
}

TEST(Watcher, AHolderThatExitedIsDroppedAtTheNextTick) {
  TestMachine m;
  FakeProc p = proc(4001, 0, 20 * kGiB);
  m.spawn(p);
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  ASSERT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  m.end_process(p);
  w.refresh();
  EXPECT_EQ(holder_on(w.inventory(), 0, 4001), nullptr);
  EXPECT_EQ(w.full_scans(), 1u);
}

TEST(Watcher, AKnownHolderReparentedToInitBecomesAnOrphanAtTheNextTick) {
  TestMachine m;
  FakeProc server = proc(4000);
  server.comm = "sglang";
  FakeProc worker = proc(4001, 0, 20 * kGiB, 4000);
  m.spawn(server);
  m.spawn(worker);
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  ASSERT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  EXPECT_FALSE(holder_on(w.inventory(), 0, 4001)->holder.orphaned);
  m.end_process(server);
  m.set_parent(worker, 1, 4000, 4000);  // the server led its group and session
  w.refresh();
  EXPECT_EQ(w.full_scans(), 1u);
  ASSERT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  EXPECT_TRUE(holder_on(w.inventory(), 0, 4001)->holder.orphaned);
}

TEST(Watcher, AProcessTheSourceListsLaterIsScannedEvenIfItWasSeenBefore) {
  TestMachine m;
  Watcher w(m.node(), slow_full_scan());
  // Running before the first scan, without a GPU: a known, non-holding process.
  FakeProc late = proc(6001);
  m.spawn(late);
  w.refresh();
  w.refresh();
  // It imports torch and creates a context: NVML lists it, the fd appears.
  m.end_process(late);
  m.spawn(proc(6001, 0, 4 * kGiB));
  w.refresh();
  EXPECT_EQ(w.full_scans(), 1u);
  EXPECT_NE(holder_on(w.inventory(), 0, 6001), nullptr);
}

TEST(Watcher, TheFullScanRunsAtItsInterval) {
  TestMachine m;
  WatchOptions o;
  o.full_scan = std::chrono::seconds(30);
  Watcher w(m.node(), o);
  w.refresh();
  m.clock.sleep_for(std::chrono::seconds(29));
  w.refresh();
  EXPECT_EQ(w.full_scans(), 1u);
  m.clock.sleep_for(std::chrono::seconds(2));
  w.refresh();
  EXPECT_EQ(w.full_scans(), 2u);
  w.refresh(true);
  EXPECT_EQ(w.full_scans(), 3u);
}

// The default (`--full-scan-interval auto`): the interval is stretched by the last
// full scan's CPU time (x 1 / kFullScanShare), never shortened, never past
// kFullScanMax; a duration given is taken as given.
TEST(Watcher, AnAutoFullScanIntervalIsStretchedByTheScansCost) {
  TestMachine m;
  for (int i = 0; i < 50; ++i) m.spawn(proc(6000 + i));
  WatchOptions given;
  given.full_scan = std::chrono::milliseconds(1);
  Watcher exact(m.node(), given);
  exact.refresh();
  EXPECT_EQ(exact.next_full_scan() - m.clock.now(), std::chrono::milliseconds(1));

  WatchOptions automatic = given;
  automatic.full_scan_auto = true;
  Watcher stretched(m.node(), automatic);
  stretched.refresh();
  // A fixture scan of 50 processes takes well over 5 us of CPU: over 1 ms once stretched.
  const auto wait = stretched.next_full_scan() - m.clock.now();
  EXPECT_GT(wait, std::chrono::milliseconds(1));
  EXPECT_LE(wait, kFullScanMax);
  m.clock.sleep_for(std::chrono::milliseconds(1));
  stretched.refresh();
  EXPECT_EQ(stretched.full_scans(), 1u);  // not due at the given interval any more

  automatic.full_scan = std::chrono::hours(1);  // never shortened below the interval
  Watcher slow(m.node(), automatic);
  slow.refresh();
  EXPECT_EQ(slow.next_full_scan() - m.clock.now(), std::chrono::hours(1));
}

// A fixture /proc is not this process's procfs: new processes are found by listing it.
TEST(Watcher, AnotherProcRootIsListedNotWatchedByEvents) {
  TestMachine m;
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  EXPECT_EQ(w.new_processes(), NewProcesses::listing);
  EXPECT_FALSE(w.events_unavailable().empty());
}

TEST(Watcher, MemoryFallingBetweenTicksIsReleasingNotDriverHeld) {
  TestMachine m;
  FakeProc p = proc(4001, 0, 40 * kGiB);
  m.spawn(p);
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  m.end_process(p);
  m.gpu(0).memory->used -= 30 * kGiB;  // part released: 10 GiB to go
  w.refresh();
  EXPECT_EQ(w.inventory().gpus.at(0).unexplained, inventory::Unexplained::releasing);
  w.refresh();  // no further drop: nobody holds it, it stays; a release within its budget
  EXPECT_EQ(w.inventory().gpus.at(0).unexplained, inventory::Unexplained::releasing);
  // Flat past the release budget since the exit the watcher saw (docs/release.md).
  m.clock.sleep_for(inventory::kBudgetFloor);
  w.refresh();
  EXPECT_EQ(w.inventory().gpus.at(0).unexplained, inventory::Unexplained::driver_held);
}

// The server dies during a tick's look, after the look's NVML list was taken and the
// moment its second worker took a GPU: the look after the death reads NVML's list
// afresh, so that worker is a holder (and in the announcement) at once. CI: the tick
// re-read only the first worker, and the announcement named 1 of 2 (80 of 160 GiB).
TEST(Watcher, AServerDyingDuringALookHasItsWorkersLookedAtAfresh) {
  TestMachine m;
  // Real processes, this test's children, for real pidfds; the fixture /proc describes them.
  proc::testing::Children children;
  const pid_t s = proc::testing::spawn_parked(children);
  FakeProc server = proc(s);
  server.comm = "sglang";
  FakeProc worker0 = proc(proc::testing::spawn_parked(children), 0, 20 * kGiB, s);
  FakeProc worker1 = proc(proc::testing::spawn_parked(children), std::nullopt, 0, s);  // no GPU yet
  for (FakeProc* p : {&worker0, &worker1}) p->comm = "sglang::schedul";
  m.spawn(server);
  m.spawn(worker0);
  m.spawn(worker1);
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  ASSERT_NE(holder_on(w.inventory(), 0, worker0.pid), nullptr);
  ASSERT_EQ(holder_on(w.inventory(), 1, worker1.pid), nullptr);

  m.nvml().after_next_snapshot = [&] {
    m.end_process(worker1);
    worker1.gpu = 1;
    worker1.bytes = 20 * kGiB;
    m.spawn(worker1);
    ::kill(s, SIGKILL);  // our child: dead, not reaped (a zombie until `children` ends)
    children.wait_zombie(s);
    m.end_process(server);
    m.set_parent(worker0, 1, s, s);
    m.set_parent(worker1, 1, s, s);
  };
  w.refresh();
  ASSERT_EQ(w.dead_parents().count(worker0.pid), 1u) << "the death was not seen in this tick";
  const auto* late = holder_on(w.inventory(), 1, worker1.pid);
  ASSERT_NE(late, nullptr) << "the worker that took GPU 1 during the look is not a holder";
  EXPECT_EQ(late->gpu_bytes, 20 * kGiB);
  ASSERT_NE(holder_on(w.inventory(), 0, worker0.pid), nullptr);
  EXPECT_TRUE(holder_on(w.inventory(), 0, worker0.pid)->holder.orphaned);
}

// W3-04: a look that runs out of descriptors is a failed look: the holders it could
// not read stay as the look before saw them (never "they hold nothing"), one problem
// line says so, and the next refresh reads everything again.
TEST(Watcher, ALookOutOfDescriptorsKeepsTheHoldersW3_04) {
  TestMachine m;
  m.spawn(proc(4001, 0, 20 * kGiB));
  Watcher w(m.node(), slow_full_scan());
  w.refresh();
  ASSERT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  ASSERT_FALSE(w.limits().look_failed);

  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit tight = before;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free + 1);  // /proc itself, nothing under it
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  w.refresh(true);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);

  ASSERT_TRUE(w.limits().look_failed);
  EXPECT_NE(holder_on(w.inventory(), 0, 4001), nullptr) << "dropped by a look that failed";
  ASSERT_FALSE(w.inventory().problems.empty());
  EXPECT_EQ(w.inventory().problems.front().pid, 0);
  EXPECT_NE(w.inventory().problems.front().what.find("ran out of file descriptors"),
            std::string::npos);

  w.refresh();  // a full scan again at once, and it succeeds
  EXPECT_FALSE(w.limits().look_failed);
  EXPECT_EQ(w.full_scans(), 3u);
  EXPECT_NE(holder_on(w.inventory(), 0, 4001), nullptr);
  for (const auto& p : w.inventory().problems)
    EXPECT_EQ(p.what.find("ran out of file descriptors"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::agent
