// The epilog's and prolog's engines on a simulated machine (reclaim/test_machine.h:
// fixture /proc, fake NVML, scripted processes, an event clock): who is a job's
// leftover, what is verified, what stays held.

#include "cluster/job_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "inventory/witness_store.h"
#include "reclaim/test_machine.h"
#include "reclaim/test_release_scene.h"
#include "gpu/test_devices.h"

namespace gpureap::cluster {
namespace {

using namespace std::chrono_literals;
using reclaim::LeftoverClass;
using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

class JobCheckTest : public ::testing::Test {
 protected:
  void set_file(pid_t pid, const std::string& name, const std::string& text) {
    std::ofstream(fmt::format("{}/{}/{}", m_.proc(), pid, name), std::ios::binary) << text;
  }
  proc::ProcessId spawn(pid_t pid, unsigned gpu, pid_t ppid, const std::string& job = "") {
    FakeProc p;
    p.pid = pid;
    p.ppid = ppid;
    p.gpu = gpu;
    p.bytes = 8 * kGiB;
    auto id = m_.spawn(p);
    if (!job.empty())
      set_file(pid, "environ", "PATH=/bin" + std::string(1, '\0') + "SLURM_JOB_ID=" + job + '\0');
    return id;
  }
  /// What the agent saw die (its witness record in the state directory, as a running
  /// agent keeps it): `id`'s server, vLLM's launcher, which an unattended path may act on.
  void witness_server_death(const proc::ProcessId& id, pid_t server) {
    const std::string dir = m_.node().baselines().dir();
    auto records = inventory::load_witnesses(dir, m_.proc());
    proc::DeadParent d{server, "python3", "python3 -m vllm.entrypoints.openai.api_server", 1.0,
                       true,   false,     1};
    d.holder_start = id.start_time;
    d.manner = proc::ExitManner::signaled;  // the kernel said: killed by SIGKILL
    d.exit_value = 9;
    records[id.pid] = d;
    ASSERT_TRUE(inventory::save_witnesses(dir, records));
  }
  void running_job(pid_t pid, const std::string& id) {
    FakeProc p;
    p.pid = pid;
    p.comm = "slurmstepd";
    p.cmdline = "slurmstepd: [" + id + ".batch]";
    m_.spawn(p);
  }
  reclaim::ReclaimOptions options() {
    reclaim::ReclaimOptions o;
    o.deadline = m_.clock.now() + 40s;
    return o;
  }
  static SlurmJob job(std::string id, std::vector<std::string> gpus) {
    return {std::move(id), std::move(gpus), {}};
  }

