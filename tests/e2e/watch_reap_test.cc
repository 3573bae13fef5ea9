// `gpureap watch`'s reaping policy, its options file and SIGHUP, one agent per node,
// and its usage errors (issue 11 §5, §6), on the simulated node.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

#include "harness.h"
#include "watch_child.h"
#include "util/units.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace watch_reap_test {

using namespace std::chrono_literals;
using nlohmann::json;

// An engine worker's title (vLLM's). The reaper acts only on owned or witnessed
// evidence (docs/orphans.md): each orphan here is made by SimNode::crash_watched, a
// server the agent saw alive and saw die; an orphan no agent saw made is inferred,
// announced and never reaped (see Lineage tests).
constexpr const char* kWorkerTitle = "VLLM::Worker_TP0";

auto is_event(const std::string& kind) {
  return [kind](const json& j) { return j.value("event", "") == kind; };
}

std::vector<pid_t> holder_pids(const json& event) {
  std::vector<pid_t> pids;
  for (const auto& h : event["holders"]) pids.push_back(h["pid"].get<pid_t>());
  return pids;
}

TEST(WatchReap, DryRunAnnouncesAndTouchesNothing) {
  SimNode node;
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms", "--reap-dry-run"});
  auto held = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "4GiB", "--comm", kWorkerTitle});
  auto planned = agent.wait_for_json(is_event("reap_planned"), 20s);
  ASSERT_TRUE(planned) << agent.transcript();
  EXPECT_EQ(holder_pids(*planned), std::vector<pid_t>{held.holders[0].first});
  EXPECT_EQ((*planned)["bytes"], 4 * kGiB);
  // Planned once, not at every tick, and nothing was signalled.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(alive(held.holders[0].first));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  std::size_t plans = 0;
  for (const auto& l : agent.lines()) plans += l.text.find("\"reap_planned\"") != std::string::npos;
  EXPECT_EQ(plans, 1u) << agent.transcript();
}

TEST(WatchReap, OrphansPastTheirTimeAreFreedAndTheKeptOnesAreNot) {
  SimNode node;
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms", "--keep", "keep-me"});
  auto kept = node.crash_watched({"--gpu", "1", "--children", "1", "--bytes", "4GiB", "--comm",
                         kWorkerTitle, "--label", "keep-me"});
  auto doomed = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--comm", kWorkerTitle});
  auto reaped = agent.wait_for_json(is_event("reaped"), 30s);
  ASSERT_TRUE(reaped) << agent.transcript();
  EXPECT_EQ(holder_pids(*reaped), std::vector<pid_t>{doomed.holders[0].first});
  EXPECT_FALSE(alive(doomed.holders[0].first));
  auto freed = agent.wait_for_json(
      [](const json& j) { return j.value("event", "") == "memory_freed" && j["gpu"] == 0; }, 20s);
  EXPECT_TRUE(freed) << agent.transcript();
  // The kept orphan is older than --reap-orphans-after too, and still there.
  EXPECT_TRUE(alive(kept.holders[0].first));
  const std::string kept_pid = "\"pid\":" + std::to_string(kept.holders[0].first) + ",";
  for (const auto& l : agent.lines())
    if (l.text.find(kept_pid) != std::string::npos) {
      EXPECT_NE(l.text.find("\"orphaned_memory\""), std::string::npos)
          << "the kept holder is only ever announced as an orphan: " << l.text;
    }
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// A reap waits (here for memory that stays after its holder's death: the release model's
// budget, 30 s at least) on the reaper's own thread: meanwhile the loop still reads
// deaths and announces them. Before, the loop was inside the reap, and an orphan on
// another GPU was announced only once the reap had ended (and `status` answered from the
// look before the reap, without it).
TEST(WatchReap, AReapThatWaitsDoesNotDelayAnotherGpusOrphan) {
  SimNode node;
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms"});
  auto first = node.crash_watched(
      {"--gpu", "3", "--children", "1", "--bytes", "4GiB", "--stuck", "--comm", kWorkerTitle});
  // The reap has signalled its holder: it now waits for memory that never comes back.
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(first.holders[0].first); }, 30s))
      << agent.transcript();
  auto second = node.crash_watched(
      {"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--comm", kWorkerTitle});
  const pid_t worker = second.holders[0].first;
  auto announced = agent.wait_for_json(
      [&](const json& j) {
        if (j.value("event", "") != "orphaned_memory") return false;
        auto pids = holder_pids(j);
        return std::find(pids.begin(), pids.end(), worker) != pids.end();
      },
      20s);
  ASSERT_TRUE(announced) << agent.transcript();
  // Announced while the first reap still waited: no reap had ended before it.
  for (const auto& l : agent.lines()) {
    auto j = json::parse(l.text, nullptr, false);
    if (j.is_discarded()) continue;
    const std::string kind = j.value("event", "");
    if (kind == "orphaned_memory" && j == *announced) break;
    EXPECT_TRUE(kind != "reaped" && kind != "reap_failed") << agent.transcript();
  }
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

