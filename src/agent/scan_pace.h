#pragma once
// The pace of the agent's looks at /proc (agent/watcher.h): a full scan as a safety net
// at an interval, by default (`--full-scan-interval auto`) stretched past it so that it
// costs at most a share of a core; between them, incremental looks at a tick or a death.

#include <chrono>
#include <cstdint>

#include "util/clock.h"

namespace gpureap::agent {

/// When the agent's next full scan of /proc is due (the safety net), and how many looks
/// of each kind it took (agent/watcher.h: full, incremental, a death's).
class ScanPace {
 public:
  /// `full_scan` the interval; `automatic`: stretched so that the scans cost at most
  /// `share` of a core, up to `longest`.
  ScanPace(std::chrono::milliseconds full_scan, bool automatic, double share,
           std::chrono::milliseconds longest)
      : full_scan_(full_scan), automatic_(automatic), share_(share), longest_(longest) {}

  bool full_due(util::Clock::time_point now) const { return full_ == 0 || now >= next_full_; }
  /// A full scan that took `cpu` of this process's CPU time.
  void full_ran(std::chrono::nanoseconds cpu) {
    ++full_;
    last_full_cpu_ = cpu;
  }
  /// The next full scan: its interval after `now`.
  void schedule(util::Clock::time_point now) { next_full_ = now + interval(); }
  void incremental_ran(bool death) { ++(death ? death_ : incremental_); }

  std::uint64_t full() const { return full_; }
  std::uint64_t incremental() const { return incremental_; }
  std::uint64_t death() const { return death_; }
  util::Clock::time_point next_full() const { return next_full_; }

 private:
  std::chrono::milliseconds interval() const;

  std::chrono::milliseconds full_scan_;
  bool automatic_;
  double share_;
  std::chrono::milliseconds longest_;
  std::chrono::nanoseconds last_full_cpu_{0};
  util::Clock::time_point next_full_{};
  std::uint64_t full_ = 0, incremental_ = 0, death_ = 0;
};

}  // namespace gpureap::agent
