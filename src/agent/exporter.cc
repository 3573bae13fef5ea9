#include "agent/exporter.h"

#include <utility>

#include "agent/http_server.h"
#include "agent/process_figures.h"

namespace gpureap::agent {

void Exporter::emit(const inventory::Event& event) {
  last_event_ = event;
  ++counters_.events[event.kind];
  if (sink_ && !sink_(event)) ++counters_.events_dropped;
}

void Exporter::observe_releases(const std::vector<inventory::ReleaseTracker::Completed>& done) {
  for (const auto& r : done) {
    counters_.release_seconds["exit_to_unlisted"].observe(r.exit_to_unlisted);
    counters_.release_seconds["unlisted_to_baseline"].observe(r.unlisted_to_baseline);
  }
}

void Exporter::gate_modes(const std::vector<std::string>& modes) {
  for (const auto& mode : modes) {
    counters_.gate_seconds[mode];
    counters_.gate_errors[mode];
  }
}

void Exporter::observe_gate(const std::vector<std::pair<std::string, double>>& done,
                            const std::map<std::string, std::uint64_t>& errors) {
  for (const auto& [mode, s] : done) counters_.gate_seconds[mode].observe(s);
  for (const auto& [mode, n] : errors) counters_.gate_errors[mode] += n;
}

void Exporter::observe_reap(bool freed, double seconds, double at) {
  ++counters_.frees[freed ? "freed" : "held"];
  counters_.free_duration.observe(seconds);
  counters_.last_free_timestamp = at;
}

std::string Exporter::metrics_text(const Watcher& watcher, bool reaping, bool process_figures) {
  counters_.full_scans = watcher.full_scans();
  counters_.incremental_scans = watcher.incremental_scans();
  counters_.death_scans = watcher.death_scans();
  counters_.look_failed = watcher.limits().look_failed.has_value();
  counters_.watched_by_pidfd = watcher.limits().watched;
  counters_.watched_by_tick = watcher.limits().unwatched;
  counters_.reaping = reaping;
  counters_.process = process_figures ? own_process_figures() : std::nullopt;
  report::MetricsInput input;
  input.inventory = &watcher.inventory();
  input.counters = &counters_;
  input.version = options_.version;
  input.per_holder = options_.per_holder;
  input.last_scrape_seconds = last_scrape_seconds_;
  return report::render_metrics(input);
}

Result<void> Exporter::start_textfile(std::string text) {
  if (auto written = write_textfile(*options_.textfile_dir, text); !written)
    return std::unexpected(written.error());
  last_textfile_ = std::move(text);
  return {};
}

void Exporter::update_textfile(std::string text) {
  if (text == last_textfile_) return;
  auto written = write_textfile(*options_.textfile_dir, text);
  if (written) {
    last_textfile_ = std::move(text);
    if (textfile_failing_ && options_.problems)
      options_.problems("--textfile " + *options_.textfile_dir + ": written again");
  } else if (!textfile_failing_ && options_.problems) {
    options_.problems(written.error().message +
                      "; the metrics there are stale until it can be written again");
  }
  textfile_failing_ = !written;
}

}  // namespace gpureap::agent
