#pragma once
// What the agent says about what it sees, apart from its loop: each event to the sink
// (counted, the last kept for systemd's STATUS=), the counters behind /metrics, and the
// node_exporter textfile rewritten when its text changes. The loop thread only.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/options.h"
#include "agent/watcher.h"
#include "inventory/events.h"
#include "inventory/release_model.h"
#include "report/metrics.h"
#include "util/result.h"

namespace gpureap::agent {

class Exporter {
 public:
  /// `options` and `sink` outlive the exporter (the agent's).
  Exporter(const AgentOptions& options, const EventSink& sink) : options_(options), sink_(sink) {}

  /// Says `event` (to the sink) and counts it.
  void emit(const inventory::Event& event);
  /// The last event said, for systemd's STATUS= (nullptr: none yet).
  const inventory::Event* last_event() const { return last_event_ ? &*last_event_ : nullptr; }

  /// The releases the looks saw end (inventory/release_model.h), by phase.
  void observe_releases(const std::vector<inventory::ReleaseTracker::Completed>& done);
  /// --gate: the series of each mode exist from the start; `done` the steps taken (mode,
  /// seconds from the verdict), `errors` the failed actions.
  void gate_modes(const std::vector<std::string>& modes);
  void observe_gate(const std::vector<std::pair<std::string, double>>& done,
                    const std::map<std::string, std::uint64_t>& errors);
  /// A reap that acted: freed (or still held), its duration.
  void observe_reap(bool freed, double seconds, double at);

  /// The exposition from `watcher`'s look. `process_figures`: with the agent's own
  /// process_* series, for its HTTP endpoint only (in a textfile they would clash with
  /// node_exporter's own, and change at every tick). `reaping`: gpureap_reaping.
  std::string metrics_text(const Watcher& watcher, bool reaping, bool process_figures = false);
  /// How long the last scrape's own look took (gpureap_scrape_duration_seconds).
  void scrape_took(double seconds) { last_scrape_seconds_ = seconds; }

  /// --textfile at start: a directory that cannot be written is a mistake to say now, not
  /// an export that silently never happens (W2-07).
  Result<void> start_textfile(std::string text);
  /// Rewrites the textfile when `text` changed. A failure is said once (options.problems),
  /// and so is the recovery: not a line per tick (W2-07).
  void update_textfile(std::string text);

 private:
  const AgentOptions& options_;
  const EventSink& sink_;
  report::AgentCounters counters_;
  std::optional<inventory::Event> last_event_;
  std::string last_textfile_;
  bool textfile_failing_ = false;  // the last write failed (said once)
  double last_scrape_seconds_ = 0;
};

}  // namespace gpureap::agent
