// The lineage table on fed events (what the proc connector would report), with a fake
// reader of /proc: who forked whom, how a parent ended, what is kept and for how long;
// and the one orphan rule (classify_lineage) on what it gives.

#include "proc/event_lineage.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <map>

namespace gpureap::proc {
namespace event_lineage_test {

constexpr double kWallOffset = 1'700'000'000.0;  // wall clock minus CLOCK_MONOTONIC

/// /proc as the table reads it: what each pid is now (absent: reaped).
struct FakeProc {
  std::map<pid_t, LineageIdentity> procs;
  int reads = 0;
  IdentityReader reader() {
    return [this](pid_t pid) -> std::optional<LineageIdentity> {
      ++reads;
      auto it = procs.find(pid);
      if (it == procs.end()) return std::nullopt;
      return it->second;
    };
  }
};

LineageIdentity identity(std::string comm, std::string cmdline, pid_t pgid, pid_t sid) {
  return {std::move(comm), std::move(cmdline), 4242, pgid, sid};
}

ProcEvent forked(pid_t parent, pid_t child) {
  return {ProcEvent::Kind::started, child, 0, parent, 1'000'000'000};
}
ProcEvent execed(pid_t pid) { return {ProcEvent::Kind::exec, pid, 0, 0, 1'000'000'000}; }
ProcEvent killed_by(pid_t pid, int sig, std::uint64_t at_ns = 2'500'000'000) {
  return {ProcEvent::Kind::exited, pid, sig, 0, at_ns};
}
ProcEvent exited_with(pid_t pid, int code) {
  return {ProcEvent::Kind::exited, pid, code << 8, 0, 3'000'000'000};
}

ProcEventBatch batch(std::vector<ProcEvent> events) { return {std::move(events), false}; }

// The 50 ms shape: a server forks two workers and is SIGKILLed before any look saw them.
TEST(EventLineage, AServerKilledBeforeAnyLookIsShownAsItsChildrensDeadParent) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  EventLineage table(proc.reader());
  EXPECT_TRUE(table.apply(batch({forked(100, 200), forked(100, 201)}), kWallOffset).empty());
  // Reaped by now: what was read at the fork's drain is what the table knows.
  proc.procs.erase(100);
  auto look = table.apply(batch({killed_by(100, SIGKILL)}), kWallOffset);
  EXPECT_EQ(look, (std::set<pid_t>{200, 201}));
  auto death = table.dead_parent_of(200);
  ASSERT_TRUE(death);
  EXPECT_EQ(death->dead.pid, 100);
  EXPECT_TRUE(death->dead.was_parent);
  EXPECT_EQ(death->dead.manner, ExitManner::signaled);
  EXPECT_EQ(death->dead.exit_value, SIGKILL);
  EXPECT_EQ(death->dead.cmdline, "python3 -m vllm.entrypoints.openai.api_server");
  EXPECT_EQ(death->dead.pgid, 100);
  EXPECT_EQ(death->dead.sid, 90);
  EXPECT_EQ(death->start_time, 4242u);
  EXPECT_DOUBLE_EQ(death->dead.died_at, kWallOffset + 2.5);
  EXPECT_TRUE(is_server_identity(death->dead));
  EXPECT_TRUE(crashed(death->dead));
}

TEST(EventLineage, ALiveParentIsNoDeath) {
  FakeProc proc;
  proc.procs[100] = identity("bash", "bash launch.sh", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200)}), kWallOffset);
  EXPECT_FALSE(table.dead_parent_of(200));
  EXPECT_FALSE(table.dead_parent_of(100));  // its own fork was before the table
  EXPECT_FALSE(table.dead_parent_of(999));
}

// An exit with code 0 is recorded (a launcher that finished) but calls for no look; one
// with a non-zero code is a crash like a signal.
TEST(EventLineage, ANormalExitIsKeptWithoutALookANonZeroOneIsACrash) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 start.py", 100, 90);
  proc.procs[300] = identity("python3", "python3 serve.py", 300, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), forked(300, 400)}), kWallOffset);
  EXPECT_TRUE(table.apply(batch({exited_with(100, 0)}), kWallOffset).empty());
  auto finished = table.dead_parent_of(200);
  ASSERT_TRUE(finished);
  EXPECT_EQ(finished->dead.manner, ExitManner::exited);
  EXPECT_EQ(finished->dead.exit_value, 0);
  EXPECT_FALSE(crashed(finished->dead));
  EXPECT_EQ(table.apply(batch({exited_with(300, 3)}), kWallOffset), std::set<pid_t>{400});
  EXPECT_EQ(table.dead_parent_of(400)->dead.exit_value, 3);
}