  TestMachine m_{3};
};

TEST_F(JobCheckTest, TheEpilogFreesTheJobsLeftoversOnly) {
  running_job(5000100, "7");
  auto mine = spawn(5000101, 0, 1, "42");          // escaped worker of job 42, on its GPU
  auto running = spawn(5000102, 1, 5000100, "7");  // job 7's worker, still running
  auto claimed = spawn(5000103, 0, 1, "7");        // orphan on job 42's GPU, but job 7's
  FakeProc claimed_p;
  claimed_p.pid = 5000103;
  m_.set_parent(claimed_p, 1, 5000100, 5000100);  // re-parented out of job 7's session
  auto stray = spawn(5000104, 2, 1, "42");        // job 42's, on a GPU not allocated to it
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_TRUE(c.error.empty()) << c.error;
  EXPECT_EQ(c.job_gpus, gpu::devs({0}));
  EXPECT_EQ(c.checked, gpu::devs({0, 2}));
  EXPECT_FALSE(m_.control.signals_of(mine).empty());
  EXPECT_FALSE(m_.control.signals_of(stray).empty());
  EXPECT_TRUE(m_.control.signals_of(running).empty());
  EXPECT_TRUE(m_.control.signals_of(claimed).empty());
  ASSERT_TRUE(c.freed);
  // GPU 0 still has job 7's orphan: left alone, its memory not counted against job 42.
  EXPECT_TRUE(c.ok()) << (c.held.empty() ? "" : gpu::device_text(c.held[0].gpu));
}

TEST_F(JobCheckTest, TheJobsCgroupAndOrphansOnItsGpuAreItsLeftovers) {
  auto in_cgroup = spawn(5000201, 1, 5000299);  // parent alive: not an orphan, no environment
  set_file(5000201, "cgroup", "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n");
  auto other_job = spawn(5000202, 1, 5000299);
  set_file(5000202, "cgroup", "0::/system.slice/slurmstepd.scope/job_420/step_0/user/task_0\n");
  FakeProc orphan_p;
  orphan_p.pid = 5000203;
  // An engine worker's title, its server seen to die by the agent: witnessed, an orphan
  // the epilog may act on.
  orphan_p.comm = "VLLM::Worker_TP";
  orphan_p.cmdline = "VLLM::Worker_TP0";
  orphan_p.gpu = 1;
  orphan_p.bytes = 2 * kGiB;
  auto orphan = m_.spawn(orphan_p);
  m_.set_parent(orphan_p, 1, 5000200, 5000200);  // re-parented, its session gone
  witness_server_death(orphan, 5000200);
  // The same shape no agent saw made: inferred, reported, never signalled unattended.
  FakeProc inferred_p = orphan_p;
  inferred_p.pid = 5000204;
  auto inferred = m_.spawn(inferred_p);
  m_.set_parent(inferred_p, 1, 5000210, 5000210);
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:1"}), options());
  EXPECT_FALSE(m_.control.signals_of(in_cgroup).empty());
  EXPECT_FALSE(m_.control.signals_of(orphan).empty());
  EXPECT_TRUE(m_.control.signals_of(other_job).empty());
  EXPECT_TRUE(m_.control.signals_of(inferred).empty());
}

TEST_F(JobCheckTest, TheRestOfTheJobGoesTooEvenWithoutAGpu) {
  FakeProc server;
  server.pid = 5000701;
  server.comm = "python3";
  server.cmdline = "python3 -m sglang.launch_server";
  auto server_id = m_.spawn(server);  // escaped, holds nothing
  set_file(5000701, "environ", std::string("SLURM_JOB_ID=42\0", 16));
  auto worker = spawn(5000702, 0, 5000701, "42");
  FakeProc bystander;
  bystander.pid = 5000703;
  auto other = m_.spawn(bystander);  // no environment entry: not the job's
  FakeProc hook;
  hook.pid = 5000705;
  hook.comm = "epilog.sh";
  auto hook_id = m_.spawn(hook);  // another epilog script of the job, still running
  set_file(5000705, "environ",
           std::string("SLURM_JOB_ID=42\0SLURM_SCRIPT_CONTEXT=epilog_slurmd\0", 51));
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_FALSE(m_.control.signals_of(server_id).empty());
  EXPECT_FALSE(m_.control.signals_of(worker).empty());
  EXPECT_TRUE(m_.control.signals_of(other).empty());
  EXPECT_TRUE(m_.control.signals_of(hook_id).empty());
  EXPECT_TRUE(c.ok());
  bool why = false;
  for (const auto& t : c.plan.targets) why = why || t.why == "part of job 42, which has ended";
  EXPECT_TRUE(why);
  // A job without GPUs: its leftovers go all the same.
  FakeProc lone;
  lone.pid = 5000704;
  auto lone_id = m_.spawn(lone);
  set_file(5000704, "environ", std::string("SLURM_JOB_ID=43\0", 16));
  auto none = clean_up_after_job(m_.node(), m_.audited(), job("43", {}), options());
  EXPECT_FALSE(m_.control.signals_of(lone_id).empty());
  EXPECT_TRUE(none.ok());
}

TEST_F(JobCheckTest, NothingLeftIsNothingToDo) {
  spawn(5000301, 1, 5000399, "8");  // another job's, on another GPU
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_TRUE(c.ok());
  EXPECT_FALSE(c.freed);
  EXPECT_TRUE(c.plan.targets.empty());
}

TEST_F(JobCheckTest, TheEpilogNeverCallsAGhostGpuClean) {
  // Issue 23: the epilog's "nothing to do" had its own rule, without free's ghost check:
  // a GPU busy with no process, and nothing to signal, was reported clean. One rule now
  // (reclaim::nothing_to_do over inventory::gpu_state).
  m_.gpu(0).utilization_gpu = 100;
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_TRUE(c.plan.targets.empty());
  EXPECT_FALSE(c.ok());
  ASSERT_EQ(c.held.size(), 1u) << c.error;
  EXPECT_EQ(c.held[0].gpu, gpu::dev(0));
  EXPECT_EQ(c.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::ghost_gpu}));
  m_.gpu(0).utilization_gpu = 0;
  EXPECT_TRUE(clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options()).ok());
}

