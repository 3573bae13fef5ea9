// Running jobs from slurmstepd command lines (as 22.05.8 writes them: "slurmstepd: [2.batch]").

#include "cluster/running_jobs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::cluster {
namespace {

TEST(StepdJobId, EveryStepNamesItsJob) {
  EXPECT_EQ(stepd_job_id("slurmstepd: [2.batch]"), "2");
  EXPECT_EQ(stepd_job_id("slurmstepd: [42.0]"), "42");
  EXPECT_EQ(stepd_job_id("slurmstepd: [42.extern]"), "42");
  EXPECT_EQ(stepd_job_id("slurmstepd: [1234+1.0]"), "1234");  // a heterogeneous job's component
  EXPECT_EQ(stepd_job_id(std::string_view("slurmstepd: [7.batch]\0", 22)), "7");
  for (const char* other : {"slurmstepd", "slurmstepd: []", "slurmstepd: [x.0]", "slurmstepd: [42",
                            "python3 slurmstepd: [1.0]", "slurmstepd: [42x.0]"})
    EXPECT_EQ(stepd_job_id(other), std::nullopt) << other;
}

TEST(RunningJobs, OnlySlurmstepdProcessesCount) {
  TestTempDir proc("gpureap-jobs-test");
  auto cmdline = [&](pid_t pid, std::string text) {
    std::filesystem::create_directories(proc.path(std::to_string(pid)));
    std::ofstream(proc.path(std::to_string(pid) + "/cmdline"), std::ios::binary) << text;
  };
  cmdline(10, std::string("slurmstepd: [5.batch]\0", 22));
  cmdline(11, std::string("slurmstepd: [6.extern]\0", 23));
  cmdline(12, std::string("slurmstepd: [99.0]\0", 19));  // a job's own process pretending
  std::vector<proc::ProcessEntry> table = {{{10, 1}, 1, 10, 10, 0, 'S', 0, "slurmstepd", false},
                                           {{11, 1}, 1, 11, 11, 0, 'S', 0, "slurmstepd", false},
                                           {{12, 1}, 1, 12, 12, 0, 'S', 0, "python3", false}};
  EXPECT_EQ(running_jobs(table, proc.dir()), (std::set<std::string>{"5", "6"}));
}

// W2-11: the cgroup first (a whole job_<id> component of a running job), else the
// environment's SLURM_JOB_ID; a finished job's or a look-alike component claims nothing.
TEST(RunningJobOf, ACgroupOrAnEnvironmentNamesARunningJob) {
  const std::set<std::string> running = {"43", "7"};
  const std::string v2 = "/system.slice/slurmstepd.scope/job_43/step_0/user/task_0";
  EXPECT_EQ(running_job_of(v2, std::nullopt, running), "43");
  EXPECT_EQ(running_job_of("/slurm/uid_1000/job_7/step_batch", std::nullopt, running), "7");
  EXPECT_EQ(running_job_of(v2, "42", running), "43");  // the cgroup outweighs the environment
  EXPECT_EQ(running_job_of("/user.slice/x.scope", "7", running), "7");
  EXPECT_EQ(running_job_of("/user.slice/x.scope", "42", running), std::nullopt);
  EXPECT_EQ(running_job_of("/slurmstepd.scope/job_42/step_0", std::nullopt, running), std::nullopt);
  for (const char* lookalike : {"/x/job_430/step_0", "/x/myjob_43", "/x/job_43x", "/x/job_"})
    EXPECT_EQ(running_job_of(lookalike, std::nullopt, running), std::nullopt) << lookalike;
  EXPECT_EQ(running_job_of("", std::nullopt, running), std::nullopt);
  EXPECT_EQ(job_cgroup_component("42"), "job_42");
}

}  // namespace
}  // namespace gpureap::cluster