// Memory: a dead parent is kept while a child lives and forgotten with its last child;
// a parent's names only while it has living children; leaves hold no names.
TEST(EventLineage, WhatIsKeptIsPrunedWhenTheChildrenAreGone) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m sglang.launch_server", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), forked(100, 201), killed_by(100, SIGKILL)}), kWallOffset);
  EXPECT_EQ(table.dead(), 1u);
  EXPECT_EQ(table.size(), 3u);
  table.apply(batch({exited_with(200, 0)}), kWallOffset);
  EXPECT_EQ(table.dead(), 1u);
  EXPECT_TRUE(table.dead_parent_of(201));
  table.apply(batch({killed_by(201, SIGTERM)}), kWallOffset);
  EXPECT_EQ(table.size(), 0u);
  // A process that started before the table, whose only child exited: forgotten too.
  table.apply(batch({forked(100, 500), exited_with(500, 0)}), kWallOffset);
  EXPECT_EQ(table.size(), 0u);
}

TEST(EventLineage, AChildThatExitedIsNotLookedAtAndALeafHasNoDeath) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  EventLineage table(proc.reader());
  auto look = table.apply(
      batch({forked(100, 200), forked(100, 201), exited_with(201, 1), killed_by(100, SIGKILL)}),
      kWallOffset);
  EXPECT_EQ(look, std::set<pid_t>{200});
  EXPECT_FALSE(table.dead_parent_of(201));
}

// Names are read once a parent has a living child, after the batch: a burst of children
// all gone by its end costs no read. A parent that dies within the batch is read at its
// exit (a zombie still has its stat line).
TEST(EventLineage, NamesAreReadForParentsWithLivingChildrenOnly) {
  FakeProc proc;
  proc.procs[100] = identity("make", "make -j8", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), exited_with(200, 0), forked(100, 201), exited_with(201, 0)}),
              kWallOffset);
  EXPECT_EQ(proc.reads, 0);
  proc.procs[300] = identity("launch.sh", "", 300, 90);  // a zombie: no command line
  table.apply(batch({forked(300, 400), killed_by(300, SIGKILL)}), kWallOffset);
  EXPECT_EQ(proc.reads, 1);
  EXPECT_EQ(table.dead_parent_of(400)->dead.comm, "launch.sh");
}

TEST(EventLineage, AnExecIsReadAgain) {
  FakeProc proc;
  proc.procs[100] = identity("bash", "bash", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200)}), kWallOffset);
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  table.apply(batch({execed(100), killed_by(100, SIGKILL)}), kWallOffset);
  EXPECT_EQ(table.dead_parent_of(200)->dead.comm, "python3");
}

// A pid is reused: the dead parent's record still names its own children, never the new
// process's; a child's reused pid is another process with another parent.
TEST(EventLineage, AReusedPidNeverInheritsARecord) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  proc.procs[50] = identity("bash", "bash", 50, 50);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), killed_by(100, SIGKILL), forked(50, 100)}), kWallOffset);
  ASSERT_TRUE(table.dead_parent_of(200));
  EXPECT_EQ(table.dead_parent_of(200)->dead.cmdline,
            "python3 -m vllm.entrypoints.openai.api_server");
  EXPECT_FALSE(table.dead_parent_of(100));  // the new 100's parent (50) lives
  table.apply(batch({exited_with(200, 0), forked(50, 200)}), kWallOffset);
  EXPECT_FALSE(table.dead_parent_of(200));
}

TEST(EventLineage, LostEventsClearTheTable) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), killed_by(100, SIGKILL)}), kWallOffset);
  ProcEventBatch lost;
  lost.lost = true;
  table.apply(lost, kWallOffset);
  EXPECT_FALSE(table.dead_parent_of(200));
  EXPECT_EQ(table.size(), 0u);
}

