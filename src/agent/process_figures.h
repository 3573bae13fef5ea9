#pragma once
// The agent's own process figures for /metrics, named as the Prometheus client
// libraries name them (process_cpu_seconds_total, process_resident_memory_bytes,
// ...), so that the dashboards and alerts written for any exporter work on it.

#include <optional>
#include <string_view>

#include "report/metrics.h"

namespace gpureap::agent {

/// Parses a /proc/PID/stat line into the figures: CPU seconds (utime + stime),
/// virtual and resident bytes, the start time in seconds since the epoch.
/// `ticks_per_second` (sysconf _SC_CLK_TCK), `page_size` and `boot_time` (btime of
/// /proc/stat, seconds since the epoch) convert them. nullopt when malformed.
std::optional<report::ProcessFigures> parse_process_figures(std::string_view stat,
                                                            double ticks_per_second,
                                                            double page_size, double boot_time);

/// This process's user and system CPU time, all threads, from getrusage(RUSAGE_SELF)
/// (microseconds, where /proc/self/stat counts whole clock ticks); nullopt on failure.
std::optional<double> own_cpu_seconds();

/// This process's figures now (CPU time from own_cpu_seconds), with its open descriptors and its soft limit;
/// nullopt when /proc/self cannot be read.
std::optional<report::ProcessFigures> own_process_figures();

}  // namespace gpureap::agent
