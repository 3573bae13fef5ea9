#include "cluster/running_jobs.h"

#include <algorithm>

namespace gpureap::cluster {

std::optional<std::string> stepd_job_id(std::string_view cmdline) {
  constexpr std::string_view kPrefix = "slurmstepd: [";
  if (!cmdline.starts_with(kPrefix)) return std::nullopt;
  cmdline.remove_prefix(kPrefix.size());
  auto digits =
      std::find_if(cmdline.begin(), cmdline.end(), [](char c) { return c < '0' || c > '9'; });
  std::size_t n = static_cast<std::size_t>(digits - cmdline.begin());
  // The id is followed by the step (".batch", ".0") or, for a heterogeneous job's
  // component, "+N".
  if (n == 0 || n == cmdline.size() ||
      (cmdline[n] != '.' && cmdline[n] != '+' && cmdline[n] != ']'))
    return std::nullopt;
  return std::string(cmdline.substr(0, n));
}

std::set<std::string> running_jobs(const std::vector<proc::ProcessEntry>& table,
                                   const std::string& proc_root) {
  std::set<std::string> out;
  for (const auto& e : table) {
    if (e.comm != "slurmstepd") continue;
    if (auto id = stepd_job_id(proc::read_cmdline(e.id.pid, proc_root))) out.insert(*id);
  }
  return out;
}

}  // namespace gpureap::cluster
