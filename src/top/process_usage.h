#pragma once
// Per-process CPU and host memory for `gpureap top` (nvitop's %CPU and host MEM): each
// holder's /proc/PID/stat read at every look, CPU% over the time since the previous
// look (as top(1) does), resident memory from the same line. What cannot be read (a
// process gone between looks) is missing, never 0.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proc/holder.h"

namespace gpureap::top {

struct ProcessUsage {
  std::optional<double> cpu_percent;     // of one CPU (a busy 8-thread process: up to 800)
  std::optional<std::uint64_t> rss_bytes;  // resident host memory
};

/// The CPU% of `ticks` clock ticks (utime + stime) used over `seconds` of wall time:
/// nullopt when no time passed or the counter went back (another process, same pid).
std::optional<double> cpu_percent(std::uint64_t before_ticks, std::uint64_t after_ticks,
                                  double seconds, long clock_ticks);

class UsageSampler {
 public:
  explicit UsageSampler(std::string proc_root) : proc_root_(std::move(proc_root)) {}

  /// Reads `ids` now (at `now`); forgets processes not among them.
  void sample(const std::vector<proc::ProcessId>& ids, std::chrono::steady_clock::time_point now);

  /// The last sample's usage by process.
  const std::map<proc::ProcessId, ProcessUsage>& usage() const { return usage_; }

 private:
  struct Seen {
    std::uint64_t ticks = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::string proc_root_;
  std::map<proc::ProcessId, Seen> seen_;
  std::map<proc::ProcessId, ProcessUsage> usage_;
};

}  // namespace gpureap::top