std::set<pid_t> reaped_pids(const WatchChild& agent) {
  std::set<pid_t> pids;
  for (const auto& l : agent.lines()) {
    auto j = json::parse(l.text, nullptr, false);
    if (j.is_discarded() || j.value("event", "") != "reaped") continue;
    for (pid_t p : holder_pids(j)) pids.insert(p);
  }
  return pids;
}

// W2-01: later rounds of a reap's reclaim once re-selected every orphan on the GPU:
// the one --keep protects and one not yet due died with the due one, unnamed. Every
// process that dies is named by a reaped event; the kept one lives.
TEST(WatchReap, W2_01_AReapSignalsOnlyTheDueOrphansItNames) {
  SimNode node;
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "2s", "--keep", "keepme"});
  auto due = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "5GiB", "--comm", kWorkerTitle});
  auto kept = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "10GiB", "--comm",
                         kWorkerTitle, "--label", "keepme-notebook"});
  ASSERT_TRUE(agent.wait_for_json(is_event("orphaned_memory"), 20s)) << agent.transcript();
  // A user's job that has just become an orphan on the same GPU: not due yet when the
  // first one is (orphaned a second later: the first one's 2 s are half gone).
  std::this_thread::sleep_for(1s);
  auto young = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "7GiB", "--comm", kWorkerTitle});
  const pid_t due_pid = due.holders[0].first, young_pid = young.holders[0].first;
  auto first = agent.wait_for_json(is_event("reaped"), 30s);
  ASSERT_TRUE(first) << agent.transcript();
  // The young one is reaped in its own time, and named when it is.
  EXPECT_TRUE(agent.wait_for_json(
      [&](const json& j) {
        auto pids = holder_pids(j);
        return j.value("event", "") == "reaped" &&
               std::find(pids.begin(), pids.end(), young_pid) != pids.end();
      },
      30s))
      << agent.transcript();
  EXPECT_EQ(reaped_pids(agent), (std::set<pid_t>{due_pid, young_pid})) << agent.transcript();
  EXPECT_FALSE(alive(due_pid));
  EXPECT_FALSE(alive(young_pid));
  EXPECT_TRUE(alive(kept.holders[0].first)) << agent.transcript();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W2-09: a reap that found the free lock taken (a person's free, an epilog) was marked
// tried for good. It is said once and retried once the lock is free.
TEST(WatchReap, W2_09_ABusyFreeLockIsRetried) {
  SimNode node;
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms"});
  const std::string lock_path = node.env().at("GPUREAP_STATE_DIR") + "/free.lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  ASSERT_GE(lock, 0) << lock_path;
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  auto held = node.crash_watched({"--gpu", "2", "--children", "1", "--bytes", "2GiB", "--comm", kWorkerTitle});
  const pid_t pid = held.holders[0].first;
  auto busy = agent.wait_for_json(is_event("reap_failed"), 20s);
  ASSERT_TRUE(busy) << agent.transcript();
  EXPECT_EQ(holder_pids(*busy), std::vector<pid_t>{pid});
  EXPECT_NE(busy->value("detail", "").find("retried at a later tick"), std::string::npos)
      << busy->dump();
  EXPECT_TRUE(alive(pid));
  ::close(lock);  // the other free is over
  auto reaped = agent.wait_for_json(is_event("reaped"), 20s);
  ASSERT_TRUE(reaped) << agent.transcript();
  EXPECT_EQ(holder_pids(*reaped), std::vector<pid_t>{pid});
  EXPECT_FALSE(alive(pid));
  std::size_t failures = 0;
  for (const auto& l : agent.lines())
    failures += l.text.find("\"reap_failed\"") != std::string::npos;
  EXPECT_EQ(failures, 1u) << "said once, not at every tick:\n" << agent.transcript();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// W2-10: a worker whose server died inside a live `gpureap run` is the run's, never the
// reaper's, whatever the orphan rule calls it.
TEST(WatchReap, W2_10_ALiveRunsMemberIsNeverReaped) {
  SimNode node;
  const std::string script =
      std::string("'") + GPUREAP_SIM_BIN + "' hold --dir '" + node.dir() +
      "' --gpu 1 --bytes 2GiB --children 1 --orphan --detach && exec sleep 60";
  WatchChild run = WatchChild::gpureap(node, {"run", "--", "/bin/sh", "-c", script});
  auto ready = run.wait_for_json([](const json& j) { return j.contains("holders"); }, 30s);
  ASSERT_TRUE(ready) << run.transcript();
  const pid_t member = (*ready)["holders"][0]["pid"].get<pid_t>();
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms"});
  // An orphan outside the run, due after the member: once it is reaped, the member
  // has been due (had it been reapable) for longer.
  auto other = node.crash_watched({"--gpu", "2", "--children", "1", "--bytes", "3GiB", "--comm", kWorkerTitle});
  auto reaped = agent.wait_for_json(is_event("reaped"), 30s);
  ASSERT_TRUE(reaped) << agent.transcript();
  EXPECT_EQ(holder_pids(*reaped), std::vector<pid_t>{other.holders[0].first});
  EXPECT_TRUE(alive(member)) << agent.transcript();
  EXPECT_FALSE(reaped_pids(agent).contains(member));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  run.terminate();
}

TEST(WatchReap, SighupRereadsTheOptionsFile) {
  SimNode node;
  const std::string config = node.dir() + "/watch.conf";
  std::ofstream(config) << "tick = \"200ms\"\n";
  WatchChild agent = start_json_agent(node, {"--config", config});
  auto held = node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "4GiB", "--comm", kWorkerTitle});
  ASSERT_TRUE(agent.wait_for_json(is_event("orphaned_memory"), 20s)) << agent.transcript();
  // No policy yet: nothing planned.
  std::ofstream(config) << "reap-orphans-after = \"300ms\"\nreap-dry-run = true\n";
  ASSERT_EQ(::kill(agent.pid(), SIGHUP), 0);
  auto planned = agent.wait_for_json(is_event("reap_planned"), 20s);
  ASSERT_TRUE(planned) << agent.transcript();
  EXPECT_EQ(holder_pids(*planned), std::vector<pid_t>{held.holders[0].first});
  // A broken file on the next SIGHUP is reported and the options in force stay.
  std::ofstream(config) << "reap-orphans-after = \"soon\"\n";
  ASSERT_EQ(::kill(agent.pid(), SIGHUP), 0);
  EXPECT_TRUE(SimNode::eventually([&] {
    agent.next_line(100ms);
    return agent.err().find("SIGHUP: --reap-orphans-after") != std::string::npos;
  })) << agent.transcript();
  EXPECT_TRUE(agent.running());
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

TEST(WatchReap, ASecondAgentRefusesNamingTheFirst) {
  SimNode node;
  WatchChild first = start_json_agent(node, {});
  auto second = node.gpureap({"watch", "--no-listen"}, 30s);
  EXPECT_EQ(second.exit_code, 3) << second.err;
  EXPECT_NE(second.err.find("another gpureap watch (pid " + std::to_string(first.pid()) + ")"),
            std::string::npos)
      << second.err;
  EXPECT_TRUE(first.running());
  EXPECT_EQ(first.terminate(), 0) << first.transcript();
}

TEST(WatchReap, UsageErrorsNameTheOption) {
  SimNode node;
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  for (const Case& c : std::vector<Case>{
           {{"--tick", "0"}, "--tick"},
           {{"--full-scan-interval", "soon"}, "--full-scan-interval"},
           {{"--keep", "(unclosed"}, "--keep"},
           {{"--reap-dry-run"}, "--reap-dry-run"},
           {{"--reap-orphans-after", "-5s"}, "--reap-orphans-after"},
           {{"--socket-group", "no-such-group-gpureap"}, "--socket-group"},
           {{"--config", "/nonexistent/watch.conf"}, "--config"},
       }) {
    std::vector<std::string> args = {"watch", "--no-listen"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = node.gpureap(args, 30s);
    EXPECT_EQ(r.exit_code, 2) << c.names << ": " << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace gpureap::e2e
