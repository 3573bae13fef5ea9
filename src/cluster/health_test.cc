// The health check's verdict on a simulated machine (reclaim/test_machine.h: a fixture
// /proc, a fake NVML, a fake clock), and the NHC rule for draining and resuming.

#include "cluster/health.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "reclaim/free_lock.h"
#include "reclaim/test_machine.h"
#include "util/test_temp_dir.h"
#include "gpu/test_devices.h"

namespace gpureap::cluster {
namespace {

using namespace std::chrono_literals;
using reclaim::LeftoverClass;
using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

TEST(HealthAction, DrainOnlyFreeNodesResumeOnlyOurOwn) {
  NodeState idle{"IDLE", ""}, mixed{"MIXED", ""};
  NodeState ours{"IDLE+DRAIN", "gpureap: GPU 1 driver_held 12.0 GiB"};
  NodeState admins{"IDLE+DRAIN", "disk replacement"};
  NodeState down{"DOWN+NOT_RESPONDING", "Not responding"};
  EXPECT_EQ(decide_health_action(true, idle), HealthAction::none);
  EXPECT_EQ(decide_health_action(false, idle), HealthAction::drain);
  EXPECT_EQ(decide_health_action(false, mixed), HealthAction::drain);
  EXPECT_EQ(decide_health_action(true, ours), HealthAction::resume);
  EXPECT_EQ(decide_health_action(false, ours), HealthAction::keep);
  EXPECT_EQ(decide_health_action(true, admins), HealthAction::leave_alone);
  EXPECT_EQ(decide_health_action(false, admins), HealthAction::leave_alone);
  EXPECT_EQ(decide_health_action(false, down), HealthAction::leave_alone);
}

// Issue 50: an epilog drained the node with its memory still releasing; the health check
// resumes it only once the memory is back, and never drains an undrained node for a release.
TEST(HealthAction, ANodeDrainedForAReleaseIsResumedOnlyOnceTheMemoryIsBack) {
  NodeState idle{"IDLE", ""};
  NodeState ours{"IDLE+DRAIN", "gpureap: GPU 0 10.0 GiB still releasing (after job 42)"};
  NodeState admins{"IDLE+DRAIN", "disk replacement"};
  EXPECT_EQ(decide_health_action(true, ours, /*memory_back=*/false), HealthAction::keep);
  EXPECT_EQ(decide_health_action(true, ours, /*memory_back=*/true), HealthAction::resume);
  EXPECT_EQ(decide_health_action(true, idle, /*memory_back=*/false), HealthAction::none);
  EXPECT_EQ(decide_health_action(true, admins, /*memory_back=*/true), HealthAction::leave_alone);
}

class Health : public ::testing::Test {
 protected:
  // Memory no process holds is driver-held once watched flat past the release budget
  // (inventory/release_model.h); the health check's two looks are persist apart on the
  // fake clock, so a budget shorter than that lets them see it.
  void SetUp() override { m_.node().releases().set_budget({std::chrono::milliseconds(1)}); }
  // No free lock unless a test takes one.
  static HealthOptions options(std::chrono::milliseconds persist, std::string gpus) {
    HealthOptions o;
    o.persist = persist;
    if (!gpus.empty()) o.gpus = gpu::GpuSelector::parse(gpus).value();
    return o;
  }
  // A process of the fixture /proc with this environment (NUL-separated).
  void set_environ(pid_t pid, const std::string& text) {
    std::ofstream(fmt::format("{}/{}/environ", m_.proc(), pid), std::ios::binary) << text;
  }
  // A running job: a slurmstepd for it in the fixture /proc.
  void running_job(pid_t pid, const std::string& id) {
    FakeProc p;
    p.pid = pid;
    p.comm = "slurmstepd";
    p.cmdline = "slurmstepd: [" + id + ".batch]";
    m_.spawn(p);
  }
  FakeProc holder(pid_t pid, unsigned gpu, pid_t ppid) {
    FakeProc p;
    p.pid = pid;
    p.ppid = ppid;
    p.gpu = gpu;
    p.bytes = 8 * kGiB;
    return p;
  }
  TestMachine m_{3};
};

TEST_F(Health, ARunningJobsMemoryIsItsOwnWhateverItsShape) {
  running_job(4000100, "7");
  m_.spawn(holder(4000101, 0, 4000100));
  // Escaped into its own session and orphaned, but job 7 still runs.
  m_.spawn(holder(4000102, 1, 1));
  set_environ(4000101, std::string("SLURM_JOB_ID=7\0", 15));
  set_environ(4000102, std::string("SLURM_JOB_ID=7\0", 15));
  auto h = check_node_health(m_.node(), options(10ms, ""));
  EXPECT_TRUE(h.healthy()) << (h.held.empty() ? h.error : gpu::device_text(h.held[0].gpu));
  EXPECT_EQ(h.checked, gpu::devs({0, 1, 2}));
}

TEST_F(Health, AFinishedJobsProcessAndDriverHeldMemoryAreHeld) {
  running_job(4000200, "8");
  m_.spawn(holder(4000201, 0, 4000200));  // job 9 is over: no slurmstepd for it
  set_environ(4000201, std::string("SLURM_JOB_ID=9\0", 15));
  m_.gpu(2).memory->used += 12 * kGiB;  // no process holds it
  auto h = check_node_health(m_.node(), options(10ms, ""));
  ASSERT_EQ(h.held.size(), 2u);
  EXPECT_EQ(h.held[0].gpu, gpu::dev(0));
  EXPECT_EQ(h.held[0].bytes, 8 * kGiB);
  EXPECT_EQ(h.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::live_holder}));
  EXPECT_EQ(h.held[0].pids, (std::vector<pid_t>{4000201}));
  EXPECT_EQ(h.held[1].gpu, gpu::dev(2));
  EXPECT_EQ(h.held[1].classes, (std::vector<LeftoverClass>{LeftoverClass::driver_held}));
  EXPECT_EQ(h.held[1].bytes, 12 * kGiB);
}

