// Slurm's variables as the prolog and epilog get them (measured on 22.05.8), and
// the shapes newer Slurm uses (UUIDs in CUDA_VISIBLE_DEVICES).

#include "cluster/slurm_env.h"

#include <gtest/gtest.h>

#include <map>

namespace gpureap::cluster {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(SlurmJob, GpusAreDeviceMinorsNotIndices) {
  auto job = read_slurm_job(
      env_of({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "0,1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}));
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->id, "42");
  EXPECT_EQ(job->gpu_spec(), "minor:0,minor:1");
  EXPECT_TRUE(job->notes.empty());
}

TEST(SlurmJob, RangesAndSpacesAreRead) {
  auto minors = parse_job_gpus(" 2-4, 7 ,3");
  ASSERT_TRUE(minors) << minors.error().message;
  EXPECT_EQ(*minors, (std::vector<unsigned>{2, 3, 4, 7}));
  EXPECT_TRUE(parse_job_gpus("")->empty());
  for (const char* bad : {"gpu0", "1-", "3-1", "-1", "0x1", "1;2", "256"})
    EXPECT_FALSE(parse_job_gpus(bad)) << bad;
  EXPECT_NE(parse_job_gpus("gpu0").error().message.find("SLURM_JOB_GPUS 'gpu0'"),
            std::string::npos);
}

TEST(SlurmJob, UuidsInCudaVisibleDevicesAreTakenNumbersAreNot) {
  auto uuids = read_slurm_job(
      env_of({{"SLURM_JOB_ID", "7"}, {"CUDA_VISIBLE_DEVICES", "GPU-8f1c2d3e,GPU-0a0b0c0d"}}));
  ASSERT_TRUE(uuids);
  EXPECT_EQ(uuids->gpu_spec(), "GPU-8f1c2d3e,GPU-0a0b0c0d");
  // Both: the minors, and the UUIDs once each.
  auto both = read_slurm_job(env_of(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "3"}, {"CUDA_VISIBLE_DEVICES", "GPU-8f1c2d3e"}}));
  EXPECT_EQ(both->gpu_spec(), "minor:3,GPU-8f1c2d3e");
  // A bare number counts the GPUs the job sees (from 0 under ConstrainDevices): it names
  // no GPU of the node, so it is left out, and said.
  auto numbers = read_slurm_job(env_of({{"SLURM_JOB_ID", "7"}, {"CUDA_VISIBLE_DEVICES", "0"}}));
  ASSERT_TRUE(numbers);
  EXPECT_EQ(numbers->gpu_spec(), "");
  ASSERT_EQ(numbers->notes.size(), 1u);
  EXPECT_NE(numbers->notes[0].find("'0' left out"), std::string::npos) << numbers->notes[0];
}

// Issue 39: an AMD job's GPUs in ROCm's variables, read as CUDA_VISIBLE_DEVICES is.
TEST(SlurmJob, RocmsVisibleDevicesVariablesNameAnAmdJobsGpus) {
  auto rocr = read_slurm_job(env_of({{"SLURM_JOB_ID", "9"},
                                     {"ROCR_VISIBLE_DEVICES", "GPU-0000000000001001"},
                                     {"HIP_VISIBLE_DEVICES", "GPU-0000000000001002,GPU-0000000000001001"}}));
  ASSERT_TRUE(rocr);
  EXPECT_EQ(rocr->gpu_spec(), "GPU-0000000000001001,GPU-0000000000001002");
  auto numbers = read_slurm_job(env_of({{"SLURM_JOB_ID", "9"}, {"ROCR_VISIBLE_DEVICES", "0,1"}}));
  ASSERT_TRUE(numbers);
  EXPECT_EQ(numbers->gpu_spec(), "");
  ASSERT_EQ(numbers->notes.size(), 2u);
  EXPECT_NE(numbers->notes[0].find("ROCR_VISIBLE_DEVICES item '0' left out"), std::string::npos)
      << numbers->notes[0];
}

TEST(SlurmJob, MigDevicesInCudaVisibleDevicesAreTheJobsGpus) {
  auto job = read_slurm_job(env_of({{"SLURM_JOB_ID", "8"},
                                    {"CUDA_VISIBLE_DEVICES", "MIG-5a3f0000-1111, MIG-5a3f0000-2222"}}));
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->gpu_spec(), "MIG-5a3f0000-1111,MIG-5a3f0000-2222");
  EXPECT_TRUE(job->notes.empty());
  auto legacy = read_slurm_job(
      env_of({{"SLURM_JOB_ID", "8"}, {"CUDA_VISIBLE_DEVICES", "MIG-GPU-8f1c2d3e/1/0"}}));
  EXPECT_EQ(legacy->gpu_spec(), "MIG-GPU-8f1c2d3e/1/0");
  // SLURM_JOB_GPUS counts MIG GRES, not minors: minor:0 would be every MIG device of
  // GPU 0, a neighbour job's too. Left out, and said.
  auto with_gres = read_slurm_job(env_of(
      {{"SLURM_JOB_ID", "8"}, {"SLURM_JOB_GPUS", "0"}, {"CUDA_VISIBLE_DEVICES", "MIG-5a3f0000-1111"}}));
  ASSERT_TRUE(with_gres);
  EXPECT_EQ(with_gres->gpu_spec(), "MIG-5a3f0000-1111");
  ASSERT_EQ(with_gres->notes.size(), 1u);
  EXPECT_NE(with_gres->notes[0].find("SLURM_JOB_GPUS '0' left out"), std::string::npos)
      << with_gres->notes[0];
}

TEST(SlurmJob, TheJobIdIsRequiredAndANumber) {
  EXPECT_NE(read_slurm_job(env_of({})).error().message.find("SLURM_JOB_ID is not set"),
            std::string::npos);
  EXPECT_EQ(read_slurm_job(env_of({{"SLURM_JOBID", "9"}}))->id, "9");
  EXPECT_FALSE(read_slurm_job(env_of({{"SLURM_JOB_ID", "9; rm -rf /"}})));
  EXPECT_FALSE(read_slurm_job(env_of({{"SLURM_JOB_ID", ""}})));
  EXPECT_FALSE(read_slurm_job(env_of({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_GPUS", "x"}})));
  // A job without GPUs has none.
  auto none = read_slurm_job(env_of({{"SLURM_JOB_ID", "9"}}));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->gpu_spec(), "");
}

}  // namespace
}  // namespace gpureap::cluster