TEST(EventLineage, TheTableIsBounded) {
  FakeProc proc;
  EventLineage table(proc.reader(), 4);
  table.apply(batch({forked(100, 200), forked(100, 201), forked(100, 202), forked(100, 203),
                     forked(300, 400)}),
              kWallOffset);
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.untracked(), 2u);
  table.apply(batch({killed_by(100, SIGKILL)}), kWallOffset);
  EXPECT_FALSE(table.dead_parent_of(203));  // not recorded: unknown, not invented
  EXPECT_TRUE(table.dead_parent_of(202));
}

TEST(EventLineage, KernelThreadsAreNotKept) {
  FakeProc proc;
  EventLineage table(proc.reader());
  table.apply(batch({forked(2, 700)}), kWallOffset);
  EXPECT_EQ(table.size(), 0u);
}

// The one rule (classify_lineage) on what the table gives, as the agent feeds it.
Holder worker_of(pid_t pid, pid_t adopter, pid_t pgid, pid_t sid) {
  Holder h;
  h.id = {pid, 777};
  h.ppid = adopter;
  h.pgid = pgid;
  h.sid = sid;
  h.comm = "python3";
  h.cmdline = "python3 worker.py";
  h.gpu_minors = {0};
  return h;
}

std::vector<Holder> judged(const EventLineage& table, std::vector<Holder> holders) {
  std::map<pid_t, DeadParent> dead;
  for (const auto& h : holders)
    if (auto d = table.dead_parent_of(h.id.pid)) {
      d->dead.holder_start = h.id.start_time;
      d->dead.adopter = h.ppid;
      dead.emplace(h.id.pid, d->dead);
    }
  classify_lineage(holders, dead, kWallOffset + 3);
  return holders;
}

TEST(EventLineage, AKilledServersWorkersAreWitnessedOrphans) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), forked(100, 201), killed_by(100, SIGKILL)}), kWallOffset);
  auto hs = judged(table, {worker_of(200, 1, 100, 90), worker_of(201, 1, 100, 90)});
  for (const auto& h : hs) {
    EXPECT_TRUE(h.orphaned) << h.detached_reason;
    EXPECT_EQ(h.provenance, Provenance::witnessed) << h.orphan_reason;
    EXPECT_TRUE(unattended_may_act(h));
  }
}

TEST(EventLineage, ALauncherScriptKilledWhileItsGroupsWorkersRunIsAWitnessedCrash) {
  FakeProc proc;
  proc.procs[100] = identity("launch.sh", "/bin/bash ./launch.sh", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), killed_by(100, SIGKILL)}), kWallOffset);
  auto hs = judged(table, {worker_of(200, 1, 100, 90)});
  EXPECT_TRUE(hs[0].orphaned) << hs[0].detached_reason;
  EXPECT_EQ(hs[0].provenance, Provenance::witnessed);
}

// W4-01's shape through the events: a starter that exits 0 after starting a server in a
// session of its own leaves a detached server, never a witnessed orphan.
TEST(EventLineage, AStarterThatExitedNormallyLeavesItsSetsidServerDetached) {
  FakeProc proc;
  proc.procs[100] = identity("python3", "python3 -m vllm.entrypoints.openai.api_server", 100, 90);
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), exited_with(100, 0)}), kWallOffset);
  auto hs = judged(table, {worker_of(200, 1, 200, 200)});
  EXPECT_FALSE(hs[0].orphaned) << hs[0].orphan_reason;
  EXPECT_TRUE(hs[0].detached);
}

TEST(EventLineage, AnUnreadParentIsNoWitness) {
  FakeProc proc;  // reaped before any read: names unknown
  EventLineage table(proc.reader());
  table.apply(batch({forked(100, 200), killed_by(100, SIGKILL)}), kWallOffset);
  auto hs = judged(table, {worker_of(200, 1, 100, 90)});
  EXPECT_NE(hs[0].provenance, Provenance::witnessed) << hs[0].orphan_reason;
}

}  // namespace event_lineage_test
}  // namespace gpureap::proc
