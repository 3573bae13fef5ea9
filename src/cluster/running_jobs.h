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

/// The jobs with a slurmstepd among `table`'s processes (comm "slurmstepd"), whose
/// command lines are read under `proc_root`.
std::set<std::string> running_jobs(const std::vector<proc::ProcessEntry>& table,
                                   const std::string& proc_root);

}  // namespace gpureap::cluster
