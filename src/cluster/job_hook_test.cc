// The Slurm hooks' policy: --when-held, the deadline's shares, the free lock around
// the check, and the node's drain or resume through a stand-in scontrol (a shell
// script recording its arguments, answering `show node` as told).

#include "cluster/job_hook.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "reclaim/free_lock.h"
#include "util/test_temp_dir.h"

namespace gpureap::cluster {
namespace {

using namespace std::chrono_literals;

// A stand-in scontrol: appends its arguments to scontrol.args; `show node` prints the
// line in the file `state` (when there is one); exits with the status in `status`.
class StandIn {
 public:
  StandIn() {
    std::ofstream(dir_.path("scontrol"))
        << "#!/bin/sh\n"
           "d=$(dirname \"$0\")\n"
           "printf '%s\\n' \"$*\" >> \"$d/scontrol.args\"\n"
           "[ \"$2\" = show ] && [ -f \"$d/state\" ] && cat \"$d/state\"\n"
           "exit $(cat \"$d/status\" 2>/dev/null || echo 0)\n";
    ::chmod(dir_.path("scontrol").c_str(), 0755);
  }
  Scontrol scontrol() const { return Scontrol(dir_.path("scontrol"), 5s); }
  void node_state(const std::string& line) const { std::ofstream(dir_.path("state")) << line << "\n"; }
  void fail_with(int status) const { std::ofstream(dir_.path("status")) << status << "\n"; }
  std::string calls() const {
    std::ifstream in(dir_.path("scontrol.args"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  TestTempDir dir_{"gpureap-job-hook-test"};
};

HookClock::time_point soon() { return HookClock::now() + 10s; }

JobCheck held_check() {
  JobCheck c;
  c.held.push_back(HeldGpu{});
  return c;
}

TEST(JobHook, WhenHeldDefaultsByMode) {
  EXPECT_TRUE(when_held("prolog", "").drain);
  EXPECT_TRUE(when_held("prolog", "").fail);  // drain-fail: the job is requeued
  EXPECT_TRUE(when_held("epilog", "").drain);
  EXPECT_FALSE(when_held("epilog", "").fail);
  EXPECT_FALSE(when_held("epilog", "fail").drain);
  EXPECT_TRUE(when_held("epilog", "fail").fail);
  EXPECT_FALSE(when_held("prolog", "drain").fail);
  EXPECT_TRUE(when_held("epilog", "drain-fail").fail);
}

TEST(JobHook, TheCheckLeavesScontrolItsShare) {
  const auto t0 = HookClock::now();
  auto t = hook_times(t0, 45s, 10s);
  EXPECT_EQ(t.end, t0 + 45s);
  EXPECT_EQ(t.check_end, t0 + 35s);
  // A short deadline: scontrol gets a quarter of it, not its whole timeout.
  t = hook_times(t0, 8s, 10s);
  EXPECT_EQ(t.check_end, t0 + 6s);
}

TEST(JobHook, TheCheckRunsUnderTheFreeLockOnly) {
  TestTempDir state("gpureap-job-hook-lock");
  {
    auto other = reclaim::FreeLock::acquire(state.dir());
    ASSERT_TRUE(other) << other.error().message;
    bool ran = false;
    JobCheck c = check_under_free_lock(state.dir(), HookClock::time_point{}, [&] {
      ran = true;
      return JobCheck{};
    });
    EXPECT_FALSE(ran);
    EXPECT_FALSE(c.error.empty());
    EXPECT_FALSE(c.ok());
  }
  bool held_during = false;
  JobCheck c = check_under_free_lock(state.dir(), HookClock::time_point{}, [&] {
    held_during = !reclaim::FreeLock::acquire(state.dir());  // ours: another cannot have it
    return held_check();
  });
  EXPECT_TRUE(held_during);
  EXPECT_EQ(c.held.size(), 1u);
  EXPECT_TRUE(reclaim::FreeLock::acquire(state.dir()));  // let go afterwards
}

TEST(JobHook, ACleanJobLeavesTheNodeAlone) {
  StandIn s;
  NodeOutcome n = settle_job_node(JobCheck{}, when_held("epilog", ""), "n1", "", s.scontrol(), soon());
  EXPECT_EQ(n.step, NodeStep::none);
  EXPECT_EQ(n.node, "n1");
  EXPECT_EQ(s.calls(), "");
  EXPECT_EQ(job_hook_end(JobCheck{}, n, when_held("epilog", "")), HookEnd::ok);
}

TEST(JobHook, HeldMemoryDrainsAsTheSiteChose) {
  StandIn s;
  const JobCheck held = held_check();
  NodeOutcome n = settle_job_node(held, when_held("epilog", ""), "n1", "gpureap: GPU 0 x",
                                  s.scontrol(), soon());
  EXPECT_EQ(n.step, NodeStep::drained);
  EXPECT_EQ(n.reason, "gpureap: GPU 0 x");
  EXPECT_EQ(s.calls(), "update nodename=n1 state=drain reason=gpureap: GPU 0 x\n");
  EXPECT_EQ(job_hook_end(held, n, when_held("epilog", "")), HookEnd::ok);  // handled
  EXPECT_EQ(job_hook_end(held, n, when_held("prolog", "")), HookEnd::still_held);

  StandIn t;
  n = settle_job_node(held, when_held("epilog", "fail"), "n1", "gpureap: GPU 0 x", t.scontrol(),
                      soon());
  EXPECT_EQ(n.step, NodeStep::not_drained);
  EXPECT_EQ(t.calls(), "");  // slurmd drains it on the exit status
  EXPECT_EQ(job_hook_end(held, n, when_held("epilog", "fail")), HookEnd::still_held);
}

TEST(JobHook, AFailedDrainOrCheckIsASystemEnd) {
  StandIn s;
  s.fail_with(1);
  const JobCheck held = held_check();
  NodeOutcome n = settle_job_node(held, when_held("epilog", ""), "n1", "gpureap: x", s.scontrol(),
                                  soon());
  EXPECT_EQ(n.step, NodeStep::not_drained);
  EXPECT_FALSE(n.error.empty());
  EXPECT_EQ(job_hook_end(held, n, when_held("epilog", "")), HookEnd::still_held);
  JobCheck unverified;
  unverified.error = "NVML is unusable";
  EXPECT_EQ(job_hook_end(unverified, n, when_held("epilog", "")), HookEnd::system);
}

TEST(JobHook, HealthDrainsResumesKeepsOrLeavesAlone) {
  HealthCheck healthy, held;
  held.held.push_back(HeldGpu{});
  std::optional<NodeState> state;
  {
    StandIn s;
    s.node_state("NodeName=n1 State=IDLE");
    auto n = settle_health_node(held, "n1", "gpureap: GPU 0 y", s.scontrol(), soon(), state);
    EXPECT_EQ(n.step, NodeStep::drained);
    ASSERT_TRUE(state);
    EXPECT_EQ(state->state, "IDLE");
    EXPECT_EQ(s.calls(), "-o show node n1\nupdate nodename=n1 state=drain reason=gpureap: GPU 0 y\n");
    EXPECT_EQ(health_end(held, n), HookEnd::still_held);
  }
  {
    StandIn s;
    s.node_state("NodeName=n1 State=IDLE+DRAIN Reason=gpureap: old [root@t]");
    auto n = settle_health_node(healthy, "n1", "", s.scontrol(), soon(), state);
    EXPECT_EQ(n.step, NodeStep::resumed);
    EXPECT_EQ(n.reason, "gpureap: old");
    EXPECT_EQ(s.calls(), "-o show node n1\nupdate nodename=n1 state=resume\n");
    EXPECT_EQ(health_end(healthy, n), HookEnd::ok);
    n = settle_health_node(held, "n1", "gpureap: new", s.scontrol(), soon(), state);
    EXPECT_EQ(n.step, NodeStep::kept_drained);
    EXPECT_EQ(n.reason, "gpureap: old");
  }
  {
    StandIn s;
    s.node_state("NodeName=n1 State=IDLE+DRAIN Reason=maintenance [root@t]");
    auto n = settle_health_node(healthy, "n1", "", s.scontrol(), soon(), state);
    EXPECT_EQ(n.step, NodeStep::left_alone);
    EXPECT_EQ(s.calls(), "-o show node n1\n");
  }
  {
    StandIn s;  // scontrol cannot say: no verdict on the node, a system end
    s.fail_with(1);
    auto n = settle_health_node(healthy, "n1", "", s.scontrol(), soon(), state);
    EXPECT_FALSE(state);
    EXPECT_EQ(n.step, NodeStep::none);
    EXPECT_FALSE(n.error.empty());
    EXPECT_EQ(health_end(healthy, n), HookEnd::system);
  }
}

TEST(JobHook, NodeStepNames) {
  EXPECT_EQ(enum_name(NodeStep::kept_drained), "kept_drained");
  EXPECT_EQ(enum_name(NodeStep::left_alone), "left_alone");
  EXPECT_EQ(enum_name(NodeStep::none), "none");
}

}  // namespace
}  // namespace gpureap::cluster