TEST_F(JobCheckTest, TheEpilogNeverCallsAGpuItCannotMeasureClean) {
  // Issue 23: nothing to signal on a GPU NVML cannot read is not "nothing to do"
  // (reclaim::free_selection's not_measured): held as LeftoverClass::source_failed, so the node drains.
  m_.nvml().set_gpu_failure(gpu::dev(1), "GPU is lost");
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:1"}), options());
  EXPECT_FALSE(c.ok());
  ASSERT_EQ(c.held.size(), 1u) << c.error;
  EXPECT_EQ(c.held[0].gpu, gpu::dev(1));
  EXPECT_EQ(c.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::source_failed}));
  EXPECT_FALSE(c.freed);
}

TEST_F(JobCheckTest, MemoryTheDriverKeepsIsHeldAndClassified) {
  FakeProc p;
  p.pid = 5000401;
  p.gpu = 2;
  p.bytes = 12 * kGiB;
  p.release_after.reset();  // the driver keeps it
  m_.spawn(p);
  set_file(5000401, "environ", std::string("SLURM_JOB_ID=42\0", 16));
  // Driver-held once flat past the release budget (inventory/release_model.h), 2 s here.
  m_.node().releases().set_budget({std::chrono::seconds(2)});
  auto o = options();
  o.deadline = m_.clock.now() + 10s;
  const auto start = m_.clock.now();
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:2"}), o);
  EXPECT_LE(m_.clock.now() - start, 10s);
  ASSERT_EQ(c.held.size(), 1u);
  EXPECT_EQ(c.held[0].gpu, gpu::dev(2));
  EXPECT_EQ(c.held[0].bytes, 12 * kGiB);
  EXPECT_EQ(c.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::driver_held}));
}

TEST_F(JobCheckTest, WhatCannotBeVerifiedIsAnErrorNotClean) {
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:9"}), options());
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.error.find("the job's GPUs (minor:9)"), std::string::npos) << c.error;
  m_.nvml().set_failure(gpu::SourceState::init_failed, "driver not loaded");
  auto n = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_NE(n.error.find("NVML is unusable"), std::string::npos) << n.error;
}

TEST_F(JobCheckTest, ThePrologWantsTheJobsGpusAtBaseline) {
  EXPECT_TRUE(
      check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), false).ok());
  FakeProc orphan_p;
  orphan_p.pid = 5000501;
  orphan_p.comm = "VLLM::Worker_TP";  // an orphan by its title (see above)
  orphan_p.cmdline = "VLLM::Worker_TP0";
  orphan_p.gpu = 0;
  orphan_p.bytes = 4 * kGiB;
  auto orphan = m_.spawn(orphan_p);
  m_.set_parent(orphan_p, 1, 5000500, 5000500);
  // One look's inference first: even the site's choice to free orphans does not act on it.
  auto not_freed =
      check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), true);
  EXPECT_FALSE(not_freed.ok());
  EXPECT_TRUE(m_.control.signals_of(orphan).empty());
  witness_server_death(orphan, 5000500);  // the agent saw its server die
  auto dirty = check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), false);
  ASSERT_EQ(dirty.held.size(), 1u);
  EXPECT_EQ(dirty.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::live_holder}));
  EXPECT_EQ(dirty.held[0].pids, (std::vector<pid_t>{5000501}));
  EXPECT_TRUE(m_.control.signals_of(orphan).empty());
  // The site's choice: free orphans first.
  auto freed = check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), true);
  EXPECT_TRUE(freed.ok()) << (freed.held.empty() ? freed.error : "held");
  EXPECT_FALSE(m_.control.signals_of(orphan).empty());
}

TEST_F(JobCheckTest, ThePrologRefusesAGhostGpu) {
  m_.gpu(0).utilization_gpu = 100;  // busy, no process, no memory (issue 15)
  auto ghost = check_before_job(m_.node(), m_.audited(), job("44", {"minor:0"}), options(), true);
  ASSERT_EQ(ghost.held.size(), 1u);
  EXPECT_EQ(ghost.held[0].gpu, gpu::dev(0));
  EXPECT_EQ(ghost.held[0].classes, (std::vector<LeftoverClass>{LeftoverClass::ghost_gpu}));
  m_.gpu(0).utilization_gpu = 0;
  EXPECT_TRUE(
      check_before_job(m_.node(), m_.audited(), job("44", {"minor:0"}), options(), true).ok());
}

TEST_F(JobCheckTest, ThePrologNeverFreesARunningJobsProcess) {
  running_job(5000600, "9");
  auto worker = spawn(5000601, 0, 5000600, "9");
  auto c = check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), true);
  EXPECT_TRUE(m_.control.signals_of(worker).empty());
  ASSERT_EQ(c.held.size(), 1u);
  EXPECT_EQ(c.held[0].gpu, gpu::dev(0));
}

