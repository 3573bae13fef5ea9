#pragma once
// Prometheus text exposition (format 0.0.4) of the agent's view, for `/metrics`
// and node_exporter's textfile collector. Names and labels follow
// ../shared/reference/cluster-and-exporters.md §2.4: base units, per-GPU labels
// `gpu`, `uuid`, `pci_bus_id`, `minor` (joinable with dcgm-exporter's), one
// `gpureap_gpu_info` for name and driver, every class and kind always present.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "inventory/events.h"
#include "inventory/inventory.h"

namespace gpureap::report {

/// A cumulative histogram with fixed bucket bounds (seconds).
struct Histogram {
  static constexpr std::array<double, 10> kBounds{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  std::array<std::uint64_t, kBounds.size()> buckets{};  // count of observations <= bound
  std::uint64_t count = 0;
  double sum = 0;
  void observe(double seconds);
};

/// The agent process's own figures (agent/process_figures.h), exported under the
/// names every Prometheus client library uses (process_*).
struct ProcessFigures {
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;
  double open_fds = 0;
  double max_fds = 0;
};

/// What the agent counts between scrapes, beside the inventory.
struct AgentCounters {
  Histogram free_duration;                        // frees the agent performed (reaping)
  std::map<std::string, Histogram> release_seconds;  // releases observed, by phase
  std::map<std::string, Histogram> gate_seconds;  // --gate: verdict to node closed/opened, by mode
  std::map<std::string, std::uint64_t> gate_errors;  // --gate: actions that failed, by mode
  std::map<std::string, std::uint64_t> frees;     // result ("freed", "held", "nothing") -> count
  std::optional<double> last_free_timestamp;      // wall clock seconds
  std::map<inventory::EventKind, std::uint64_t> events;  // event kind -> count
  std::uint64_t events_dropped = 0;               // not written: stdout was not taking them
  std::uint64_t full_scans = 0;
  std::uint64_t incremental_scans = 0;
  std::uint64_t death_scans = 0;  // incremental scans a death caused
  /// The agent's last look ran out of file descriptors (gpureap_agent_degraded).
  bool look_failed = false;
  std::size_t watched_by_pidfd = 0;  // processes whose death the agent sees at once
  std::size_t watched_by_tick = 0;   // past its pidfd budget: seen at the next tick
  bool reaping = false;              // a reap is under way (answers are its last look)
  std::optional<ProcessFigures> process;  // nullopt: not exported
};

struct MetricsInput {
  const inventory::Inventory* inventory = nullptr;  // required
  const AgentCounters* counters = nullptr;          // nullptr: a one-shot export (no agent)
  std::string version;                              // gpureap_build_info{version}
  bool per_holder = false;                          // opt-in per-holder series
  double last_scrape_seconds = 0;                   // gpureap_scrape_duration_seconds
};

/// The whole exposition: HELP and TYPE once per metric, each series once, ends in "\n".
std::string render_metrics(const MetricsInput& input);

/// Content-Type for the exposition.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace gpureap::report
