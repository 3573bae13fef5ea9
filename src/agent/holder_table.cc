#include "agent/holder_table.h"

#include <algorithm>

namespace gpureap::agent {

void HolderTable::replace(proc::ScanResult&& result) {
  holders_.clear();
  for (auto& h : result.holders) holders_.emplace(h.id.pid, std::move(h));
  problems_ = std::move(result.problems);
  processes_scanned_ = result.processes_scanned;
}

void HolderTable::rescanned(const std::set<pid_t>& pids, proc::ScanResult&& result) {
  for (pid_t p : pids) holders_.erase(p);  // no longer a holder unless found again
  std::erase_if(problems_, [&](const proc::ScanProblem& pr) { return pids.contains(pr.pid); });
  for (auto& h : result.holders) holders_[h.id.pid] = std::move(h);
  for (auto& pr : result.problems)
    if (pr.pid != 0) problems_.push_back(std::move(pr));
}

void HolderTable::update_read(proc::ScanResult& result) {
  for (auto& h : result.holders) holders_[h.id.pid] = std::move(h);
}

proc::ScanResult HolderTable::as_scan(std::optional<std::size_t> processes) const {
  proc::ScanResult scan;
  scan.holders.reserve(holders_.size());
  for (const auto& [pid, h] : holders_) scan.holders.push_back(h);
  scan.problems = problems_;
  scan.processes_scanned = processes.value_or(processes_scanned_);
  return scan;
}

}  // namespace gpureap::agent
