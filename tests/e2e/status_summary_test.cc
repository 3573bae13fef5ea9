// `gpureap status --summary` and `--check` end to end (issue 27, docs/fleet-checks.md):
// one line per node, the same bytes on every healthy node, a stable line per problem,
// exit 0 clean / 1 problem / 3 unknown, within --deadline, answered by the agent when one
// runs. Real processes on simulated nodes.

#include <gtest/gtest.h>
#include <signal.h>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace status_summary_test {

using namespace std::chrono_literals;

// Kills the holders `hold` started (ours) and waits until the first holder is gone.
void kill_holders(const HoldResult& held) {
  for (pid_t p : held.pids) ::kill(p, SIGKILL);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(held.holders.at(0).first); }));
}

TEST(StatusSummary, HealthyNodesPrintTheSameBytesIdleOrBusy) {
  SimNode idle;
  SimNode busy;
  // A server at work (its parent, this test, is alive) and a nohup'd-like holder that
  // leads its own group after its launcher exited (detached): neither is a leak.
  auto live = busy.hold({"--gpu", "0", "--bytes", "60GiB"}, /*foreground=*/true);
  auto detached = busy.hold({"--gpu", "1", "--bytes", "30GiB"});
  ASSERT_EQ(live.holders.size(), 1u);
  ASSERT_EQ(detached.holders.size(), 1u);
  auto a = idle.gpureap({"status", "--summary"});
  auto b = busy.gpureap({"status", "--summary"});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, "clean: 8 GPUs, no leak\n");
  EXPECT_EQ(b.out, a.out) << "every healthy node prints the same bytes (clush -b folds them)";
  EXPECT_EQ(b.err, "");
  auto checked = busy.gpureap({"status", "--check"});
  EXPECT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_EQ(checked.out, a.out);
  // The table says why it is clean: the detached holder is shown as such.
  auto table = busy.gpureap({"--no-agent", "status"});
  EXPECT_NE(table.out.find("DETACHED"), std::string::npos) << table.out;
}

TEST(StatusSummary, OrphanedWorkersAreAProblemLineAndExitOne) {
  SimNode node;
  auto held = node.hold({"--gpu", "2", "--bytes", "20GiB", "--children", "2", "--orphan"});
  ASSERT_EQ(held.holders.size(), 2u);
  auto summary = node.gpureap({"status", "--summary"});
  EXPECT_EQ(summary.exit_code, 0) << "--summary alone shows; --check judges: " << summary.err;
  EXPECT_EQ(summary.out, "problem: orphaned memory on GPU 2,3\n");
  auto check = node.gpureap({"status", "--exit-code"});
  EXPECT_EQ(check.exit_code, 1) << check.err;
  EXPECT_EQ(check.out, summary.out);
  // --gpu narrows what is judged.
  auto other = node.gpureap({"status", "--check", "--gpu", "0,1,4-7"});
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.out, "clean: 6 GPUs, no leak\n");
}

// A ghost is a problem at once; memory no process holds right after its holder died is
// not driver-held for a one-shot check (it did not watch a release budget pass): it
// cannot tell, and says what it sees.
TEST(StatusSummary, AGhostIsAProblemAndMemoryNoProcessHoldsIsNotYetDriverHeld) {
  SimNode node;
  auto stuck = node.hold({"--gpu", "5", "--bytes", "20GiB", "--stuck"});
  kill_holders(stuck);
  auto ghost = node.hold({"--gpu", "1", "--bytes", "2GiB", "--ghost"});
  kill_holders(ghost);
  auto r = node.gpureap({"status", "--check"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "problem: ghost GPU 1; unknown: memory no process holds on GPU 5\n");
}

TEST(StatusSummary, WhatCannotBeToldIsUnknownAndExitThree) {
  SimNode node;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "init_fail"}).exit_code, 0);
  auto down = node.gpureap({"status", "--check"});
  EXPECT_EQ(down.exit_code, 3) << down.err;
  EXPECT_EQ(down.out, "unknown: NVML unusable (init_failed)\n");
  auto shown = node.gpureap({"status", "--summary"});
  EXPECT_EQ(shown.exit_code, 0) << "status shows; only --check judges";
  EXPECT_EQ(shown.out, down.out);

  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "query_fail", "--gpu", "4"}).exit_code, 0);
  auto lost = node.gpureap({"status", "--check"});
  EXPECT_EQ(lost.exit_code, 3) << lost.err;
  EXPECT_EQ(lost.out, "unknown: NVML cannot read GPU 4\n");

  auto no_dev = node.gpureap({"status", "--check"}, 60s, {{"GPUREAP_DEV_DIR", node.dir() + "/none"}});
  EXPECT_EQ(no_dev.exit_code, 3);
  EXPECT_EQ(no_dev.out, "unknown: device directory unreadable\n");
  EXPECT_NE(no_dev.err.find("cannot read device directory"), std::string::npos) << no_dev.err;
}

