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

std::string job_cgroup_component(std::string_view job_id) {
  return "job_" + std::string(job_id);
}

std::optional<std::string> running_job_of(std::string_view cgroup,
                                          std::optional<std::string_view> env_job,
                                          const std::set<std::string>& running) {
  constexpr std::string_view kPrefix = "job_";
  while (!cgroup.empty()) {
    auto slash = cgroup.find('/');
    std::string_view component = cgroup.substr(0, slash);
    if (component.starts_with(kPrefix)) {
      auto id = running.find(std::string(component.substr(kPrefix.size())));
      if (id != running.end()) return *id;
    }
    if (slash == std::string_view::npos) break;
    cgroup.remove_prefix(slash + 1);
  }
  if (env_job && running.contains(std::string(*env_job))) return std::string(*env_job);
  return std::nullopt;
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
