#pragma once
// What a Slurm prolog, epilog or health check learns from its environment. slurmd
// runs them with no PATH and none of its own environment, only Slurm's variables
// (slurm.conf(5), "Prolog and Epilog Scripts"; measured on 22.05.8:
// ../shared/reference/cluster-and-exporters.md §3.5):
//  - SLURM_JOB_ID (also SLURM_JOBID): the job;
//  - SLURM_JOB_GPUS: the job's GPUs as GRES indices, which with the usual
//    `File=/dev/nvidia[0-7]` are device minors, not NVML indices (they differ on some
//    machines: PrincetonUniversity/jobstats#34), so each becomes a `minor:N` selector;
//  - CUDA_VISIBLE_DEVICES: newer Slurm puts GPU UUIDs here (SlinkyProject/slurm-operator#112);
//    UUIDs are taken, bare numbers are not (they count the GPUs the job can see, from 0);
//    so are MIG devices (issue 25): `MIG-<uuid>`, and CUDA 11.0's `MIG-GPU-<uuid>/<gi>/<ci>`.
//    A job on MIG devices is resolved by them alone: its SLURM_JOB_GPUS counts MIG GRES,
//    which are not device minors (docs/slurm.md, "MIG");
//  - ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES: an AMD job's (Slurm sets the first),
//    read as CUDA_VISIBLE_DEVICES is: ROCm's UUIDs (`GPU-<16 hex>`) taken, numbers not
//    (gpu::all_visible_devices_variables);
//  - SLURMD_NODENAME: the node's name in slurm.conf (the health check gets only this).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::cluster {

/// A variable's value, or nullopt when it is not set (getenv, or a map in tests).
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

/// The process's own environment.
EnvLookup process_environment();

struct SlurmJob {
  std::string id;                          // digits only
  std::vector<std::string> gpu_selectors;  // "minor:0", "GPU-8f1c…", "MIG-5a3f…": for select_gpus
  std::vector<std::string> notes;          // what was left out and why (bare CVD numbers)

  /// The selectors as one --gpu spec ("minor:0,minor:1"); "" when the job has no GPU.
  std::string gpu_spec() const;
};

/// Reads the job from Slurm's variables. Fails, naming the variable, when SLURM_JOB_ID is
/// unset or not a number, or SLURM_JOB_GPUS is not a list of numbers and ranges ("0,2-3").
/// When CUDA_VISIBLE_DEVICES names a MIG device, SLURM_JOB_GPUS is left out (a note says so).
Result<SlurmJob> read_slurm_job(const EnvLookup& env);

/// The device minors in a SLURM_JOB_GPUS value: "0,1", "2-3", "" (none). Fails on
/// anything else, or on a number above 255 (the NVIDIA driver's minors are 0-254).
Result<std::vector<unsigned>> parse_job_gpus(std::string_view text);

}  // namespace gpureap::cluster