TEST(StatusSummary, UsageErrorsAreExitTwoBeforeAnyLook) {
  SimNode node({"--gpus", "2"});
  auto json = node.gpureap({"--json", "status", "--check"});
  EXPECT_EQ(json.exit_code, 2);
  EXPECT_EQ(json.out, "");
  auto deadline = node.gpureap({"status", "--deadline", "2s"});
  EXPECT_EQ(deadline.exit_code, 2);
  EXPECT_NE(deadline.err.find("--deadline"), std::string::npos) << deadline.err;
  auto bad = node.gpureap({"status", "--check", "--deadline", "soon"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--deadline"), std::string::npos) << bad.err;
  auto zero = node.gpureap({"status", "--check", "--deadline", "0s"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--deadline"), std::string::npos) << zero.err;
  auto gpu = node.gpureap({"status", "--check", "--gpu", "7"});
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_EQ(gpu.out, "");
}

// W3-13: NVML unusable as a whole (nvmlInit failing: a driver reload; hung past the
// deadline, as NHC runs the check), while /proc shows orphaned SGLang workers: a problem
// by their processes (exit 1), with NVML's state as what could not be told.
TEST(StatusSummary, W3_13_OrphansProcShowsAreAProblemWhileNvmlIsUnusable) {
  SimNode node({"--gpus", "4", "--memory", "80GiB"});
  node.hold({"--gpu", "1", "--bytes", "2GiB", "--children", "2", "--orphan", "--title",
             "sglang::scheduler_TP{k}"});
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "init_fail"}).exit_code, 0);
  auto down = node.gpureap({"--no-agent", "status", "--check"});
  EXPECT_EQ(down.exit_code, 1) << down.out << down.err;
  EXPECT_TRUE(down.out.starts_with("problem: orphaned memory on GPU ")) << down.out;
  EXPECT_NE(down.out.find("; unknown: NVML unusable (init_failed)\n"), std::string::npos)
      << down.out;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "hang_query"}).exit_code, 0);
  auto hung = node.gpureap({"--no-agent", "status", "--check", "--deadline", "3s"}, 20s);
  EXPECT_EQ(hung.exit_code, 1) << hung.out << hung.err;
  EXPECT_NE(hung.out.find("unknown: NVML unusable (hung)"), std::string::npos) << hung.out;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "ok"}).exit_code, 0);
}

TEST(StatusSummary, AHungDriverIsAnsweredWithinTheDeadline) {
  SimNode node;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "hang_init"}).exit_code, 0);
  auto r = node.gpureap({"status", "--check", "--deadline", "2s"}, 20s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "unknown: NVML unusable (hung)\n");
  // The hang never ends: the answer came from the deadline (the call's 20 s bound fails
  // a check that waits on it). No bound in ms: a loaded machine may answer late.
  // The default deadline is node-problem-detector's default timeout, 5 s.
  auto by_default = node.gpureap({"status", "--check"}, 20s);
  EXPECT_EQ(by_default.exit_code, 3);
}

TEST(StatusSummary, PastTheDeadlineTheLineSaysSoAndExitThree) {
  // A ghost candidate is sampled for a second (inventory::kBusyWindow): longer than the
  // deadline, so the watchdog answers at it and ends the process.
  SimNode node({"--gpus", "2"});
  auto ghost = node.hold({"--gpu", "1", "--bytes", "2GiB", "--ghost"});
  kill_holders(ghost);
  auto r = node.gpureap({"status", "--check", "--deadline", "400ms"}, 20s);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "unknown: no answer within 400ms\n");
  EXPECT_GE(r.seconds, 0.39);  // the line above is the watchdog's, not the ghost's verdict
  auto in_time = node.gpureap({"status", "--check"}, 20s);
  EXPECT_EQ(in_time.exit_code, 1) << in_time.err;
  EXPECT_EQ(in_time.out, "problem: ghost GPU 1\n");
}

TEST(StatusSummary, TheAgentAnswersFreshly) {
  SimNode node;
  // A long tick: what the check sees next was not in any tick of the agent's.
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "1m"});
  ASSERT_TRUE(agent.next_line(30s)) << agent.transcript();
  auto clean = node.gpureap({"status", "--check"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  auto held = node.hold({"--gpu", "6", "--bytes", "20GiB", "--children", "2", "--orphan"});
  ASSERT_EQ(held.holders.size(), 2u);
  auto problem = node.gpureap({"status", "--check"});
  EXPECT_EQ(problem.exit_code, 1) << problem.err;
  EXPECT_EQ(problem.out, "problem: orphaned memory on GPU 6,7\n");
  // The agent answered: a new process cannot start NVML now, the agent's worker runs on.
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "init_fail"}).exit_code, 0);
  auto via_agent = node.gpureap({"status", "--check"});
  EXPECT_EQ(via_agent.exit_code, 1) << via_agent.err;
  EXPECT_EQ(via_agent.out, problem.out);
  // A direct look cannot start NVML; the orphans /proc shows are a problem all the same
  // (W3-13).
  auto direct = node.gpureap({"status", "--check"}, 60s, {{"GPUREAP_NO_AGENT", "1"}});
  EXPECT_EQ(direct.exit_code, 1) << direct.err;
  EXPECT_EQ(direct.out,
            "problem: orphaned memory on GPU 6,7; unknown: NVML unusable (init_failed)\n");
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

}  // namespace status_summary_test
}  // namespace gpureap::e2e
