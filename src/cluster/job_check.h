#pragma once
// The GPU side of a Slurm job's boundaries, over the node context and free's engine:
//  - after a job (epilog): free what the job left on the node and verify the GPUs are
//    back at baseline. The job's leftovers are the holders whose environment holds
//    SLURM_JOB_ID=<id> (escaped workers keep it: setsid and double forks do not clear
//    an environment), whose cgroup has the job's directory (job_<id>, proctrack/cgroup
//    and cgroup v2), or orphans on the job's GPUs; never a process that a running job
//    claims by its cgroup or its environment;
//  - before a job (prolog): the allocated GPUs must be at baseline; orphans on them
//    may be freed first (a site's choice).
// What stays held is returned per GPU, classified; draining the node is the caller's
// step (cluster/scontrol.h), with a reason the report renders.

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cluster/slurm_env.h"
#include "inventory/node.h"
#include "reclaim/plan.h"
#include "reclaim/audited_control.h"
#include "reclaim/reclaimer.h"

namespace gpureap::cluster {

/// One GPU whose memory stays held: how much above its baseline, why (the classes of
/// what holds it, one per kind, in classification order) and the pids involved.
struct HeldGpu {
  gpu::DeviceId gpu;
  std::uint64_t bytes = 0;
  std::vector<reclaim::LeftoverClass> classes;
  std::vector<pid_t> pids;
};

struct JobCheck {
  std::vector<gpu::DeviceId> job_gpus;  // the job's GPUs, ascending
  std::vector<gpu::DeviceId> checked;   // every GPU verified: the job's, and those its processes used
  reclaim::Plan plan;              // what was (or would have been) signalled first
  std::optional<reclaim::ReclaimReport> freed;  // the reclaim, when there was anything to do
  std::vector<HeldGpu> held;  // empty: every checked GPU at baseline (or the job's memory gone)
  std::vector<std::string> warnings;  // the inventory's, and what the job's variables left out
  std::string error;  // the check could not be made (NVML unusable, a GPU it cannot find): held
                      // is then empty and nothing was verified
  bool ok() const { return error.empty() && held.empty(); }
};

/// The epilog's selection for job `job_id` whose GPUs are `job_gpus`: any of (its
/// environment holds SLURM_JOB_ID=<id>), (its cgroup path has a component job_<id>),
/// (orphaned, on one of `job_gpus`); and in every case not a process of another of
/// `running_jobs`, by its cgroup or its environment (running_jobs.h `running_job_of`).
/// `gpus` is left empty for the caller.
reclaim::Selection job_selection(const std::string& job_id, const std::vector<gpu::DeviceId>& job_gpus,
                                 const std::set<std::string>& running_jobs);

/// After the job: frees its leftovers (above) within `options` (grace, settle, timeout,
/// deadline; the selection is set here) and verifies. `control` signals (the system's,
/// or a fake in tests) and records each signal in its audit trail (actor slurm-epilog).
/// Nothing is signalled when there is nothing to do.
JobCheck clean_up_after_job(inventory::Node& node, reclaim::AuditedControl& control,
                            const SlurmJob& job, const reclaim::ReclaimOptions& options);

/// Before the job: each of the job's GPUs must be at baseline with no process using it.
/// With `free_orphans`, orphaned holders on them (that no running job claims) are freed
/// first; memory that is still falling is waited for until `options.deadline` (at most
/// `options.stalled_after`). What is left is classified.
JobCheck check_before_job(inventory::Node& node, reclaim::AuditedControl& control,
                          const SlurmJob& job, const reclaim::ReclaimOptions& options,
                          bool free_orphans);

}  // namespace gpureap::cluster