// W2-11: a process in a running job's cgroup is that job's, whatever its environment says
// or lacks (apptainer --cleanenv clears it): never another job's leftover, even orphaned
// on the ending job's GPU; the prolog's --free-orphans leaves it too.
TEST_F(JobCheckTest, W2_11_ARunningJobsCgroupClaimsItsProcesses) {
  running_job(5000800, "7");
  const std::string job7 = "/system.slice/slurmstepd.scope/job_7/step_0/user/task_0";
  FakeProc cleared = {};
  cleared.pid = 5000801;
  cleared.gpu = 0;
  cleared.bytes = 4 * kGiB;
  cleared.cgroup = job7;
  auto cleared_id = m_.spawn(cleared);
  m_.set_parent(cleared, 1, 5000899, 5000899);  // orphaned, no environment entry
  FakeProc inherited = cleared;
  inherited.pid = 5000802;
  auto inherited_id = m_.spawn(inherited);  // names the ended job, but runs in job 7's cgroup
  set_file(5000802, "environ", std::string("SLURM_JOB_ID=42\0", 16));
  auto c = clean_up_after_job(m_.node(), m_.audited(), job("42", {"minor:0"}), options());
  EXPECT_TRUE(m_.control.signals_of(cleared_id).empty());
  EXPECT_TRUE(m_.control.signals_of(inherited_id).empty());
  EXPECT_TRUE(c.ok()) << c.error;
  bool said = false;
  for (const auto& sk : c.plan.skipped)
    said = said || sk.reason.find("its cgroup is under job_7") != std::string::npos;
  EXPECT_TRUE(said);
  auto before = check_before_job(m_.node(), m_.audited(), job("43", {"minor:0"}), options(), true);
  EXPECT_TRUE(m_.control.signals_of(cleared_id).empty());
  EXPECT_FALSE(before.ok());  // its memory is there all the same: job 43 cannot have GPU 0
}

// One release clock (issue 50, item 5; supervise/release_clock_test.cc has the other
// callers): the epilog waits for a job's memory exactly while the release model says it
// falls. 10 GiB of a job's holder NVML gives no process list for; 1 s after, 50 MiB of it
// comes back (under the model's step: no fall) or 200 MiB (a fall). Before, free's engine
// under the epilog took any 1 MiB for a fall and waited 3 s after it.
TEST(JobCheckReleaseClock, TheEpilogWaitsExactlyWhileTheModelSaysFalling) {
  constexpr std::chrono::milliseconds drop{1000};
  for (std::uint64_t step : {reclaim::testing::kSmallStep, reclaim::testing::kLargeStep}) {
    TestMachine m(1);
    reclaim::testing::stage_unlisted_holder(m, 5000901, step, drop);
    std::ofstream(fmt::format("{}/5000901/environ", m.proc()), std::ios::binary)
        << std::string("SLURM_JOB_ID=42\0", 16);
    reclaim::ReclaimOptions o;
    o.deadline = m.clock.now() + 40s;
    const auto start = m.clock.now();
    auto c = clean_up_after_job(m.node(), m.audited(), {"42", {"minor:0"}, {}}, o);
    ASSERT_EQ(c.held.size(), 1u) << step;
    const bool waited_for_the_fall = m.clock.now() - start >= drop + inventory::kFallingWindow;
    EXPECT_EQ(waited_for_the_fall, reclaim::testing::model_says_falling(step, drop)) << step;
  }
}

TEST(JobSelection, TheOrphanAlternativeOnlyWithTheJobsGpus) {
  auto with = job_selection("42", gpu::devs({0, 1}), {"7", "42"});
  ASSERT_EQ(with.any_of.size(), 3u);
  EXPECT_EQ(with.any_of[0].env, (std::vector<proc::EnvEntry>{{"SLURM_JOB_ID", "42"}}));
  EXPECT_EQ(with.any_of[1].cgroup_component, "job_42");
  EXPECT_TRUE(with.any_of[2].orphans_only);
  EXPECT_EQ(with.any_of[2].on_gpus, gpu::devs({0, 1}));
  // The job itself is not "another running job".
  // W2-11: every alternative leaves the other running jobs' processes alone, by
  // environment and by cgroup.
  for (const auto& f : with.any_of) {
    EXPECT_EQ(f.env_none, (std::vector<proc::EnvEntry>{{"SLURM_JOB_ID", "7"}}));
    EXPECT_EQ(f.cgroup_none, (std::vector<std::string>{"job_7"}));
  }
  EXPECT_EQ(job_selection("42", {}, {}).any_of.size(), 2u);
}

}  // namespace
}  // namespace gpureap::cluster
