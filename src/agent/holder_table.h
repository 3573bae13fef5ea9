#pragma once
// The holders the agent knows (agent/watcher.h), by pid, and the problems of the scans
// that found them: what a full scan found, updated by each scan of a few pids. A scan
// that ran out of descriptors is a failed look, not "these processes hold nothing": the
// holders it read are updated, every other one is kept as the last look saw it (W3-04).

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "proc/holder_scan.h"

namespace gpureap::agent {

class HolderTable {
 public:
  using Holders = std::map<pid_t, proc::Holder>;

  const Holders& holders() const { return holders_; }
  Holders& holders() { return holders_; }

  /// A full scan's result: the table is what it found.
  void replace(proc::ScanResult&& result);
  /// A scan of `pids` only: each is a holder only if found again, its problems the new ones.
  void rescanned(const std::set<pid_t>& pids, proc::ScanResult&& result);
  /// A scan that ran out of descriptors: the holders it read updated, the others kept.
  void update_read(proc::ScanResult& result);
  /// The table as a scan's result: its holders, their problems, and `processes` scanned
  /// (the last full scan's count when none is given).
  proc::ScanResult as_scan(std::optional<std::size_t> processes) const;

 private:
  Holders holders_;
  std::vector<proc::ScanProblem> problems_;
  std::size_t processes_scanned_ = 0;
};

}  // namespace gpureap::agent