TEST_F(Health, AGhostGpuIsHeldThoughItHoldsNoMemory) {
  m_.gpu(1).utilization_gpu = 100;  // busy, no process, no memory
  m_.gpu(0).utilization_gpu = 0;
  auto h = check_node_health(m_.node(), options(10ms, ""));
  ASSERT_EQ(h.held.size(), 1u);
  EXPECT_EQ(h.held[0].gpu, gpu::dev(1));
  EXPECT_EQ(h.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::ghost_gpu}));
  EXPECT_EQ(h.held[0].bytes, 0u);
}

TEST_F(Health, AnOrphanOutsideSlurmIsHeldAServiceIsNot) {
  m_.spawn(holder(4000301, 0, 1));  // ppid 1, its own session: a service init started
  auto service = check_node_health(m_.node(), options(10ms, ""));
  EXPECT_TRUE(service.healthy());
  auto orphan = holder(4000302, 1, 1);
  m_.spawn(orphan);
  m_.set_parent(orphan, 1, 4000300, 4000300);  // its group's leader and session are gone
  auto h = check_node_health(m_.node(), options(10ms, ""));
  ASSERT_EQ(h.held.size(), 1u);
  EXPECT_EQ(h.held[0].gpu, gpu::dev(1));
}

TEST_F(Health, HeldMemoryMustPersistAcrossTheTwoLooks) {
  // The driver is still releasing a finished job's memory: gone by the second look.
  m_.gpu(1).memory->used += 12 * kGiB;
  m_.clock.after(1s, [&] { m_.gpu(1).memory->used -= 12 * kGiB; });
  const auto start = m_.clock.now();
  auto h = check_node_health(m_.node(), options(3s, ""));
  EXPECT_TRUE(h.healthy()) << h.held.size();
  EXPECT_GE(m_.clock.now() - start, 3s);  // it did look twice, 3 s apart
  // Memory that stays: held.
  m_.gpu(1).memory->used += 12 * kGiB;
  EXPECT_EQ(check_node_health(m_.node(), options(3s, "")).held.size(), 1u);
}

TEST_F(Health, OnlyTheGpusAskedForAreChecked) {
  m_.gpu(2).memory->used += 12 * kGiB;
  auto h = check_node_health(m_.node(), options(10ms, "0,1"));
  EXPECT_TRUE(h.healthy());
  EXPECT_EQ(h.checked, gpu::devs({0, 1}));
  // W2-15: a selector this node cannot satisfy is the caller's usage error, not a
  // verdict on the node (which would drain it for good).
  auto bad = check_node_health(m_.node(), options(10ms, "7"));
  EXPECT_FALSE(bad.healthy());
  EXPECT_TRUE(bad.error.empty()) << bad.error;
  EXPECT_NE(bad.usage_error.find("--gpu"), std::string::npos) << bad.usage_error;
}

// W2-11: an orphan in a running job's cgroup with no SLURM_JOB_ID (a cleared
// environment) is that job's; in a finished job's cgroup it is a leftover.
TEST_F(Health, W2_11_ARunningJobsCgroupClaimsAnOrphanWithoutAnEnvironment) {
  running_job(4000400, "7");
  auto live = holder(4000401, 0, 1);
  live.cgroup = "/system.slice/slurmstepd.scope/job_7/step_0/user/task_0";
  m_.spawn(live);
  m_.set_parent(live, 1, 4000499, 4000499);
  EXPECT_TRUE(check_node_health(m_.node(), options(10ms, "")).healthy());
  auto ended = holder(4000402, 1, 1);
  ended.cgroup = "/system.slice/slurmstepd.scope/job_70/step_0/user/task_0";
  m_.spawn(ended);
  m_.set_parent(ended, 1, 4000498, 4000498);
  auto h = check_node_health(m_.node(), options(10ms, ""));
  ASSERT_EQ(h.held.size(), 1u);
  EXPECT_EQ(h.held[0].gpu, gpu::dev(1));
}

// W2-13: the looks are made under the free lock; one a free holds past lock_until skips
// the check (no verdict), and a lock let go is taken.
TEST_F(Health, W2_13_AFreeHoldingTheLockSkipsTheCheck) {
  TestTempDir state("gpureap-health-lock");
  m_.gpu(2).memory->used += 12 * kGiB;  // would be held: the skip must not say so
  auto acquired = reclaim::FreeLock::acquire(state.dir());
  ASSERT_TRUE(acquired.has_value()) << acquired.error().message;
  auto busy = std::make_unique<reclaim::FreeLock>(std::move(*acquired));
  HealthOptions o = options(10ms, "");
  o.lock_dir = state.dir();
  o.lock_until = std::chrono::steady_clock::now();
  auto skipped = check_node_health(m_.node(), o);
  EXPECT_FALSE(skipped.healthy());
  EXPECT_TRUE(skipped.held.empty());
  EXPECT_NE(skipped.skipped.find("another gpureap free (pid "), std::string::npos)
      << skipped.skipped;
  busy.reset();  // the free is over
  auto checked = check_node_health(m_.node(), o);
  EXPECT_TRUE(checked.skipped.empty()) << checked.skipped;
  EXPECT_EQ(checked.held.size(), 1u);
}

}  // namespace
}  // namespace gpureap::cluster
