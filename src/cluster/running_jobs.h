#pragma once
// Which Slurm jobs are running on this node, from the node itself: every job step
// runs under a slurmstepd whose command line names it ("slurmstepd: [42.batch]",
// "[42.0]", "[42.extern]"), whatever the proctrack plugin. No controller round trip,
// so the epilog and the health check can tell a running job's processes apart from
// a finished job's leftovers even when slurmctld does not answer.

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "proc/process_table.h"

namespace gpureap::cluster {

/// The job id in a slurmstepd command line (NULs or spaces between words):
/// "slurmstepd: [42.batch]" -> "42"; nullopt for anything else.
std::optional<std::string> stepd_job_id(std::string_view cmdline);

/// "job_42": job 42's component of its processes' cgroup paths (proctrack/cgroup, v1
/// and v2: …/slurmstepd.scope/job_42/step_0/…).
std::string job_cgroup_component(std::string_view job_id);

/// The rule that keeps a running job's processes out of every other job's leftovers
/// (W2-11): the job of `running` that a process belongs to by its cgroup path (a
/// component job_<id>; an escaped worker cannot leave it without privilege) or else by
/// `env_job`, its environment's SLURM_JOB_ID (kept by setsid and double forks, cleared
/// by `env -i` or apptainer --cleanenv). nullopt when neither names a running job.
/// The epilog's and the prolog's selections state the same rule as filters
/// (job_check.cc `exclude_jobs`).
std::optional<std::string> running_job_of(std::string_view cgroup,
                                          std::optional<std::string_view> env_job,
                                          const std::set<std::string>& running);

/// The jobs with a slurmstepd among `table`'s processes (comm "slurmstepd"), whose
/// command lines are read under `proc_root`.
std::set<std::string> running_jobs(const std::vector<proc::ProcessEntry>& table,
                                   const std::string& proc_root);

}  // namespace gpureap::cluster
